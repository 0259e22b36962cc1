"""DuckDBSpanExporter: the in-process exporter behind a real SDK TracerProvider."""

from __future__ import annotations

import pytest
from _collector_helpers import SpanRecorder
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from budgetlens import DuckDBSpanExporter
from budgetlens import semconv as sc
from budgetlens.store import read_connection


@pytest.mark.system  # an in-process collector: seconds
def test_guard_spans_exported_in_process_become_runs(db_path):
    recorder = SpanRecorder()
    recorder.provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(db_path)))
    recorder.guard_run(
        "run-x",
        "summarize",
        [("gpt-4o-mini", 40, 10), ("gpt-4o-mini", 60, 5)],
        tools=3,
        warnings=1,
        stop_reason=sc.STOP_BUDGET_TOOLS,
    )
    recorder.provider.shutdown()
    with read_connection(db_path) as conn:
        row = conn.execute(
            "SELECT task_type, turns, tool_calls, model_calls, total_tokens, "
            "stop_reason, warnings, source FROM runs"
        ).fetchall()
    assert row == [("summarize", 2, 3, 2, 115, sc.STOP_BUDGET_TOOLS, 1, "otel-sdk")]


def test_export_reports_failure_instead_of_raising_when_the_store_is_unusable(tmp_path):
    directory = tmp_path / "a-directory"
    directory.mkdir()
    recorder = SpanRecorder()
    recorder.guard_run("run-y", "t", [("gpt-4o", 1, 1)])
    assert DuckDBSpanExporter(directory).export(recorder.spans()) == SpanExportResult.FAILURE


@pytest.mark.system  # an exporter into a store: seconds
def test_shutdown_is_idempotent_and_later_exports_fail(db_path):
    exporter = DuckDBSpanExporter(db_path)
    recorder = SpanRecorder()
    recorder.guard_run("run-z", "t", [("gpt-4o", 1, 1)])
    assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    exporter.shutdown()
    assert exporter.export(recorder.spans()) == SpanExportResult.FAILURE
    assert exporter.force_flush() is True


def test_db_path_defaults_to_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("BUDGETLENS_DB", str(tmp_path / "env.duckdb"))
    assert DuckDBSpanExporter().db_path == tmp_path / "env.duckdb"


@pytest.mark.system  # the whole guard telemetry round trip; the in-process export test stays fast
def test_real_guard_telemetry_round_trips_into_the_store(db_path):
    from budgetlens import BudgetExceeded, RunBudget
    from budgetlens.usage import Usage

    recorder = SpanRecorder()
    recorder.provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(db_path)))
    budget = RunBudget(
        max_total_tokens=1_000,
        max_tool_calls=5,
        task_type="triage",
        run_id="guard-run",
        tracer=recorder.tracer,
    )
    spent = 0
    try:
        for _ in range(10):
            budget.before_turn()
            reservation = budget.reserve(300, model="gpt-4o-mini")
            budget.record(
                Usage(input_tokens=250, output_tokens=50),
                model="gpt-4o-mini",
                reservation=reservation,
                provider="openai",
            )
            spent += 300
            budget.before_tool_call("bash")
    except BudgetExceeded:
        pass
    result = budget.finish()
    recorder.provider.shutdown()
    with read_connection(db_path) as conn:
        run = conn.execute(
            "SELECT run_id, task_type, model_calls, total_tokens, stop_reason, "
            "limit_total_tokens, tool_calls FROM runs"
        ).fetchall()
        calls = conn.execute("SELECT sum(input_tokens), sum(output_tokens) FROM model_calls").fetchone()
    assert run == [
        (
            "guard-run",
            "triage",
            spent // 300,
            result.usage.total_tokens,
            result.stop_reason,
            1_000,
            spent // 300,
        )
    ]
    assert result.stop_reason == sc.STOP_BUDGET_TOKENS
    assert calls == (250 * (spent // 300), 50 * (spent // 300))
