"""A rejected span is rejected alone, and the run it belonged to is marked ``rejected_span``."""

from __future__ import annotations

import json
import subprocess

import pytest
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind

from budgetlens import semconv as sc
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection, write_batch, write_connection


def _run(
    recorder: SpanRecorder, run_id: str, bad_run: bool, bad_call: bool, child_names_run: bool = True
) -> None:
    """A guard-style run: a budget stop on a 1000-token limit, two calls (optionally broken)."""
    with recorder.tracer.start_as_current_span("invoke_agent triage") as run:
        run.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
                sc.BUDGET_RUN_ID: run_id,
                sc.BUDGET_TASK_TYPE: "triage",
                sc.BUDGET_LIMIT_TOTAL_TOKENS: 1000,
                sc.BUDGET_STOP_REASON: sc.STOP_BUDGET_TOKENS,
                sc.BUDGET_TURNS: -1 if bad_run else 2,
            }
        )
        for turn in (1, 2):
            with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
                call.set_attributes(
                    {
                        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                        sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                        sc.GEN_AI_USAGE_INPUT_TOKENS: -5 if bad_call and turn == 2 else 400,
                        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 100,
                    }
                )
                if child_names_run:
                    call.set_attribute(sc.BUDGET_RUN_ID, run_id)


def _store(tmp_path, mapped):
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        write_batch(conn, *mapped.tables())
    return db_path


def _run_row(db_path, run_id: str) -> dict:
    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
        names = [d[0] for d in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))


@pytest.mark.parametrize("child_names_run", [True, False])
@pytest.mark.system  # store writes: seconds
def test_a_rejected_run_span_is_rejected_alone_and_its_run_is_flagged(tmp_path, child_names_run):
    recorder = SpanRecorder()
    _run(recorder, "run-bad", bad_run=True, bad_call=False, child_names_run=child_names_run)
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 1 and sc.BUDGET_TURNS in mapped.errors[0]
    assert len(mapped.calls) == 2 and mapped.flagged == {"rejected_span": 1}
    (record,) = mapped.records  # a stub: identity only, none of the rejected values
    assert record["run_id"] == "run-bad" and record.get("limit_total_tokens") is None
    assert record["quality"] == "rejected_span"
    assert {c["run_id"] for c in mapped.calls} == {"run-bad"}  # the children still find their run
    run = _run_row(_store(tmp_path, mapped), "run-bad")
    assert run["quality"] == "rejected_span" and run["model_calls"] == 2


@pytest.mark.system  # store writes: seconds
def test_a_rejected_call_span_leaves_its_run_with_unknown_usage_never_reported(tmp_path):
    recorder = SpanRecorder()
    _run(recorder, "run-call", bad_run=False, bad_call=True)
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 1 and sc.GEN_AI_USAGE_INPUT_TOKENS in mapped.errors[0]
    stub = [c for c in mapped.calls if c["quality"] == "rejected_span"]
    assert len(stub) == 1 and stub[0]["usage_status"] == sc.USAGE_UNKNOWN
    assert stub[0]["input_tokens"] is None and stub[0]["output_tokens"] is None
    run = _run_row(_store(tmp_path, mapped), "run-call")
    assert run["usage_status"] == sc.USAGE_UNKNOWN and run["quality"] == "rejected_span"
    assert run["stop_reason"] == sc.STOP_BUDGET_TOKENS and run["limit_total_tokens"] == 1000
    assert run["model_calls"] == 2 and run["unknown_usage_calls"] == 1


@pytest.mark.system  # store writes: seconds
def test_a_clean_run_carries_no_flag(tmp_path):
    recorder = SpanRecorder()
    _run(recorder, "run-ok", bad_run=False, bad_call=False)
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 0 and not mapped.flagged
    run = _run_row(_store(tmp_path, mapped), "run-ok")
    assert run["quality"] is None and run["usage_status"] == sc.USAGE_REPORTED


@pytest.mark.system
def test_rejected_spans_through_a_real_collector_and_the_sdk_exporter(tmp_path, python):
    recorder = SpanRecorder()
    _run(recorder, "run-bad", bad_run=True, bad_call=False)
    _run(recorder, "run-call", bad_run=False, bad_call=True)
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (_, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
        # partial_success is not a failure to the exporter: the good spans are stored
        assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    out = subprocess.run(
        [python, "-m", "budgetlens.cli", "runs", "--db", str(db_path), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    runs = {r["run_id"]: r for r in json.loads(out)}
    assert runs["run-bad"]["quality"] == "rejected_span"
    assert runs["run-call"]["quality"] == "rejected_span"
    assert runs["run-call"]["usage_status"] == sc.USAGE_UNKNOWN


@pytest.mark.parametrize(
    "attributes, named",
    [
        (
            {sc.GEN_AI_USAGE_INPUT_TOKENS: 12.7},
            "gen_ai.usage.input_tokens must be a non-negative integer of at most 1000000000000 "
            "(got a number that is not an integer)",
        ),
        ({sc.GEN_AI_REQUEST_MODEL: "m" * 257}, "gen_ai.request.model must be a model name of at most 256"),
        (
            {sc.GEN_AI_RESPONSE_MODEL: "gpt\x004o"},
            "gen_ai.response.model must be a model name without control",
        ),
        ({"llm.model_name": "gpt-4o\n"}, "llm.model_name must be a model name without control"),
    ],
)
def test_bad_counts_and_model_names_are_rejected_with_a_clear_rule(attributes, named):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as span:
        span.set_attributes({sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT, **attributes})
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 1 and named in mapped.errors[0], mapped.errors
    assert all(c["request_model"] is None and c["response_model"] is None for c in mapped.calls)


def test_a_model_name_at_the_cap_is_stored():
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as span:
        span.set_attributes({sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT, sc.GEN_AI_REQUEST_MODEL: "m" * 200})
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 0 and mapped.calls[0]["request_model"] == "m" * 200


@pytest.mark.parametrize("model", ["m" * 257, "gpt\x004o"])
def test_the_guard_refuses_a_model_name_the_collector_would_reject(model):
    from budgetlens import RunBudget

    with pytest.raises(ValueError, match="model must be a model name"):
        RunBudget(max_total_tokens=1000).record({"prompt_tokens": 1, "completion_tokens": 1}, model=model)


def _flag_of_run(mapped, run_id: str) -> set[str]:
    """The quality flags a run gets from this request's rows (its record and its calls)."""
    rows = [r for r in (*mapped.records, *mapped.calls) if r["run_id"] == run_id]
    return {flag for r in rows if r["quality"] for flag in r["quality"].split(",")}


@pytest.mark.system  # store writes: seconds
def test_a_rejected_tool_span_marks_its_run_without_a_row_of_its_own(tmp_path):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("invoke_agent triage") as run:
        run.set_attributes(
            {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT, sc.BUDGET_RUN_ID: "run-tool"}
        )
        with recorder.tracer.start_as_current_span("chat gpt-4o") as call:
            call.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                    sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                    sc.GEN_AI_USAGE_INPUT_TOKENS: 400,
                    sc.GEN_AI_USAGE_OUTPUT_TOKENS: 100,
                }
            )
        with recorder.tracer.start_as_current_span("execute_tool search") as tool:  # names no run
            tool.set_attributes(
                {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: ["a", "b"]}
            )
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 1 and sc.GEN_AI_TOOL_NAME in mapped.errors[0]
    assert not [e for e in mapped.events if e["name"] == sc.EVENT_TOOL_CALL]  # no value of it kept
    assert len(mapped.calls) == 1 and len(mapped.records) == 1  # no stub call: usage stays known
    assert _flag_of_run(mapped, "run-tool") == {"rejected_span"}
    stored = _run_row(_store(tmp_path, mapped), "run-tool")
    assert stored["quality"] == "rejected_span" and stored["usage_status"] == sc.USAGE_REPORTED
    assert stored["model_calls"] == 1 and stored["total_tokens"] == 500


@pytest.mark.system  # store writes: seconds
def test_a_span_id_collision_marks_the_run_of_the_rejected_span(tmp_path):
    recorder = SpanRecorder()
    _run(recorder, "run-clash", bad_run=False, bad_call=False)
    request = encode_spans(recorder.spans())
    spans = request.resource_spans[0].scope_spans[0].spans
    twin = next(s for s in spans if s.name.startswith("chat"))
    clash = spans.add()
    clash.CopyFrom(twin)
    clash.end_time_unix_nano += 1_000  # other content under the same (trace id, span id)
    mapped = map_request(request, price=False)
    assert mapped.rejected == 1 and "span id collision" in mapped.errors[0]
    assert mapped.flagged["span_id_collision"] == 1
    assert len(mapped.calls) == 2  # the first span is stored, the twin is not
    assert _flag_of_run(mapped, "run-clash") == {"rejected_span"}
    assert _run_row(_store(tmp_path, mapped), "run-clash")["quality"] == "rejected_span"


@pytest.mark.system  # store writes: seconds
def test_an_otlp_json_span_rejected_while_decoding_marks_its_run(tmp_path):
    from _collector_helpers import otlp_json

    from budgetlens.otlp.mapping import map_otlp_json

    recorder = SpanRecorder()
    _run(recorder, "run-json", bad_run=False, bad_call=False, child_names_run=False)
    _run(recorder, "run-clean", bad_run=False, bad_call=False)
    document = otlp_json(recorder.spans())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    run_trace = next(s["traceId"] for s in spans if s["name"].startswith("invoke_agent"))
    bad = next(s for s in spans if s["name"].startswith("chat") and s["traceId"] == run_trace)
    bad["startTimeUnixNano"] = {"not": "a time"}  # decoding fails: the span never reaches the mapping
    mapped = map_otlp_json(document, price=False)
    assert mapped.rejected == 1 and "startTimeUnixNano" in mapped.errors[0]
    assert len(mapped.calls) == 3
    assert _flag_of_run(mapped, "run-json") == {"rejected_span"}  # found through its parent
    assert _flag_of_run(mapped, "run-clean") == set()
    assert _run_row(_store(tmp_path, mapped), "run-json")["quality"] == "rejected_span"
