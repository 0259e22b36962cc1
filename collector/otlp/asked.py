"""``AskedMemory``: the collector's ``SpanMemory`` as seen from another process (a decode worker).

A body mapped in a decode worker cannot read the collector's memory, and sending the whole
memory with every body would cost more than the mapping. So the worker maps with an
``AskedMemory``: it answers from a small ``seed`` (``SpanMemory.from_excerpt``; none: as an empty
memory) and notes what the mapping asked and what it would have remembered. The collector then

1. checks and remembers the fingerprints (``SpanMemory.claim_prints``: a span id collision);
2. asks its own memory the questions the mapping asked (``SpanMemory.knows_any``): the runs
   named above the spans whose parents were not in the body, and whether a call lies below
   each model-call span. When every answer is the empty memory's (the usual case: a trace's
   spans arrive child first, or all in one body), the worker's rows are those the collector
   would have mapped itself;
3. otherwise (or on a collision) has the body mapped again with a seed cut from its memory for
   exactly the walks this body's tree rules make (``SpanMemory.excerpt``), which answers them
   as the whole memory would;
4. remembers the body's spans (``SpanMemory.remember``).

The questions do not depend on the answers (the rules ask them for every span that leaves the
body or is a call), so an unchanged answer set means an unchanged mapping. Pure; no I/O.
"""

from __future__ import annotations

from budgetlens.otlp.memory import Key, Remembered, SpanMemory

__all__ = ["AskedMemory", "questions", "seed_keys"]


class AskedMemory:
    """A ``budgetlens.otlp.memory.Memory`` that answers from ``seed`` (None: nothing known) and
    records: ``runs`` (the keys ``named_run`` was asked about), ``remembered`` (the spans the
    mapping handed to ``remember``) and ``prints`` (the fingerprints it handed to
    ``remember_prints``). Nothing is written to ``seed``."""

    def __init__(self, seed: SpanMemory | None = None) -> None:
        self.seed = seed
        self.runs: list[Key] = []
        self.remembered: list[Remembered] = []
        self.prints: dict[Key, int] = {}

    def named_run(self, trace_hex: str, span_hex: str) -> str | None:
        self.runs.append((trace_hex, span_hex))
        return None if self.seed is None else self.seed.named_run(trace_hex, span_hex)

    def parent_of(self, trace_hex: str, span_hex: str) -> str | None:
        return None if self.seed is None else self.seed.parent_of(trace_hex, span_hex)

    def has_call_below(self, trace_hex: str, span_hex: str) -> bool:
        # asked only of model-call spans: the collector asks its memory of every call remembered
        return self.seed is not None and self.seed.has_call_below(trace_hex, span_hex)

    def fingerprint(self, trace_hex: str, span_hex: str) -> int | None:
        return None if self.seed is None else self.seed.fingerprint(trace_hex, span_hex)

    def remember_prints(self, prints: dict[Key, int]) -> None:
        self.prints.update(prints)

    def remember(self, spans: list[Remembered]) -> None:
        self.remembered.extend(spans)


def questions(runs: list[Key], remembered: list[Remembered]) -> tuple[list[Key], list[Key]]:
    """(``named_run`` keys, ``has_call_below`` keys) a worker's mapping asked or may have
    asked: ``runs`` as recorded, and every model-call span among ``remembered`` (a superset of
    the calls asked about; an extra question can only cause a second mapping, never a wrong one)."""
    return runs, [(trace_hex, span_hex) for trace_hex, span_hex, _, _, call in remembered if call]


def seed_keys(runs: list[Key], remembered: list[Remembered]) -> list[Key]:
    """Where the tree rules' walks into a memory can start for a body: its spans, the parents
    of its spans, and the keys ``named_run`` was asked about (``SpanMemory.excerpt`` follows
    each up its remembered ancestors)."""
    keys = list(runs)
    for trace_hex, span_hex, parent_hex, _, _ in remembered:
        keys.append((trace_hex, span_hex))
        if parent_hex:
            keys.append((trace_hex, parent_hex))
    return keys
