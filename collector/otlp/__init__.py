"""OTLP/HTTP trace bodies → store rows: the collector's pure ingest path in one import.

Decoding (protobuf / JSON, gzip with a cap) lives in ``budgetlens.otlp.decode``; the span mapping
(budgetlens, GenAI semconv current and deprecated, OpenInference, OpenLLMetry) in
``budgetlens.otlp.mapping``. This module joins them:

    kind, decoded = decode(body, content_type, content_encoding, max_bytes)
    mapped = map_spans(decoded)          # Mapped(calls, records, events, spans, rejected, errors)
"""

from __future__ import annotations

from budgetlens.otlp.decode import (
    DEFAULT_MAX_BODY_BYTES,
    JSON,
    PROTOBUF,
    Decoded,
    OtlpError,
    decode,
    encode_response,
)
from budgetlens.otlp.mapping import ALLOWED_ATTRIBUTES, Mapped, map_otlp_json, map_request
from budgetlens.otlp.memory import Memory, SpanMemory


def map_spans(
    decoded: Decoded,
    *,
    source: str = "otlp",
    price: bool = True,
    memory: Memory | None = None,
    now_ns: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Mapped:
    """Map a decoded request to rows; spans rejected while decoding are counted in the result.
    ``now_ns`` and ``shard``: as for ``map_request``.

    Returns ``Mapped`` (``calls``, ``records``, ``events``: lists of dicts keyed by store columns;
    ``spans`` seen; ``rejected`` count and ``errors`` reasons). Never raises for span content.
    """
    mapped = map_request(
        decoded.request,
        source=source,
        price=price,
        memory=memory,
        marks=decoded.marks,
        now_ns=now_ns,
        shard=shard,
    )
    if decoded.rejected:
        mapped.spans += decoded.rejected
        mapped.rejected += decoded.rejected
        mapped.errors = decoded.errors + mapped.errors
    return mapped


__all__ = [
    "ALLOWED_ATTRIBUTES",
    "DEFAULT_MAX_BODY_BYTES",
    "Decoded",
    "JSON",
    "Mapped",
    "OtlpError",
    "PROTOBUF",
    "SpanMemory",
    "decode",
    "encode_response",
    "map_otlp_json",
    "map_request",
    "map_spans",
]
