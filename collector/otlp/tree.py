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

from dataclasses import dataclass, field

from budgetlens.otlp.memory import Memory
from budgetlens.otlp.rows import Row

#: The quality flag of a span whose parent chain led back to itself (a loop; its parent dropped).
PARENT_LOOP = "parent_loop"

Key = tuple[str, str]


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
    """The accepted spans of one request by (trace hex, span hex), with the tree rules.

    Every walk is iterative and memoized (no depth limit: a chain of 100,000 spans resolves
    like one of two). Parent loops (a span that is its own parent, or spans that are each
    other's ancestors) are broken by ``break_loops`` before the rules run.
    """

    def __init__(self, memory: Memory | None = None) -> None:
        self.memory = memory
        self.nodes: dict[Key, Node] = {}

    def add(self, trace_hex: str, span_hex: str, node: Node) -> None:
        self.nodes[(trace_hex, span_hex)] = node

    def break_loops(self) -> list[Key]:
        """Drop the parent of every span on a parent loop in this request (it becomes a root:
        its run is the one it names, else its trace id) and return their keys, in the order
        found. Call before the other rules. O(spans)."""
        nodes = self.nodes
        state: dict[Key, int] = {}  # key -> the walk that visited it
        looped: list[Key] = []
        for walk, start in enumerate(nodes, start=1):
            if start in state:
                continue
            key: Key | None = start
            path: list[Key] = []
            while key is not None and key not in state:
                state[key] = walk
                path.append(key)
                parent = nodes[key].parent
                key = (key[0], parent) if parent and (key[0], parent) in nodes else None
            if key is not None and state[key] == walk:  # back on this walk's own path: a loop
                looped.extend(path[path.index(key) :])
        for key in looped:
            nodes[key].parent = ""
        return looped

    def _named(
        self, trace_hex: str, start: Node, cache: dict[int, tuple[str | None, str]]
    ) -> tuple[str | None, str]:
        """(the run named by ``start`` or its nearest ancestor in this request, else None; the
        parent hex where the chain leaves this request, "" at a root). Memoized in ``cache``
        by node identity; iterative."""
        path: list[Node] = []
        node: Node | None = start
        result: tuple[str | None, str]
        while True:
            assert node is not None
            hit = cache.get(id(node))
            if hit is not None:
                result = hit
                break
            if node.run:
                result = (node.run, "")
                break
            path.append(node)
            if not node.parent:
                result = (None, "")
                break
            parent = self.nodes.get((trace_hex, node.parent))
            if parent is None:
                result = (None, node.parent)
                break
            node = parent
        for seen in path:
            cache[id(seen)] = result
        return result

    def inherit_runs(self, calls: list[Row], events: list[Row]) -> None:
        """Set ``run_id`` of the call and event rows of spans that name no run to the run of
        their nearest ancestor that names one (this request first, then the memory)."""
        cache: dict[int, tuple[str | None, str]] = {}
        remembered: dict[Key, str | None] = {}
        for (trace_hex, _), node in self.nodes.items():
            if node.run or not node.parent or (node.call is None and not node.events):
                continue
            run, top = self._named(trace_hex, node, cache)
            if run is None and self.memory is not None and top:
                if (trace_hex, top) not in remembered:  # an ancestor sent earlier
                    remembered[(trace_hex, top)] = self.memory.named_run(trace_hex, top)
                run = remembered[(trace_hex, top)]
            if run is None:
                continue
            node.inherited = run
            if node.call is not None:
                calls[node.call]["run_id"] = run
            for index in node.events:
                events[index]["run_id"] = run

    def run_above(self, trace_hex: str, parent_hex: str) -> str | None:
        """The run named by span ``parent_hex`` or its nearest ancestor that names one (this
        request first, then the memory); None when none does. Stops at a loop."""
        current, seen = parent_hex, set()
        while current and current not in seen:
            seen.add(current)
            node = self.nodes.get((trace_hex, current))
            if node is None:
                return self.memory.named_run(trace_hex, current) if self.memory is not None else None
            if node.run or node.inherited:
                return node.run or node.inherited
            current = node.parent
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
        nearest: dict[int, int | None] = {}  # id(node) -> the call row of its nearest call above
        for (trace_hex, _), node, index in call_nodes:
            path: list[Node] = []
            current: Node | None = node
            found: int | None = None
            while current is not None and current.parent:  # the nearest call above, if any
                if id(current) in nearest:
                    found = nearest[id(current)]
                    break
                path.append(current)
                parent = nodes.get((trace_hex, current.parent))
                if parent is not None and parent.call is not None:
                    found = parent.call
                    break
                current = parent
            for seen in path:
                nearest[id(seen)] = found
            if found is not None:
                below.setdefault(found, []).append(index)
        earlier: set[int] = set()  # aggregates whose calls came in an earlier request
        memory = self.memory
        if memory is not None:
            for (trace_hex, span_hex), _, index in call_nodes:
                if index not in below and memory.has_call_below(trace_hex, span_hex):
                    if self._loops_back(trace_hex, span_hex):  # the "call below" is above it too
                        call_flags.setdefault(index, set()).add(PARENT_LOOP)
                    else:
                        earlier.add(index)
        for aggregate, children in below.items():
            summed = tuple(sum(calls[i][name] or 0 for i in children) for name in _FIGURES)
            if tuple(calls[aggregate][name] or 0 for name in _FIGURES) != summed:
                call_flags.setdefault(min(children), set()).add("aggregate_mismatch")
        for aggregate in {*below, *earlier}:
            call_flags.pop(aggregate, None)  # not a call: its own flags do not count
        return set(below) | earlier

    def _loops_back(self, trace_hex: str, span_hex: str) -> bool:
        """True when the parents of ``span_hex`` (this request, then the memory) lead back to it:
        a loop that closes across requests."""
        memory, seen = self.memory, set()
        current: str | None = self.nodes[(trace_hex, span_hex)].parent
        while current and current not in seen:
            if current == span_hex:
                return True
            seen.add(current)
            node = self.nodes.get((trace_hex, current))
            if node is not None:
                current = node.parent
            else:
                current = memory.parent_of(trace_hex, current) if memory is not None else None
        return False

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
