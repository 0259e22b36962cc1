"""Decode an OTLP protobuf request span by span when it does not parse as a whole.

protobuf refuses a whole message for one bad part: most often an attribute value nested deeper
than its recursion limit (100 message levels; an ``AnyValue`` array or kvlist takes two per level),
which would lose every good span of the request with it. :func:`salvage` walks the wire format down
to the spans (``ExportTraceServiceRequest.resource_spans`` -> ``ResourceSpans.scope_spans`` ->
``ScopeSpans.spans``), parses each part alone and rejects only the spans that do not parse, naming
the span, the attribute and the rule. A body whose framing itself is broken (a bad varint, a length
past the end, a group) is still malformed as a whole. For a body that parses, :func:`salvage`
returns the very message ``ExportTraceServiceRequest.FromString`` does (tested).
Sources: protobuf "Encoding" (wire types, tags, length-delimited fields).
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from budgetlens.otlp.json_reasons import RECURSION_LIMIT

__all__ = ["WireError", "salvage"]

_RUN_ID_KEY = "budgetlens.run_id"
# field numbers (opentelemetry-proto trace.proto / common.proto)
_RESOURCE_SPANS, _SCOPE_SPANS, _SPANS = 1, 2, 2
_SPAN_TRACE_ID, _SPAN_SPAN_ID, _SPAN_PARENT_ID, _SPAN_ATTRIBUTES = 1, 2, 4, 9
_KV_KEY = 1
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireError(ValueError):
    """The body's framing is broken: not even its fields can be told apart."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(field number, payload of a length-delimited field else b"", the field's raw bytes with
    its tag) of every field of one message, in order; WireError when the framing is broken."""
    out, at = [], 0
    while at < len(data):
        start = at
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        payload = b""
        if wire == _VARINT:
            _, at = _varint(data, at)
        elif wire == _I64:
            at += 8
        elif wire == _I32:
            at += 4
        elif wire == _LEN:
            size, at = _varint(data, at)
            payload, at = data[at : at + size], at + size
        else:
            raise WireError(f"wire type {wire} (field {number}) is not used by OTLP")
        if number == 0 or at > len(data):
            raise WireError("a field runs past the end of its message")
        out.append((number, payload, data[start:at]))
    return out


def _children(fields: list[tuple[int, bytes, bytes]], number: int) -> list[bytes]:
    """The payloads of field ``number`` (a repeated message) among ``fields`` (unknown fields are
    ignored, as ``FromString`` does)."""
    return [payload for field, payload, _ in fields if field == number]


def _span_reason(raw: bytes) -> tuple[str, tuple[str, str, str | None] | None]:
    """(rejection reason, mark: trace hex, parent hex, run id) of a span that does not parse."""
    fields = _fields(raw)
    ids = {
        number: payload
        for number, payload, _ in fields
        if number in (_SPAN_TRACE_ID, _SPAN_SPAN_ID, _SPAN_PARENT_ID)
    }
    name = ids.get(_SPAN_SPAN_ID, b"").hex() or "?"
    run, bad_key = None, None
    for number, payload, _ in fields:
        if number != _SPAN_ATTRIBUTES:
            continue
        try:
            attribute = KeyValue.FromString(payload)
        except (DecodeError, ValueError):
            keys = [p for n, p, _ in _fields(payload) if n == _KV_KEY]
            bad_key = bad_key or (keys[0].decode("utf-8", "replace")[:128] if keys else "(no key)")
            continue
        if attribute.key == _RUN_ID_KEY and attribute.value.HasField("string_value"):
            run = attribute.value.string_value or None
    where = f"attribute {bad_key!r}" if bad_key is not None else "a field (its name, events, links or status)"
    reason = (
        f"span {name}: {where} does not parse as protobuf: malformed (invalid UTF-8 in a string, say), or nested deeper than protobuf's "
        f"limit of {RECURSION_LIMIT} message levels (an AnyValue array or kvlist takes two a level)"
    )
    trace = ids.get(_SPAN_TRACE_ID, b"")
    mark = (
        (trace.hex(), ids.get(_SPAN_PARENT_ID, b"").hex(), run) if len(trace) == 16 and any(trace) else None
    )
    return reason, mark


def _shell(message_type, fields: list[tuple[int, bytes, bytes]], skip: int, where: str):
    """``message_type`` parsed from ``fields`` without field ``skip`` (its list of children)."""
    try:
        return message_type.FromString(b"".join(raw for number, _, raw in fields if number != skip))
    except (DecodeError, ValueError):
        raise WireError(f"{where} does not parse (malformed, or nested too deeply)") from None


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, list[str], list[tuple[str, str, str | None]]]:
    """(request of the spans that parse, reasons of those that do not, their marks) for an OTLP
    protobuf ``body``; WireError when its framing, a resource or a scope does not parse."""
    request = ExportTraceServiceRequest()
    errors: list[str] = []
    marks: list[tuple[str, str, str | None]] = []
    for r_index, payload in enumerate(_children(_fields(body), _RESOURCE_SPANS)):
        r_fields = _fields(payload)
        resource = request.resource_spans.add()
        resource.CopyFrom(_shell(ResourceSpans, r_fields, _SCOPE_SPANS, f"resourceSpans[{r_index}]"))
        for s_index, s_payload in enumerate(_children(r_fields, _SCOPE_SPANS)):
            s_fields = _fields(s_payload)
            scope = resource.scope_spans.add()
            scope.CopyFrom(
                _shell(ScopeSpans, s_fields, _SPANS, f"resourceSpans[{r_index}].scopeSpans[{s_index}]")
            )
            for span_payload in _children(s_fields, _SPANS):
                try:
                    scope.spans.append(Span.FromString(span_payload))
                except (DecodeError, ValueError):
                    reason, mark = _span_reason(span_payload)
                    errors.append(reason)
                    if mark is not None:
                        marks.append(mark)
    return request, errors, marks
