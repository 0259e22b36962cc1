"""Issue 23: parent loops and deep span trees are mapped, never dropped nor misfiled silently."""

from __future__ import annotations

import functools
import os

import pytest
from _otlp_spans import chat_attrs, span
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2

from budgetlens import semconv as sc
from budgetlens.otlp import SpanMemory, map_request
from budgetlens.otlp.memory import span_digest

#: the agent-step spans of these trees are INTERNAL (the mapper reads attributes, not the kind)
_span = functools.partial(span, kind=trace_pb2.Span.SPAN_KIND_INTERNAL)


def _request(spans) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _map(spans, memory=None):
    return map_request(_request(spans), price=False, now_ns=1_700_000_100_000_000_000, memory=memory)


def test_a_call_that_is_its_own_parent_is_stored_as_a_root_and_flagged():
    trace, me = os.urandom(16), os.urandom(8)
    mapped = _map([_span(trace, me, me, chat_attrs(run_id="selfp"))], SpanMemory())
    assert mapped.rejected == 0
    assert [(c["run_id"], c["input_tokens"], c["parent_span_id"]) for c in mapped.calls] == [
        ("selfp", 100, None)
    ]
    assert mapped.calls[0]["quality"] == "parent_loop"
    assert mapped.flagged == {"parent_loop": 1}


@pytest.mark.parametrize("named", [True, False])
def test_spans_that_are_each_others_parent_keep_their_call_flagged(named):
    trace, x, y = os.urandom(16), os.urandom(8), os.urandom(8)
    spans = [_span(trace, x, y, chat_attrs(run_id="cyc" if named else None)), _span(trace, y, x, {}, "agent")]
    mapped = _map(spans, SpanMemory())
    assert mapped.rejected == 0 and len(mapped.calls) == 1
    call = mapped.calls[0]
    assert call["run_id"] == ("cyc" if named else trace.hex())  # its own name, else the trace id
    assert call["quality"] == "parent_loop" and call["parent_span_id"] is None


def test_two_calls_on_a_loop_are_both_calls_not_each_others_aggregate():
    trace, x, y = os.urandom(16), os.urandom(8), os.urandom(8)
    mapped = _map([_span(trace, x, y, chat_attrs(100, "r")), _span(trace, y, x, chat_attrs(300, "r"))])
    assert sorted(c["input_tokens"] for c in mapped.calls) == [100, 300]
    assert mapped.flagged == {"parent_loop": 2}


def test_a_call_below_a_loop_keeps_its_parent_and_is_not_flagged():
    """Only the spans on the loop lose their parent (all of them: the result does not depend
    on the spans' order); a call below keeps its own and inherits the run of the broken loop's
    span, here none (the trace id): the run named across the loop is not followed."""
    trace, x, y, child = os.urandom(16), os.urandom(8), os.urandom(8), os.urandom(8)
    spans = [
        _span(trace, x, y, {sc.BUDGET_RUN_ID: "loop-run"}, "agent"),
        _span(trace, y, x, {}, "inner"),
        _span(trace, child, y, chat_attrs()),
    ]
    mapped = _map(spans, SpanMemory())
    assert [(c["run_id"], c["quality"]) for c in mapped.calls] == [(trace.hex(), None)]
    assert mapped.calls[0]["parent_span_id"] == y.hex()


def test_a_loop_across_requests_ends_the_walk_through_the_memory():
    trace, x, y, z = os.urandom(16), os.urandom(8), os.urandom(8), os.urandom(8)
    memory = SpanMemory()
    _map([_span(trace, x, y, {}, "a")], memory)
    _map([_span(trace, y, x, {}, "b")], memory)
    mapped = _map([_span(trace, z, x, chat_attrs())], memory)  # x -> y -> x: no named run above
    assert [c["run_id"] for c in mapped.calls] == [trace.hex()]


def test_two_calls_on_a_loop_closed_across_requests_are_both_calls():
    trace, x, y = os.urandom(16), os.urandom(8), os.urandom(8)
    memory = SpanMemory()
    first = _map([_span(trace, x, y, chat_attrs(100, "r"))], memory)
    second = _map([_span(trace, y, x, chat_attrs(300, "r"))], memory)  # y's "call below" is x, its parent
    assert [c["input_tokens"] for c in first.calls + second.calls] == [100, 300]
    assert second.calls[0]["quality"] == "parent_loop"


def _chain(depth: int, run: str) -> list:
    """A chain of ``depth`` spans: the top one names ``run``, the bottom one is a call."""
    trace, parent, spans = os.urandom(16), None, []
    for level in range(depth):
        span_id = os.urandom(8)
        attrs = {sc.BUDGET_RUN_ID: run} if level == 0 else chat_attrs() if level == depth - 1 else {}
        spans.append(_span(trace, span_id, parent, attrs, f"n{level}"))
        parent = span_id
    return spans


@pytest.mark.parametrize("depth", [1_000, 1_500, 5_000, 20_000])
@pytest.mark.system  # span trees 20,000 deep: seconds
def test_a_call_deep_below_the_span_that_names_its_run_is_filed_under_that_run(depth):
    mapped = _map(_chain(depth, f"depth-{depth}"), SpanMemory())
    assert [(c["run_id"], c["quality"]) for c in mapped.calls] == [(f"depth-{depth}", None)]


def test_a_deep_chain_split_over_two_requests_inherits_through_the_memory():
    spans = _chain(5_000, "deep-run")
    memory = SpanMemory()
    _map(spans[:2_500], memory)
    mapped = _map(spans[2_500:], memory)
    assert [c["run_id"] for c in mapped.calls] == ["deep-run"]


def test_an_aggregate_deep_above_its_calls_is_still_an_aggregate():
    spans = _chain(3_000, "agg-run")
    top = spans[0]
    for kv in _span(b"\1" * 16, b"\1" * 8, None, chat_attrs(100, "agg-run")).attributes:
        top.attributes.add().CopyFrom(kv)  # the top span also carries the calls' sum
    mapped = _map(spans)
    assert [c["span_id"] for c in mapped.calls] == [spans[-1].span_id.hex()]


@pytest.mark.system  # fresh interpreters: seconds
def test_span_digest_is_stable_across_processes():
    import subprocess
    import sys

    body = b"a serialized span"
    code = f"from budgetlens.otlp.memory import span_digest; print(span_digest({body!r}))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == span_digest(body)
