"""A span whose usage overflows the one token bound once normalised is rejected alone
(named in partial_success), on the in-process and the decode-worker path; the guard and the
importers refuse such usage with a clear message."""

from __future__ import annotations

import pytest
import requests
from _collector_helpers import live_collector, otlp_protobuf
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import DecodePool
from budgetlens.limits import MAX_TOKENS
from budgetlens.otlp import PROTOBUF, SpanMemory
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection

_TRACE = 0xB0B0_0000_0000_0000_0000_0000_0000_0001
_START = 1_700_000_000_000_000_000

#: Usage each count of which is within the bound, whose normalised input or output is not.
OVERFLOWS = [
    ({sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: MAX_TOKENS}, "input"),
    ({sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10, sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: MAX_TOKENS}, "output"),
    (
        {
            sc.GEN_AI_USAGE_INPUT_TOKENS: 0,
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 6 * 10**11,
            sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 5 * 10**11,
        },
        "input",
    ),
]


def _spans(bad: dict) -> list[ReadableSpan]:
    """Three call spans of one run; the second carries ``bad`` usage."""
    spans = []
    for index in range(3):
        usage = {sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10}
        if index == 1:
            usage = {sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10, **bad}
        spans.append(
            ReadableSpan(
                name="chat gpt-4o",
                context=SpanContext(_TRACE, index + 1, is_remote=False),
                resource=Resource.create({sc.SERVICE_NAME: "bound-test"}),
                attributes={
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                    sc.GEN_AI_PROVIDER_NAME: "openai",
                    sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                    sc.BUDGET_RUN_ID: "run-bound",
                    **usage,
                },
                kind=SpanKind.CLIENT,
                start_time=_START + index,
                end_time=_START + index + 1_000_000,
            )
        )
    return spans


@pytest.mark.parametrize("price", [True, False])
@pytest.mark.parametrize("bad, side", OVERFLOWS)
def test_a_span_whose_normalised_usage_exceeds_the_bound_is_rejected_alone(bad, side, price):
    mapped = map_request(encode_spans(_spans(bad)), price=price)
    assert mapped.rejected == 1, mapped.errors
    (error,) = mapped.errors
    assert error.startswith(f"span {2:016x}: {side} ") and "exceeds the one token bound 1e+12" in error
    assert all(key in error for key in bad)
    good = [c for c in mapped.calls if c["quality"] != "rejected_span"]
    assert sorted(c["span_id"] for c in good) == [f"{1:016x}", f"{3:016x}"]
    assert all(c["input_tokens"] == 100 for c in good)


def test_usage_at_the_bound_after_normalising_is_stored():
    at_bound = {sc.GEN_AI_USAGE_INPUT_TOKENS: 0, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: MAX_TOKENS}
    mapped = map_request(encode_spans(_spans(at_bound)), price=True)
    assert mapped.rejected == 0, mapped.errors
    assert mapped.calls[1]["input_tokens"] == MAX_TOKENS


@pytest.mark.system
@pytest.mark.parametrize("worker", [False, True], ids=["in-process", "decode-worker"])
def test_the_collector_answers_partial_success_for_an_overflowing_span(db_path, free_port, worker):
    pool = DecodePool(workers=1, inline_bytes=0, memory=SpanMemory()) if worker else None
    extra = {"decode_pool": pool} if worker else {}
    with live_collector(db_path, free_port, **extra) as live:
        response = requests.post(
            f"{live.url}/v1/traces",
            data=otlp_protobuf(_spans(OVERFLOWS[0][0])),
            headers={"Content-Type": PROTOBUF},
            timeout=30,
        )
    assert response.status_code == 200, response.text
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1
    assert "input 100 + cache read 1000000000000 + cache write 0 = 1000000000100 exceeds" in (
        partial.error_message
    )
    with read_connection(db_path) as conn:
        stored = conn.execute(
            "SELECT span_id, input_tokens, quality FROM model_calls ORDER BY span_id"
        ).fetchall()
    assert stored[0] == (f"{1:016x}", 100, None) and stored[2] == (f"{3:016x}", 100, None)
    assert stored[1][1] is None and stored[1][2] == "rejected_span"


@pytest.mark.parametrize(
    "usage, named",
    [
        (
            {"input_tokens": 100, "cache_read_input_tokens": MAX_TOKENS, "output_tokens": 1},
            "anthropic usage exceeds the one token bound 1e+12: input_tokens 100 + cache_read_input_tokens 1000000000000",
        ),
        (
            {"promptTokenCount": 10, "candidatesTokenCount": 10, "thoughtsTokenCount": MAX_TOKENS},
            "gemini usage exceeds the one token bound 1e+12: candidatesTokenCount 10 + thoughtsTokenCount 1000000000000",
        ),
        (
            {"inputTokens": 10, "outputTokens": 1, "cacheWriteInputTokens": MAX_TOKENS},
            "bedrock usage exceeds the one token bound 1e+12: inputTokens 10 + cacheReadInputTokens 0 + cacheWriteInputTokens",
        ),
    ],
)
def test_the_guard_refuses_usage_whose_sum_exceeds_the_bound_naming_the_fields(usage, named):
    from budgetlens import RunBudget

    budget = RunBudget(max_total_tokens=1000)
    with pytest.raises(ValueError, match="exceeds the one token bound") as raised:
        budget.record(usage, model="claude-sonnet-4")
    assert named in str(raised.value)
    assert budget.record({"input_tokens": 1, "output_tokens": 1}, model="claude-sonnet-4") is not None


def test_an_imported_line_whose_usage_exceeds_the_bound_is_reported_alone(realdata, tmp_path, db_path):
    import json

    from budgetlens.importers import import_paths

    source = realdata / "claude-code-jsonl" / "spotter" / "tool_heavy.jsonl"
    lines = source.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line).get("type") == "assistant")
    bad = json.loads(lines[index])
    bad["message"]["usage"]["cache_read_input_tokens"] = MAX_TOKENS
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "session.jsonl").write_text(
        "\n".join([*lines[:index], json.dumps(bad), *lines[index + 1 :]])
    )
    clean = import_paths("claude-code", [source], tmp_path / "clean.duckdb")
    report = import_paths("claude-code", [tmp_path / "t"], db_path)
    assert report.bad_line_count == 1, report.bad_lines
    assert f"session.jsonl:{index + 1}:" in report.bad_lines[0]
    assert "anthropic usage exceeds the one token bound 1e+12: input_tokens" in report.bad_lines[0]
    assert report.runs == clean.runs and report.calls > 0
