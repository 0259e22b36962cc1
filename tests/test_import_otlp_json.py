"""otlp-json importer: OTLP/JSON files (one document per file or per line) through the
collector's own mapping. Documents are built from real spans (the any-agent GenAI traces in
../shared/realdata, and spans of the real OTel SDK shaped like the guard's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _collector_helpers import SpanRecorder, anyagent_spans, otlp_json

from budgetlens.importers import ImportReport, import_paths, read_rows
from budgetlens.importers.otlp_json import SKIP_NOT_TRACES, SOURCE
from budgetlens.otlp.mapping import map_otlp_json
from budgetlens.store import read_connection


@pytest.fixture
def documents(realdata: Path) -> list[dict]:
    traces = sorted((realdata / "any-agent-genai-spans").glob("*_trace.json"))
    return [otlp_json(anyagent_spans(path)) for path in traces]


def _rows_by_kind(rows) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"call": [], "record": [], "event": []}
    for kind, row in rows:
        out[kind].append(row)
    return out


def test_rows_are_the_collector_mapping_of_each_document(documents, tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    for index, document in enumerate(documents):
        (folder / f"trace-{index}.json").write_text(json.dumps(document, indent=2))
    got = _rows_by_kind(read_rows("otlp-json", [folder]))
    expected = {"call": [], "record": [], "event": []}
    for document in documents:
        mapped = map_otlp_json(document, source=SOURCE)
        expected["call"] += mapped.calls
        expected["record"] += mapped.records
        expected["event"] += mapped.events
    assert got == expected
    assert len(got["call"]) == 25  # SOURCES.md §7: 25 call_llm spans over the 7 traces


def test_one_document_per_line_gives_the_same_rows_as_one_per_file(documents, tmp_path):
    per_file = tmp_path / "files"
    per_file.mkdir()
    for index, document in enumerate(documents):
        (per_file / f"t{index}.json").write_text(json.dumps(document, indent=1))
    lines = tmp_path / "collector-export.jsonl"
    lines.write_text("".join(json.dumps(d) + "\n" for d in documents))
    assert list(read_rows("otlp-json", [per_file])) == list(read_rows("otlp-json", [lines]))


def test_guard_shaped_spans_import_as_runs(db_path, tmp_path):
    recorder = SpanRecorder()
    recorder.guard_run("run-a", "triage", [("gpt-4o", 1200, 80), ("gpt-4o", 1500, 120)], tools=2)
    recorder.guard_run("run-b", "triage", [("gpt-4o", 900, 40)], stop_reason="budget_tokens")
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(otlp_json(recorder.spans())) + "\n")
    report = import_paths("otlp-json", [path], db_path)
    assert report.new_calls == 3 and report.bad_line_count == 0
    with read_connection(db_path) as conn:
        runs = dict(
            conn.execute(
                "SELECT run_id, list_value(task_type, stop_reason, CAST(total_tokens AS VARCHAR), "
                "CAST(tool_calls AS VARCHAR)) FROM runs"
            ).fetchall()
        )
    assert runs == {
        "run-a": ["triage", "completed", "2900", "2"],
        "run-b": ["triage", "budget_tokens", "940", "0"],
    }


@pytest.mark.system  # imports into a store: seconds
def test_task_type_option_overrides_the_spans(db_path, tmp_path):
    recorder = SpanRecorder()
    recorder.guard_run("run-c", "triage", [("gpt-4o", 10, 5)])
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(otlp_json(recorder.spans())))
    import_paths("otlp-json", [path], db_path, task_type="support")
    with read_connection(db_path) as conn:
        assert conn.execute("SELECT DISTINCT task_type FROM runs").fetchall() == [("support",)]


def test_logs_and_metrics_examples_are_skipped_and_counted(realdata):
    report = ImportReport()
    rows = list(read_rows("otlp-json", [realdata / "otlp-proto-examples"], report=report))
    assert rows == []  # the reference trace has no GenAI attributes
    assert report.skipped[SKIP_NOT_TRACES] == 3  # logs.json, metrics.json, events.json
    assert report.bad_line_count == 0


def test_bad_lines_and_rejected_spans_are_reported_with_file_and_line(documents, tmp_path):
    broken_span = json.loads(json.dumps(documents[0]))
    broken_span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz" * 16
    path = tmp_path / "export.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(documents[1]),
                '{"resourceSpans": [',
                json.dumps({"spans": []}),
                json.dumps(broken_span),
            ]
        )
        + "\n"
    )
    report = ImportReport()
    calls = [r for k, r in read_rows("otlp-json", [path], report=report) if k == "call"]
    assert report.bad_lines[0].startswith(f"{path}:2: invalid JSON")
    assert report.bad_lines[1] == f"{path}:3: not an OTLP/JSON trace document (no resourceSpans)"
    assert report.bad_lines[2].startswith(f"{path}:4: span rejected: ")
    clean = map_otlp_json(documents[1], source=SOURCE).calls
    partial = map_otlp_json(broken_span, source=SOURCE).calls
    assert len(calls) == len(clean) + len(partial)


def test_second_import_adds_nothing(documents, db_path, tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in documents))
    first = import_paths("otlp-json", [path], db_path)
    second = import_paths("otlp-json", [path], db_path)
    assert first.new_calls == first.calls == 25
    assert (second.new_calls, second.new_runs, second.new_events) == (0, 0, 0)
