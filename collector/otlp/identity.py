"""Span identity (design §4): a span is (trace id, span id), in one request and across requests.

``SpanIds.of`` checks a span's ids (16- and 8-byte, not all zero; the parent empty or 8 bytes)
and tells an exact repeat of a span of the same request (an exporter retry: stored once) from a
different span under the same ids (``span id collision``: rejected). Through a memory
(``budgetlens.otlp.memory``) it also compares each span's content fingerprint with the one
received earlier under its ids. Used by ``budgetlens.otlp.mapping``; pure.
"""

from __future__ import annotations

from typing import Any

from budgetlens.otlp.attributes import SpanRejected
from budgetlens.otlp.memory import Memory, span_digest

__all__ = ["SpanIds", "trace_shard"]

_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


class SpanIds:
    """The identities of the spans of one request. ``seen``: (trace hex, span hex) -> the first
    span under those ids; ``prints``: content fingerprints for the memory (accepted spans);
    ``collisions``: spans rejected for a span id collision (also a flagged count)."""

    def __init__(self, memory: Memory | None = None) -> None:
        self.memory = memory
        self.seen: dict[tuple[str, str], Any] = {}
        self.prints: dict[tuple[str, str], int] = {}
        self.collisions = 0

    def of(self, span: Any) -> tuple[str, str, str] | None:
        """(trace hex, span hex, parent hex) of a span; None for an exact repeat of a span of
        this request (a retry: stored once). Raises SpanRejected for malformed ids and for a
        different span under the same (trace id, span id)."""
        trace, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
        if len(trace) != 16 or trace == _ZERO_TRACE:
            raise SpanRejected("trace_id must be 16 bytes (32 hex digits), not all zero")
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            raise SpanRejected("span_id must be 8 bytes (16 hex digits), not all zero")
        if parent and len(parent) != 8:
            raise SpanRejected("parent_span_id must be empty or 8 bytes (16 hex digits)")
        key = (trace.hex(), span_id.hex())
        first = self.seen.setdefault(key, span)
        if first is not span:
            if first == span:
                return None
            self.collisions += 1
            raise SpanRejected(
                f"span id collision: trace {key[0]} already has a different span {key[1]} "
                "in this request (a span is identified by trace id + span id)"
            )
        memory = self.memory
        if memory is not None:
            fingerprint = span_digest(span.SerializeToString(deterministic=True))
            earlier = memory.fingerprint(*key)
            if earlier is not None and earlier != fingerprint:
                del self.seen[key]
                self.collisions += 1
                raise SpanRejected(
                    f"span id collision: trace {key[0]} span {key[1]} was received earlier with "
                    "other content (a span is identified by trace id + span id); not stored"
                )
            self.prints[key] = fingerprint  # an exact repeat (a retry) maps as before
        return key[0], key[1], parent.hex()


def trace_shard(trace_id: bytes, shards: int) -> int:
    """The shard (0 to ``shards`` - 1) of a span's trace: its trace id's last byte modulo
    ``shards`` (0 for an empty id). Every rule of the mapping but a rejected span's mark on its
    run stays within one trace, so a body's shards map to the rows the whole body maps to."""
    return trace_id[-1] % shards if trace_id else 0
