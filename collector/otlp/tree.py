"""The span-tree rules of the OTLP mapping (design §4): runs and aggregates as they really were.

A request's accepted spans form trees (per trace, through ``parent_span_id``); a ``SpanMemory``
shared by the requests of one collector extends them across requests. Two rules read them:

- run inheritance: a span that names no run (``budgetlens.run_id``) belongs to the run of its
  nearest ancestor that names one (in this request, else in the memory);
- aggregates are not calls: a model-call span with other model-call spans below it in its trace
  sums them; it is dropped as a call, and a disagreement of its (input, output) tokens with the
  sum of the calls right below it flags ``aggregate_mismatch`` on the first of them.

Rows are the mapping's dicts keyed by store columns (``budgetlens.otlp.rows``); nodes point at
them by index into ``Mapped.call_rows`` / ``event_rows``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from budgetlens.otlp.memory import SpanMemory
from budgetlens.otlp.rows import Row

_MAX_DEPTH = 1000  # parent chains longer than this (or cyclic) are not followed


@dataclass(slots=True)
class Node:
    """One accepted span: its parent (hex, "" for a root), the run id it names
    (``budgetlens.run_id``, None when it names none) and the indexes of the rows it produced."""

    parent: str
    run: str | None
    call: int | None = None
    record: int | None = None
    events: list[int] = field(default_factory=list)
    inherited: str | None = None  # the run of its nearest named ancestor, once resolved


class SpanTree:
    """The accepted spans of one request by (trace hex, span hex), with the tree rules."""

    def __init__(self, memory: SpanMemory | None = None) -> None:
        self.memory = memory
        self.nodes: dict[tuple[str, str], Node] = {}

    def add(self, trace_hex: str, span_hex: str, node: Node) -> None:
        self.nodes[(trace_hex, span_hex)] = node

    def _ancestors(self, trace_hex: str, node: Node) -> Iterator[Node]:
        """The nodes above ``node`` in this request, nearest first (stops at a missing parent)."""
        depth = 0
        while node.parent and depth < _MAX_DEPTH:
            parent = self.nodes.get((trace_hex, node.parent))
            if parent is None:
                return
            yield parent
            node, depth = parent, depth + 1

    def inherit_runs(self, calls: list[Row], events: list[Row]) -> None:
        """Set ``run_id`` of the call and event rows of spans that name no run to the run of
        their nearest ancestor that names one (this request first, then the memory)."""
        for (trace_hex, _), node in self.nodes.items():
            if node.run or not node.parent or (node.call is None and not node.events):
                continue
            run = None
            top = node
            for ancestor in self._ancestors(trace_hex, node):
                if ancestor.run:
                    run = ancestor.run
                    break
                top = ancestor
            if run is None and self.memory is not None and top.parent:
                run = self.memory.named_run(trace_hex, top.parent)  # an ancestor sent earlier
            if run is None:
                continue
            node.inherited = run
            if node.call is not None:
                calls[node.call]["run_id"] = run
            for index in node.events:
                events[index]["run_id"] = run

    def run_above(self, trace_hex: str, parent_hex: str) -> str | None:
        """The run named by span ``parent_hex`` or its nearest ancestor that names one (this
        request first, then the memory); None when none does."""
        current, depth = parent_hex, 0
        while current and depth < _MAX_DEPTH:
            node = self.nodes.get((trace_hex, current))
            if node is None:
                return self.memory.named_run(trace_hex, current) if self.memory is not None else None
            if node.run or node.inherited:
                return node.run or node.inherited
            current, depth = node.parent, depth + 1
        return None

    def aggregates(self, calls: list[Row], call_flags: dict[int, set[str]]) -> set[int]:
        """Indexes of call rows that are aggregates: usage that sums calls below them in the
        same trace (whatever their name or convention), in this request or an earlier one.
        Adds ``aggregate_mismatch`` to ``call_flags`` of the first call right below an
        aggregate whose (input, output) tokens differ from their sum; drops the aggregates'
        own flags (they are not calls)."""
        nodes = self.nodes
        below: dict[int, list[int]] = {}
        call_nodes = [(key, node, node.call) for key, node in nodes.items() if node.call is not None]
        for (trace_hex, _), node, index in call_nodes:
            current, depth = node, 0
            while current.parent and depth < _MAX_DEPTH:  # the nearest call above, if any
                parent = nodes.get((trace_hex, current.parent))
                if parent is None:
                    break
                if parent.call is not None:
                    below.setdefault(parent.call, []).append(index)
                    break
                current, depth = parent, depth + 1
        earlier: set[int] = set()  # aggregates whose calls came in an earlier request
        memory = self.memory
        if memory is not None:
            for (trace_hex, span_hex), _, index in call_nodes:
                if index not in below and memory.has_call_below(trace_hex, span_hex):
                    earlier.add(index)
        for aggregate, children in below.items():
            summed = tuple(sum(calls[i][name] or 0 for i in children) for name in _FIGURES)
            if tuple(calls[aggregate][name] or 0 for name in _FIGURES) != summed:
                call_flags.setdefault(min(children), set()).add("aggregate_mismatch")
        for aggregate in {*below, *earlier}:
            call_flags.pop(aggregate, None)  # not a call: its own flags do not count
        return set(below) | earlier

    def remember(self) -> None:
        """Hand the request's spans to the memory (no-op without one)."""
        if self.memory is not None:
            self.memory.remember(
                [
                    (trace_hex, span_hex, node.parent, node.run or node.inherited, node.call is not None)
                    for (trace_hex, span_hex), node in self.nodes.items()
                ]
            )


_FIGURES = ("input_tokens", "output_tokens")  # what an aggregate must agree with its calls on
