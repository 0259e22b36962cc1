"""Pause and resume (issue 21): snapshot(), RunSnapshot.save/load, RunBudget.resume with an Authorization."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from budgetlens import Authorization, BudgetExceeded, RunBudget, RunSnapshot, Usage
from budgetlens.ingest.exporter import DuckDBSpanExporter
from budgetlens.store import read_connection


def _paused(**kwargs) -> RunBudget:
    """A run of 5,000 tokens that used 3,000 and was refused a 3,000-token call."""
    run = RunBudget(
        max_total_tokens=5_000, max_turns=10, run_id="fix-1", task_type="fix", team="core", **kwargs
    )
    res = run.reserve(3_000)
    run.record(Usage(2_500, 500), reservation=res)
    with pytest.raises(BudgetExceeded):
        run.reserve(3_000)
    return run


def test_a_snapshot_holds_limits_use_remaining_and_the_stop_reason():
    run = _paused()
    effect = run.begin_effect("open_pr")
    snap = run.snapshot()
    assert snap.run_id == "fix-1" and snap.task_type == "fix"
    assert snap.limits["max_total_tokens"] == 5_000
    assert snap.used["input_tokens"] == 2_500 and snap.used["output_tokens"] == 500
    assert snap.remaining["max_total_tokens"] == 2_000  # 5,000 - 3,000
    assert snap.remaining["max_turns"] == 9
    assert snap.remaining["max_cost_usd"] is None
    assert snap.stop_reason == "budget_tokens"
    assert snap.open_effects == ("open_pr",)
    assert snap.attribution["team"] == "core"
    run.confirm_effect(effect)


def test_resume_restores_use_raises_the_limit_and_records_the_authorization(tmp_path):
    paused = _paused()
    paused.snapshot().save(tmp_path / "fix-1.json")
    paused.finish()
    events = []
    auth = Authorization(by="alice", reason="the last test file", extra={"max_total_tokens": 10_000})
    run = RunBudget.resume(
        RunSnapshot.load(tmp_path / "fix-1.json"), authorization=auth, on_event=events.append
    )
    assert run.run_id == "fix-1"
    assert run.limits["max_total_tokens"] == 15_000
    assert run.used_tokens == 3_000 and run.stats().turns == 1
    res = run.reserve(3_000)  # refused before the raise, fits now
    run.record(Usage(2_000, 500), reservation=res)
    result = run.finish()
    assert result.stop_reason == "completed"
    assert result.used_tokens == 5_500 and result.turns == 2
    names = [(e.name, e.changed_by) for e in events]
    assert ("budgetlens.resumed", "alice: the last test file") in names
    assert ("budgetlens.limit_changed", "alice: the last test file") in names
    assert run.limit_changes[-1][:4] == ("max_total_tokens", 5_000, 15_000, "alice: the last test file")
    assert run.authorizations[0]["by"] == "alice"
    assert run.authorizations[0]["extra"] == {"max_total_tokens": 10_000}


def test_wall_time_goes_on_from_where_the_run_stopped():
    now = [100.0]
    run = RunBudget(max_duration_s=60, clock=lambda: now[0])
    now[0] = 140.0  # 40 s used
    snap = run.snapshot()
    assert snap.elapsed_s == 40.0 and snap.remaining["max_duration_s"] == 20.0
    later = [5_000.0]
    auth = Authorization(by="ops", extra={"max_duration_s": 30})
    resumed = RunBudget.resume(snap, authorization=auth, clock=lambda: later[0])
    later[0] = 5_049.0  # 40 + 49 = 89 s < 90
    resumed.before_turn()
    later[0] = 5_050.0  # 90 s
    with pytest.raises(BudgetExceeded) as caught:
        resumed.before_turn()
    assert caught.value.reason == "budget_time"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"by": "", "extra": {"max_total_tokens": 1}}, "Authorization.by"),
        ({"by": "a", "extra": {}}, "Authorization.extra"),
        ({"by": "a", "extra": {"max_tokens": 1}}, "unknown limit"),
        ({"by": "a", "extra": {"max_total_tokens": -5}}, "must be > 0"),
    ],
)
def test_a_bad_authorization_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Authorization(**kwargs)


def test_a_raise_of_a_limit_the_run_has_not_is_refused():
    with pytest.raises(ValueError, match="max_cost_usd"):
        RunBudget.resume(
            _paused().snapshot(), authorization=Authorization(by="a", extra={"max_cost_usd": 1.0})
        )


def test_a_bad_snapshot_file_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "bad.json"
    body = _paused().snapshot().to_dict()
    body["used"]["turns"] = -1
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match=r"bad\.json: .*used"):
        RunSnapshot.load(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="invalid JSON"):
        RunSnapshot.load(path)


@pytest.mark.system
def test_a_run_resumed_in_another_process_is_one_run_in_a_real_store(tmp_path, python):
    db, snap = tmp_path / "store.duckdb", tmp_path / "fix-1.json"
    exporter = DuckDBSpanExporter(db)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    paused = _paused(tracer=provider.get_tracer("agent"))
    paused.snapshot().save(snap)
    paused.finish()
    provider.shutdown()
    script = textwrap.dedent(
        f"""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from budgetlens import Authorization, RunBudget, RunSnapshot, Usage
        from budgetlens.ingest.exporter import DuckDBSpanExporter
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter({str(db)!r})))
        auth = Authorization(by="alice", reason="approved", extra={{"max_total_tokens": 10_000}})
        run = RunBudget.resume(RunSnapshot.load({str(snap)!r}), authorization=auth,
                               tracer=provider.get_tracer("agent"))
        res = run.reserve(3_000)
        run.record(Usage(2_000, 500), reservation=res)
        run.finish()
        provider.shutdown()
        """
    )
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with read_connection(db) as conn:
        runs = conn.execute(
            "SELECT run_id, total_tokens, turns, stop_reason, limit_total_tokens, model_calls FROM runs"
        ).fetchall()
        events = conn.execute(
            "SELECT name FROM budget_events WHERE run_id = 'fix-1' AND name = 'budgetlens.resumed'"
        ).fetchall()
    assert runs == [("fix-1", 5_500, 2, "completed", 15_000, 2)]
    assert events == [("budgetlens.resumed",)]
