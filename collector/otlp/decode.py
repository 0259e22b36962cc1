"""Decode OTLP/HTTP trace bodies (protobuf or JSON, optionally gzip) into protobuf messages.

Pure functions, no I/O: the receiver hands in the raw body and headers, gets back an
``ExportTraceServiceRequest`` plus the spans rejected while decoding (OTLP/JSON spans with bad hex
ids or values of the wrong type are rejected alone; the rest of the request is kept).

Errors are ``OtlpError`` with the HTTP status the receiver should answer:
415 for a content type other than protobuf or JSON, 413 for a body over the limit (compressed or
while inflating), 400 for a body that is not valid gzip, protobuf or OTLP/JSON.
Sources: OTLP specification 1.x, "OTLP/HTTP" (binary protobuf and JSON encodings).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens.otlp import json_reasons, wire_split
from budgetlens.otlp.rejected import named_run

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: Default cap on a request body, compressed and after inflating (bytes).
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OtlpError(ValueError):
    """A request the receiver refuses as a whole; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Decoded:
    """A decoded request: the message, and the spans rejected while decoding (count + reasons)."""

    request: ExportTraceServiceRequest
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    #: the rejected spans whose trace id is readable: (trace hex, parent hex or "", the
    #: ``budgetlens.run_id`` they name or None), so the mapping marks their runs
    #: (``budgetlens.otlp.rejected.mark_runs``)
    marks: list[tuple[str, str, str | None]] = field(default_factory=list)


def media_type(content_type: str | None) -> str:
    """Return ``PROTOBUF`` or ``JSON`` for a Content-Type header; raise OtlpError(415) otherwise."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base in (PROTOBUF, JSON):
        return base
    given = json_reasons.quoted(content_type) if content_type else "none"
    raise OtlpError(415, f"Content-Type must be {PROTOBUF} or {JSON} (got {given})")


def inflate(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """Return the body after ``Content-Encoding`` (identity or gzip), at most ``max_bytes`` long.

    gzip is inflated in a stream with an output cap, so a gzip bomb costs at most ``max_bytes``
    of memory. Raises OtlpError(413) past the cap, (400) for corrupt gzip, (415) for an encoding
    other than gzip or identity.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if len(body) > max_bytes:
        raise OtlpError(413, f"request body is {len(body)} bytes; the limit is {max_bytes}")
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise OtlpError(
            415, f"Content-Encoding must be gzip or identity (got {json_reasons.quoted(encoding)})"
        )
    out = bytearray()
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += inflater.decompress(data, max_bytes + 1 - len(out))
            if len(out) > max_bytes or inflater.unconsumed_tail:
                raise OtlpError(413, f"inflated request body exceeds the limit of {max_bytes} bytes")
            if not inflater.eof:
                raise OtlpError(400, "gzip body is truncated")
            data = inflater.unused_data  # a further gzip member, if any
    except zlib.error as error:
        raise OtlpError(400, f"gzip body is corrupt: {error}") from None
    return bytes(out)


def decode_protobuf(body: bytes) -> Decoded:
    """Parse an OTLP protobuf ``ExportTraceServiceRequest``; when it does not parse as a whole,
    span by span (``wire_split.salvage``: a span that does not parse is rejected alone, with a
    reason); raise OtlpError(400) when its framing, a resource or a scope is malformed."""
    try:
        return Decoded(ExportTraceServiceRequest.FromString(body))
    except (DecodeError, ValueError) as error:
        whole = f"malformed protobuf ExportTraceServiceRequest: {error}"
    try:  # one bad span (an attribute nested too deeply) must not lose the others
        request, errors, marks = wire_split.salvage(body)
    except wire_split.WireError as error:
        raise OtlpError(400, f"{whole} ({error})") from None
    # no error: every span parses alone, the whole was only too deep by the request's own
    # three levels above its spans (an attribute at protobuf's limit): the spans are kept
    return Decoded(request, rejected=len(errors), errors=errors, marks=marks)


def decode_json(body: bytes) -> Decoded:
    """Parse an OTLP/JSON body; raise OtlpError(400) when it is not a JSON object."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OtlpError(400, f"malformed JSON: {str(error)[:200]}") from None
    except RecursionError:
        raise OtlpError(400, "malformed JSON: nested too deeply") from None
    return decode_json_document(document)


def decode_json_document(document: dict) -> Decoded:
    """Turn an OTLP/JSON document (dict) into a request, span by span.

    OTLP/JSON differs from the proto3 JSON mapping in its ids (hex, not base64); int64 values
    may be strings or numbers; unknown fields are ignored. A span whose ids are not hex of the
    right length, or whose fields have the wrong type, is rejected alone with a reason.
    Raises OtlpError(400) when the document is not an object with a ``resourceSpans`` list.
    """
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans", []), list):
        raise OtlpError(400, "OTLP/JSON body must be an object with a resourceSpans list")
    decoded = Decoded(ExportTraceServiceRequest())
    try:
        _decode_resource_spans(document.get("resourceSpans", []), decoded)
    except RecursionError:
        raise OtlpError(400, "OTLP/JSON body is nested too deeply") from None
    return decoded


def _list(value, where: str) -> list:
    """``value`` when it is a list (None -> []); OtlpError(400) naming ``where`` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(400, f"{where} must be a list")
    return value


def _object(value, where: str) -> dict:
    """``value`` when it is an object (None -> {}); OtlpError(400) naming ``where`` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(400, f"{where} must be an object")
    return value


def _decode_resource_spans(items: list, decoded: Decoded) -> None:
    for r_index, resource_spans in enumerate(items):
        where = f"resourceSpans[{r_index}]"
        resource_spans = _object(resource_spans, where)
        out = decoded.request.resource_spans.add()
        _parse_part(
            _object(resource_spans.get("resource"), f"{where}.resource"), out.resource, f"{where}.resource"
        )
        out.schema_url = str(resource_spans.get("schemaUrl", ""))[:1000]
        for s_index, scope_spans in enumerate(_list(resource_spans.get("scopeSpans"), f"{where}.scopeSpans")):
            at = f"{where}.scopeSpans[{s_index}]"
            scope_spans = _object(scope_spans, at)
            scope_out = out.scope_spans.add()
            _parse_part(_object(scope_spans.get("scope"), f"{at}.scope"), scope_out.scope, f"{at}.scope")
            for index, span in enumerate(_list(scope_spans.get("spans"), f"{at}.spans")):
                reason = _add_json_span(span, scope_out.spans)
                if reason:
                    decoded.rejected += 1
                    decoded.errors.append(f"{at}.spans[{index}]: {reason}")
                    mark = _json_mark(span)
                    if mark is not None:
                        decoded.marks.append(mark)


_HEX = re.compile(r"[0-9a-fA-F]+")


def _json_mark(span) -> tuple[str, str, str | None] | None:
    """A rejected OTLP/JSON span's (trace hex, parent hex or "", run id or None), read
    leniently; None when its trace id is not 32 hex digits (not all zero)."""
    if not isinstance(span, dict):
        return None
    trace, parent = span.get("traceId"), span.get("parentSpanId")
    if not (isinstance(trace, str) and len(trace) == 32 and _HEX.fullmatch(trace) and int(trace, 16)):
        return None
    ok_parent = isinstance(parent, str) and len(parent) == 16 and _HEX.fullmatch(parent)
    run = None
    attributes = span.get("attributes")
    for attribute in attributes if isinstance(attributes, list) else ():
        if not isinstance(attribute, dict) or attribute.get("key") != "budgetlens.run_id":
            continue
        value = attribute.get("value")
        named = value.get("stringValue") if isinstance(value, dict) else None
        run = named_run(named)
    return trace.lower(), parent.lower() if isinstance(parent, str) and ok_parent else "", run


def _parse_part(value: dict, message, where: str) -> None:
    try:
        json_format.ParseDict(value, message, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as error:
        raise OtlpError(400, f"{where}: {json_reasons.reason(error, value)}") from None


def _hex_to_b64(value, name: str, size: int, required: bool) -> str:
    if value in (None, ""):
        if required:
            raise ValueError(f"{name} is required")
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a hex string")
    try:
        raw = binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        raise ValueError(f"{name} must be hex (got a string of {len(value)} characters)") from None
    if len(raw) != size:
        raise ValueError(f"{name} must be {size * 2} hex digits (got {len(value)})")
    return base64.b64encode(raw).decode("ascii")


def _add_json_span(span, spans) -> str | None:
    """Append ``span`` (OTLP/JSON dict) to ``spans``; return a rejection reason or None."""
    if not isinstance(span, dict):
        return "a span must be an object"
    try:
        fixed = dict(span)
        fixed["traceId"] = _hex_to_b64(span.get("traceId"), "traceId", 16, True)
        fixed["spanId"] = _hex_to_b64(span.get("spanId"), "spanId", 8, True)
        fixed["parentSpanId"] = _hex_to_b64(span.get("parentSpanId"), "parentSpanId", 8, False)
        links = []
        for link in span.get("links") or []:
            if not isinstance(link, dict):
                raise ValueError("links must be objects")
            link = dict(link)
            link["traceId"] = _hex_to_b64(link.get("traceId"), "links.traceId", 16, True)
            link["spanId"] = _hex_to_b64(link.get("spanId"), "links.spanId", 8, True)
            links.append(link)
        fixed["links"] = links
        message = Span()
        json_format.ParseDict(fixed, message, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        return json_reasons.reason(error, fixed)
    except (TypeError, ValueError, AttributeError) as error:
        return str(error)[:200]
    spans.append(message)
    return None


def decode(
    body: bytes,
    content_type: str | None,
    content_encoding: str | None,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> tuple[str, Decoded]:
    """Check the media type, inflate and decode; return ``(media_type, Decoded)``.

    Raises OtlpError with status 415, 413 or 400 (see the module docstring).
    """
    kind = media_type(content_type)
    raw = inflate(body, content_encoding, max_bytes)
    return kind, (decode_protobuf(raw) if kind == PROTOBUF else decode_json(raw))


def encode_response(kind: str, rejected: int = 0, message: str = "") -> bytes:
    """Encode an ``ExportTraceServiceResponse`` (with ``partial_success`` when spans were rejected)
    in the request's encoding (``PROTOBUF`` or ``JSON``)."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return response.SerializeToString()
    if not rejected:
        return b"{}"
    return json.dumps({"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}).encode()


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Decoded",
    "JSON",
    "OtlpError",
    "PROTOBUF",
    "decode",
    "decode_json",
    "decode_json_document",
    "decode_protobuf",
    "encode_response",
    "inflate",
    "media_type",
]
