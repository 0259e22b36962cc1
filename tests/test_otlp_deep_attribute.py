"""An attribute nested deeper than protobuf's recursion limit rejects its span alone, naming the
span, the attribute and the rule; the request's other spans are kept (breaker finding F2)."""

from __future__ import annotations

import signal

import httpx
import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens.otlp import wire_split
from budgetlens.otlp.decode import OtlpError, decode_protobuf
from budgetlens.store.connection import read_connection
from tests._collector_helpers import SpanRecorder, collector_process, otlp_protobuf


def _request(run_id: str, spans: int = 3) -> ExportTraceServiceRequest:
    recorder = SpanRecorder()
    return ExportTraceServiceRequest.FromString(otlp_protobuf(recorder.chat_calls(spans, run_id=run_id)))


def _nest(request: ExportTraceServiceRequest, depth: int) -> bytes:
    """``request`` with its first span given attribute ``some.nested``: arrays ``depth`` deep."""
    span = request.resource_spans[0].scope_spans[0].spans[0]
    attribute = span.attributes.add()
    attribute.key = "some.nested"
    value = attribute.value
    for _ in range(depth):
        value = value.array_value.values.add()
    value.string_value = "x"
    return request.SerializeToString()


def test_salvage_of_a_body_that_parses_equals_the_whole_parse():
    first, second = _request("run-a", 2), _request("run-b", 3)
    first.resource_spans.extend(second.resource_spans)
    body = first.SerializeToString()
    salvaged, errors, marks = wire_split.salvage(body)
    assert (errors, marks) == ([], [])
    assert salvaged == ExportTraceServiceRequest.FromString(body)
    assert salvaged.SerializeToString() == body


def test_a_too_deep_attribute_rejects_its_span_alone():
    request = _request("deep-run")
    bad_span = request.resource_spans[0].scope_spans[0].spans[0].span_id.hex()
    decoded = decode_protobuf(_nest(request, 60))
    assert decoded.rejected == 1
    assert [len(scope.spans) for rs in decoded.request.resource_spans for scope in rs.scope_spans] == [2]
    (reason,) = decoded.errors
    assert f"span {bad_span}" in reason and "'some.nested'" in reason and "limit of 100" in reason
    assert [mark[2] for mark in decoded.marks] == ["deep-run"]


def test_broken_framing_is_still_malformed_as_a_whole():
    body = _nest(_request("deep-run"), 60)
    with pytest.raises(OtlpError) as raised:
        decode_protobuf(body[:-3])
    assert raised.value.status == 400 and "malformed protobuf" in raised.value.reason


@pytest.mark.system  # reason: a real collector subprocess answers and stores the request
def test_the_collector_keeps_the_good_spans_of_a_request_with_a_too_deep_attribute(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    request = _request("deep-run")
    spans = [span.span_id.hex() for span in request.resource_spans[0].scope_spans[0].spans]
    body = _nest(request, 60)
    with collector_process(python, db_path) as (process, url):
        answer = httpx.post(
            f"{url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}, timeout=60
        )
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert answer.status_code == 200, answer.content
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and "'some.nested'" in partial.error_message
    with read_connection(db_path) as conn:
        rows = conn.execute("SELECT span_id, quality FROM model_calls WHERE run_id = 'deep-run'").fetchall()
    stored = {span_id for span_id, _ in rows}
    assert set(spans[1:]) <= stored  # the good spans
    assert "rejected_span" in {quality for _, quality in rows}  # the run is marked incomplete


def test_a_too_deep_json_attribute_is_rejected_for_its_depth_not_its_type():
    from budgetlens.otlp.decode import decode_json_document

    value: dict = {"stringValue": "x"}
    for _ in range(60):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    span = {
        "traceId": "0b" * 16,
        "spanId": "0c" * 8,
        "name": "chat",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "x", "value": value},
        ],
    }
    good = dict(span, spanId="0d" * 8, attributes=span["attributes"][:1])
    decoded = decode_json_document({"resourceSpans": [{"scopeSpans": [{"spans": [span, good]}]}]})
    assert decoded.rejected == 1 and len(decoded.request.resource_spans[0].scope_spans[0].spans) == 1
    (reason,) = decoded.errors
    assert (
        "attribute 'x'" in reason and "limit of 100 message levels" in reason and "wrong type" not in reason
    )


def test_invalid_utf8_in_one_span_name_rejects_that_span_alone():
    request = _request("utf8-run")
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].name = "NAMEMARK"
    body = request.SerializeToString().replace(b"NAMEMARK", b"NAME\xff\xfeRK")
    with pytest.raises(DecodeError):  # the whole parse refuses it
        ExportTraceServiceRequest.FromString(body)
    decoded = decode_protobuf(body)
    assert decoded.rejected == 1 and len(decoded.request.resource_spans[0].scope_spans[0].spans) == 2
    assert decoded.errors[0].startswith(f"span {spans[0].span_id.hex()}: a field (its name")


def test_an_attribute_just_past_the_requests_depth_but_within_its_spans_keeps_every_span():
    """A request nests its spans three messages deep, so an attribute can be too deep for the
    whole request's parse and still parse in its span alone (arrays 48 and 49 deep): its spans
    are kept (they parse), never the whole request refused as malformed; deeper, the span alone
    is rejected naming the attribute and the rule. At no depth are the good spans lost."""
    for depth in range(40, 61):
        request = _request("deep-run")
        spans = [span.span_id.hex() for span in request.resource_spans[0].scope_spans[0].spans]
        decoded = decode_protobuf(_nest(request, depth))
        kept = [
            span.span_id.hex()
            for rs in decoded.request.resource_spans
            for s in rs.scope_spans
            for span in s.spans
        ]
        if decoded.rejected:
            assert kept == spans[1:] and "'some.nested'" in decoded.errors[0], depth
            assert "limit of 100" in decoded.errors[0]
        else:
            assert kept == spans, depth
            assert decoded.request.resource_spans[0].scope_spans[0].spans[0] == Span.FromString(
                request.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
            )
