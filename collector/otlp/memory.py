"""``SpanMemory``: what earlier requests told about spans, so the mapping's tree rules hold when
a trace arrives in several requests (an SDK exports a batch every few seconds: children usually
end, and are sent, before their parents).

Kept per span (``(trace hex, span hex)``): its parent and the run it names or inherited. Kept per
span with a model call below it: that fact. With them, ``budgetlens.otlp.mapping``

- gives a span that names no run the run of its nearest ancestor that names one, also when that
  ancestor came in an earlier request;
- treats a span with usage as an aggregate (not a call) also when the calls below it came in an
  earlier request (the usual order).

Kept per span also a fingerprint of its content, so a *different* span sent later under the ids
of one already received (a reused span id) is rejected as a span id collision rather than
silently dropped by the store's primary key; an exact repeat (an exporter retry) passes. The
fingerprint also goes into the call's row (``model_calls.content_digest``): past this memory
(forgotten, or received before a restart) the store reports the conflict
(``budgetlens.store.resends``).

Not covered: calls stored before the ancestor that names their run arrives (they stay in the
trace's run). Bounded: the oldest entries are forgotten beyond ``max_spans``. Thread-safe.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import Protocol

__all__ = ["DEFAULT_MAX_SPANS", "Excerpt", "Memory", "SpanMemory", "span_digest"]

#: Spans remembered per collector (about 200 bytes each).
DEFAULT_MAX_SPANS = 200_000

Key = tuple[str, str]
#: A span handed to ``SpanMemory.remember``: (trace hex, span hex, parent hex, run id or None,
#: is a call or has one below).
Remembered = tuple[str, str, str, str | None, bool]
#: Part of a memory as plain (picklable) data: its nodes ``key -> (parent hex, run or None)``
#: and the keys with a model call below them (``SpanMemory.excerpt``).
Excerpt = tuple[dict[Key, tuple[str, str | None]], dict[Key, None]]


class Memory(Protocol):
    """What the mapping reads and writes of a memory (``SpanMemory``, or a stand-in such as
    ``budgetlens.otlp.asked.AskedMemory`` in a decode worker)."""

    def named_run(self, trace_hex: str, span_hex: str) -> str | None: ...

    def parent_of(self, trace_hex: str, span_hex: str) -> str | None: ...

    def has_call_below(self, trace_hex: str, span_hex: str) -> bool: ...

    def fingerprint(self, trace_hex: str, span_hex: str) -> int | None: ...

    def remember_prints(self, prints: dict[Key, int]) -> None: ...

    def remember(self, spans: list[Remembered]) -> None: ...


def _print_key(trace_hex: str, span_hex: str) -> bytes:
    """The fingerprint table's key of a span: its trace and span id bytes (from their hex)."""
    return bytes.fromhex(trace_hex) + b"/" + bytes.fromhex(span_hex)


def span_digest(serialized: bytes) -> int:
    """A span's content fingerprint: the first 8 bytes of BLAKE2b over its deterministic
    protobuf serialization, as a signed 64-bit int (it is stored as ``model_calls.content_digest``,
    a BIGINT). The same in every process (``hash()`` of bytes is salted per process, so a decode
    worker's fingerprints would not match the collector's)."""
    return int.from_bytes(hashlib.blake2b(serialized, digest_size=8).digest(), "big", signed=True)


class SpanMemory:
    """Parents, runs and "has a call below" of recently mapped spans (see the module docstring).

    ``max_spans``: entries kept per table (int > 0); raises ValueError otherwise.
    """

    def __init__(self, max_spans: int = DEFAULT_MAX_SPANS) -> None:
        if isinstance(max_spans, bool) or not isinstance(max_spans, int) or max_spans <= 0:
            raise ValueError(f"max_spans must be an int > 0, got {max_spans!r}")
        self.max_spans = max_spans
        self._nodes: dict[Key, tuple[str, str | None]] = {}  # -> (parent hex, run id or None)
        self._below: dict[Key, None] = {}  # spans with a model call below them (ordered set)
        #: content fingerprint of each span received, by ``_print_key`` (24 bytes, not a tuple of
        #: two strings: a third of the size, and this table fills to ``max_spans`` first)
        self._prints: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._nodes)

    def named_run(self, trace_hex: str, span_hex: str) -> str | None:
        """The run named by ``span_hex`` or its nearest remembered ancestor; None when unknown."""
        with self._lock:
            return self._named_run(trace_hex, span_hex)

    def _named_run(self, trace_hex: str, span_hex: str) -> str | None:
        seen: set[str] = set()  # no depth limit; a parent loop across requests ends the walk
        while span_hex and span_hex not in seen:
            seen.add(span_hex)
            node = self._nodes.get((trace_hex, span_hex))
            if node is None:
                return None
            if node[1]:
                return node[1]
            span_hex = node[0]
        return None

    def knows_any(self, runs: Iterable[Key], calls: Iterable[Key]) -> bool:
        """True when this memory answers one of these questions otherwise than an empty memory
        does: the run named by one of ``runs`` or its ancestors (``named_run``), a model call
        below one of ``calls`` (``has_call_below``). False means a mapping that asked only
        these came out as it would have with this memory."""
        with self._lock:
            below = self._below
            return any(key in below for key in calls) or any(
                self._named_run(*key) is not None for key in runs
            )

    def excerpt(self, keys: Iterable[Key]) -> Excerpt:
        """The entries every walk of the tree rules that starts at one of ``keys`` reads:
        each key's remembered chain of ancestors, and which of them (and of ``keys``) have a
        call below. A memory built from it (``from_excerpt``) answers those walks as this one."""
        nodes: dict[Key, tuple[str, str | None]] = {}
        below: dict[Key, None] = {}
        with self._lock:
            for key in keys:
                trace_hex = key[0]
                while True:
                    if key in self._below:
                        below[key] = None
                    node = self._nodes.get(key)
                    if node is None or key in nodes:
                        break
                    nodes[key] = node
                    if not node[0]:
                        break
                    key = (trace_hex, node[0])
        return nodes, below

    @classmethod
    def from_excerpt(cls, excerpt: Excerpt, prints: dict[Key, int] | None = None) -> SpanMemory:
        """A memory holding ``excerpt`` (``SpanMemory.excerpt``) and the fingerprints ``prints``."""
        nodes, below = excerpt
        memory = cls(max_spans=max(len(nodes), len(below), len(prints or ()), 1))
        memory._nodes.update(nodes)
        memory._below.update(below)
        memory._prints.update((_print_key(*key), digest) for key, digest in (prints or {}).items())
        return memory

    def parent_of(self, trace_hex: str, span_hex: str) -> str | None:
        """The parent hex remembered for a span ("" for a root); None when it is unknown."""
        with self._lock:
            node = self._nodes.get((trace_hex, span_hex))
        return None if node is None else node[0]

    def has_call_below(self, trace_hex: str, span_hex: str) -> bool:
        """True when a model call mapped earlier lies below this span."""
        with self._lock:
            return (trace_hex, span_hex) in self._below

    def fingerprint(self, trace_hex: str, span_hex: str) -> int | None:
        """The content fingerprint (``span_digest``) of the span received earlier under these
        ids (None: none)."""
        with self._lock:
            return self._prints.get(_print_key(trace_hex, span_hex))

    def remember_prints(self, prints: dict[Key, int]) -> None:
        """Remember the content fingerprints of accepted spans (``(trace hex, span hex) -> int``)."""
        with self._lock:
            table = self._prints
            table.update((_print_key(*key), digest) for key, digest in prints.items())
            while len(table) > self.max_spans:
                del table[next(iter(table))]  # the oldest first

    def claim_prints(self, prints: dict[Key, int]) -> dict[Key, int]:
        """Check and remember in one step (a body mapped elsewhere, e.g. in a decode worker):
        returns ``{key: earlier fingerprint}`` for the spans received earlier with other
        content (span id collisions: not remembered), and remembers the fingerprints of the
        others. ``prints``: ``(trace hex, span hex) -> span_digest``."""
        with self._lock:
            table = self._prints
            conflicts = {}
            for key, digest in prints.items():
                compact = _print_key(*key)
                earlier = table.get(compact)
                if earlier is not None and earlier != digest:
                    conflicts[key] = earlier
                else:
                    table[compact] = digest
            while len(table) > self.max_spans:
                del table[next(iter(table))]  # the oldest first
        return conflicts

    def remember(self, spans: list[Remembered]) -> None:
        """Remember spans as ``(trace hex, span hex, parent hex, run id or None, is a call or has
        one below)``; every ancestor of a call (as far as known) is marked as having one below."""
        with self._lock:
            nodes, below = self._nodes, self._below
            for trace_hex, span_hex, parent_hex, run, _ in spans:
                nodes[(trace_hex, span_hex)] = (parent_hex, run)
            for trace_hex, span_hex, parent_hex, _, call in spans:
                if not (call or (trace_hex, span_hex) in below):
                    continue
                while parent_hex:  # no depth limit; a loop ends at its first marked span
                    key = (trace_hex, parent_hex)
                    if key in below:
                        break  # its known ancestors were marked when it was
                    below[key] = None
                    node = nodes.get(key)
                    if node is None:
                        break
                    parent_hex = node[0]
            for table in (nodes, below):
                while len(table) > self.max_spans:
                    del table[next(iter(table))]  # the oldest first
