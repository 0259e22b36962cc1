"""``fast_call_row`` (the mapping's call path) against ``call_row`` (the reference it keeps):
the same rows, flags, pending prices and rejections, span by span and body by body, on
guard-shaped spans, provider spans with odd usage fields, real traces and bad spans mixed in."""

from __future__ import annotations

import json
import random

import pytest
from _collector_helpers import anyagent_spans
from _otlp_spans import protobuf_body
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens import semconv as sc
from budgetlens.otlp import call_fast, decode, mapping
from budgetlens.otlp.attributes import SpanRejected
from budgetlens.otlp.call_fast import fast_call_row
from budgetlens.otlp.decode import PROTOBUF
from budgetlens.otlp.span_rows import SpanContext, call_row

NOW_NS = 1_800_000_000_000_000_000

#: attribute -> values it may take (good, odd and bad), drawn at random per span.
_COUNTS = [0, 1, 7, 1000, 10**12, 10**12 + 1, -3, 2.0, 2.5, "15", "x", True, float("nan")]
_TEXTS = ["", "gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "x" * 250, 3, "bad\x00model"]
_POOL: dict[str, list] = {
    sc.GEN_AI_OPERATION_NAME: ["chat", "call_llm", "text_completion", "", 5],
    sc.GEN_AI_PROVIDER_NAME: ["openai", "anthropic", "", "nope", 1.5],
    sc.GEN_AI_SYSTEM: ["openai", "anthropic"],
    sc.LLM_PROVIDER: ["openai"],
    sc.LLM_SYSTEM: ["openai"],
    sc.GEN_AI_REQUEST_MODEL: _TEXTS,
    sc.GEN_AI_RESPONSE_MODEL: _TEXTS,
    sc.LLM_MODEL_NAME: _TEXTS,
    sc.LLM_REQUEST_MODEL: ["gpt-4o"],
    sc.LLM_RESPONSE_MODEL: ["gpt-4o-2024-08-06"],
    sc.GEN_AI_USAGE_INPUT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_OUTPUT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_PROMPT_TOKENS: _COUNTS,
    sc.GEN_AI_USAGE_COMPLETION_TOKENS: _COUNTS,
    sc.LLM_USAGE_TOTAL_TOKENS: _COUNTS,
    sc.LLM_TOKEN_COUNT_PROMPT: _COUNTS,
    sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: _COUNTS,
    sc.BUDGET_USAGE_STATUS: ["reported", "partial", "unknown", "estimated", "weird", 3],
    sc.BUDGET_COST_USD: [0.0, 0.0012, 3, "0.5", -1.0, 1e30, float("nan"), "x"],
    sc.GEN_AI_USAGE_INPUT_COST: [0.001, -2.0],
    sc.GEN_AI_USAGE_OUTPUT_COST: [0.002],
    sc.GEN_AI_USAGE_COST_AMOUNT: [0.004, "0.1"],
    sc.GEN_AI_USAGE_COST_CURRENCY: ["USD", "EUR", "usd"],
    sc.BUDGET_TURN: [1, 9, 2**31, -1, 3.0, "4"],
    sc.BUDGET_RESERVED_TOKENS: _COUNTS,
    sc.BUDGET_USED_TOKENS: _COUNTS,
    sc.BUDGET_REMAINING_TOKENS: _COUNTS,
    sc.BUDGET_TASK_TYPE: ["task-1", "", "t" * 300, 12],
    sc.BUDGET_RUN_ID: ["run-1", "run-2"],
    sc.ERROR_TYPE: ["timeout", "", 500, "e" * 300],
    sc.SERVICE_TIER_RESPONSE_ATTRIBUTES[0]: ["flex", "priority", "AUTO", ""],
    sc.SERVICE_TIER_REQUEST_ATTRIBUTES[0]: ["auto", "flex"],
    f"{sc.BUDGET_TAG_PREFIX}env": ["prod"],
    sc.BUDGET_TEAM: ["search"],
}
#: A guard's call span, most spans of most bodies.
_GUARD = {
    sc.GEN_AI_OPERATION_NAME: "chat",
    sc.GEN_AI_PROVIDER_NAME: "openai",
    sc.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
    sc.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
    sc.GEN_AI_USAGE_INPUT_TOKENS: 1037,
    sc.GEN_AI_USAGE_OUTPUT_TOKENS: 101,
    sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 518,
    sc.BUDGET_RUN_ID: "run-1",
    sc.BUDGET_TASK_TYPE: "task-1",
    sc.BUDGET_TURN: 1,
    sc.BUDGET_RESERVED_TOKENS: 4000,
    sc.BUDGET_USED_TOKENS: 1138,
    sc.BUDGET_REMAINING_TOKENS: 98862,
    sc.BUDGET_USAGE_STATUS: "reported",
}


def _attrs(rng: random.Random) -> dict:
    """A call span's attributes: guard-shaped and plain, plain with a few of the first (mostly
    good) values of other keys, or random (odd and bad values, other conventions' keys)."""
    draw = rng.random()
    if draw < 0.35:
        keys = list(_GUARD) + rng.sample(sorted(_POOL), rng.randrange(0, 3))
        return {key: _GUARD[key] if key in _GUARD else rng.choice(_POOL[key]) for key in keys}
    if draw < 0.7:
        keys = rng.sample(_FAST_POOL, rng.randrange(1, len(_FAST_POOL)))
        return {key: _POOL[key][rng.randrange(min(3, len(_POOL[key])))] for key in keys}
    return {key: rng.choice(_POOL[key]) for key in rng.sample(sorted(_POOL), rng.randrange(1, 12))}


_FAST_POOL = sorted(set(_POOL) - call_fast.SLOW_KEYS)


def _outcome(function, ctx: SpanContext, price: bool, pending: list | None):
    try:
        row, flags = function(ctx, price, pending)
    except SpanRejected as error:
        return ("rejected", str(error))
    except ValueError as error:
        return ("invalid", str(error))
    return row, flags, [(id(item[0]) == id(row), item[1]) for item in pending or []]


@pytest.mark.parametrize("seed", range(4))
def test_each_span_maps_to_what_call_row_gives(seed, monkeypatch):
    handed = []  # the spans the fast path handed to call_row
    monkeypatch.setattr(call_fast, "call_row", lambda *args: handed.append(1) or call_row(*args))
    rng = random.Random(seed)
    spans = 1500
    for index in range(spans):
        attrs = _attrs(rng)
        ctx = SpanContext(
            "otlp",
            attrs,
            f"{index:016x}",
            "run-1",
            "ab" * 16,
            "" if index % 3 else "cd" * 8,
            "svc",
            (1_700_000_000_000_000 + index, 1_700_000_001_000_000 + index, 1.0),
            index % 5 == 0,
            attrs.get(sc.BUDGET_RUN_ID),
            index % 7 == 0,
        )
        for price, pending in ((True, []), (True, None), (False, [])):
            got = _outcome(fast_call_row, ctx, price, None if pending is None else [])
            want = _outcome(call_row, ctx, price, pending)
            assert got == want, (attrs, price, pending is None)
    assert spans < len(handed) < 3 * spans * 0.9  # both paths taken, each often


def _value(kv, value) -> None:
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = value


def _body(rng: random.Random, spans: int) -> bytes:
    """Runs of a guard run span and call spans (random attributes), some ids bad or repeated."""
    made = []
    for number in range(spans):
        trace = (number // 8 + 1).to_bytes(16, "big")
        span_id = (number + 1).to_bytes(8, "big") if rng.random() > 0.02 else b"\0" * 8
        parent = b"" if number % 8 == 0 else (number // 8 * 8 + 1).to_bytes(8, "big")
        span = Span(trace_id=trace, span_id=span_id, parent_span_id=parent, name="chat")
        span.start_time_unix_nano = 1_700_000_000_000_000_000 + number
        span.end_time_unix_nano = span.start_time_unix_nano + rng.choice((10**9, 0, -5 + 10**9))
        span.status.code = rng.choice((0, 1, 2))
        attrs = _attrs(rng)
        if number % 8 == 0:
            attrs = {sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.BUDGET_RUN_ID: f"run-{number}"}
            span.name = "invoke_agent"
        for key, value in attrs.items():
            kv = span.attributes.add()
            kv.key = key
            _value(kv, value)
        made.append(span)
        if rng.random() < 0.03:
            made.append(span)  # a repeat in the same request
    return protobuf_body(*made)


def _mapped(body: bytes, monkeypatch, reference: bool):
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(mapping, "fast_call_row", call_fast.call_row)
        _, decoded = decode(body, PROTOBUF, None)
        mapped = mapping.map_request(decoded.request, now_ns=NOW_NS)
    return (
        mapped.call_rows,
        mapped.record_rows,
        mapped.event_rows,
        mapped.spans,
        mapped.rejected,
        mapped.errors,
        mapped.flagged,
    )


@pytest.mark.parametrize("seed", range(3))
def test_bodies_map_to_the_reference_rows(seed, monkeypatch):
    rng = random.Random(100 + seed)
    for _ in range(4):
        body = _body(rng, 400)
        fast = _mapped(body, monkeypatch, reference=False)
        assert fast == _mapped(body, monkeypatch, reference=True)
        assert fast[0] and fast[4]  # calls and rejected spans both present


def test_the_benchmarks_guard_bodies_map_to_the_reference_rows(monkeypatch):
    from benchmarks.otlp_bodies import make_body

    for stated in (True, False):
        body = make_body(3, stated_cost=stated)
        fast = _mapped(body, monkeypatch, reference=False)
        assert len(fast[0]) == 900 and fast == _mapped(body, monkeypatch, reference=True)


@pytest.mark.realdata
@pytest.mark.parametrize(
    "framework", ["AGNO", "GOOGLE", "LANGCHAIN", "LLAMA_INDEX", "OPENAI", "SMOLAGENTS", "TINYAGENT"]
)
def test_real_traces_map_to_the_reference_rows(realdata, framework, monkeypatch):
    path = realdata / "any-agent-genai-spans" / f"{framework}_trace.json"
    body = encode_spans(anyagent_spans(path)).SerializeToString()
    fast = _mapped(body, monkeypatch, reference=False)
    assert fast[0] and fast == _mapped(body, monkeypatch, reference=True)


@pytest.mark.realdata
def test_the_otlp_json_example_maps_to_the_reference_rows(realdata, monkeypatch):
    document = json.loads((realdata / "otlp-proto-examples" / "trace.json").read_text())
    _, decoded = decode(json.dumps(document).encode(), "application/json", None)
    body = ExportTraceServiceRequest.SerializeToString(decoded.request)
    assert _mapped(body, monkeypatch, reference=False) == _mapped(body, monkeypatch, reference=True)
