"""Map OTLP trace spans to store rows (design §4). Pure: no I/O besides the price lookup.

What a span becomes:

- the guard's run span (``budgetlens.run_id`` and ``gen_ai.operation.name=invoke_agent``) → one
  ``run_records`` row (limits, totals, stop reason) and its ``budgetlens.*`` span events →
  ``budget_events`` rows;
- a model call (an operation such as ``chat``/``call_llm``, an OpenInference ``LLM`` span, or any
  span with token counts) → one ``model_calls`` row. Token names are read in this order: current
  GenAI semconv, deprecated GenAI (``gen_ai.usage.prompt_tokens``/``completion_tokens``,
  ``gen_ai.system``), OpenInference (``llm.token_count.*``, ``llm.model_name``, ``llm.provider``),
  OpenLLMetry (``llm.usage.total_tokens``, ``gen_ai.usage.cache_*_input_tokens``);
- a tool span (``execute_tool``, OpenInference ``TOOL``) → a ``budgetlens.tool_call`` event;
- a foreign root span (no parent, GenAI attributes) → a ``run_records`` row for the trace
  (start/end; status ERROR → stop reason ``failed``, OK → ``completed`` even when a call below
  it failed and was recovered from).

Attribution (``budgetlens.attribution``): every call and run record carries ``team``,
``user_id``, ``session_id`` and ``tags`` from the span's attributes, else its resource's
(``budgetlens.otlp.attributes.ATTRIBUTION_SOURCES``: ``budgetlens.*``, ``user.id``, ``session.id``,
``enduser.id``, ...); ``budgetlens.service`` overrides the resource's ``service.name``.

Run id: ``budgetlens.run_id``, else the trace id (hex). Task type: ``budgetlens.task_type``, else
``gen_ai.agent.name`` (from any span of the trace in the same request), else ``service.name``
(applied by the ``runs`` rollup). Only allow-listed attributes are read, so prompts, completions,
messages and tool arguments/results never reach a row. Foreign calls without a cost attribute
are priced with ``budgetlens.pricing.cost_usd`` (genai-prices); unpriced stays NULL.

Module layout: the allow-list, attribute readers and validators are in
``budgetlens.otlp.attributes``; ``Mapped`` (rows as dicts keyed by store columns, readable as
Arrow) in ``budgetlens.otlp.rows``; the span-tree rules (run inheritance, aggregates) in
``budgetlens.otlp.tree``; span identity (ids, repeats, collisions) in ``budgetlens.otlp.identity``. Usage conventions are normalized by ``budgetlens.usage`` and calls
priced by ``budgetlens.pricing.price_call`` (one error policy: never raises; unpriced is NULL).

A span with a bad value (missing or malformed ids, negative or non-numeric token counts, an
unknown stop reason or usage status) is rejected alone with a reason naming the attribute; its
run is marked ``rejected_span`` by a stub row, or (a tool span, a span id collision, an OTLP/JSON
span rejected while decoding) by the flag on a row of its run (``budgetlens.otlp.rejected``).

Runs as they really were (within one request, and across requests through a ``SpanMemory``):

- identity: a span is (trace id, span id); an exact repeat is stored once, a different span under
  the same ids is rejected (``span id collision``, also counted in ``Mapped.flagged``), in this
  request and, through the ``SpanMemory``, in a later one;
- a span that names no run belongs to the run of its nearest ancestor that names one (at any
  depth);
- a parent loop (a span that is its own parent, or spans that are each other's ancestors) is
  broken: those spans are mapped as roots (their run is the one they name, else the trace id),
  their calls stored with ``parent_span_id`` NULL and flagged ``parent_loop``;
- aggregates are not calls: a span with usage above other model-call spans of its trace is
  dropped as a call; a disagreement with the sum of the calls right below it is flagged;
- usage in a foreign convention (cache parts above input, reasoning above output) is normalized
  (``budgetlens.usage.normalize_counts``) and flagged; impossible times (future beyond ``FUTURE_SKEW_S``, end before start, zero) are
  repaired and flagged. Flags (``budgetlens.semconv.QUALITY_FLAGS``) fill the ``quality``
  column and ``Mapped.flagged``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable
from typing import Any

from budgetlens import semconv as sc
from budgetlens.limits import MAX_RUN_ID_CHARS, run_id_problem
from budgetlens.otlp.attributes import (
    ALLOWED_ATTRIBUTES,
    USAGE_KEYS,
    SpanRejected,
    first_text,
    read_attributes,
    text,
    usage_problem,
)
from budgetlens.otlp.call_fast import fast_call_row
from budgetlens.otlp.identity import SpanIds, trace_shard
from budgetlens.otlp.memory import Memory
from budgetlens.otlp.rejected import Mark, mark_of, mark_runs, stub_context, stub_rows
from budgetlens.otlp.rows import Mapped, Row
from budgetlens.otlp.span_attribution import attribution, names_attribution
from budgetlens.otlp.span_rows import (
    SpanContext,
    Times,
    apply_prices,
    event_row,
    is_text,
    repaired_times,
    root_record,
    run_record,
)
from budgetlens.otlp.tree import PARENT_LOOP, Node, SpanTree

log = logging.getLogger(__name__)

_STATUS_OK = 1  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_OK
_STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
_AGENT_KINDS = ("AGENT", "CHAIN")
_EVENT_NAMES = frozenset(sc.EVENT_NAMES)
#: ``run_id_problem`` of a run id of at most ``MAX_RUN_ID_CHARS`` (a run's spans name the same id).
_run_id_problem = functools.lru_cache(maxsize=4096)(run_id_problem)
#: Clock skew allowed between an agent and the collector before a timestamp counts as future.
FUTURE_SKEW_S = 300.0


#: A resource's attribution for the spans that name none: (its service name override, the rest).
_Shared = tuple[str | None, dict]
#: One row a span produces before it is appended: (table kind, row, its quality flags).
_Pending = tuple[str, Row, list[str]]


class _Mapper:
    """Maps the spans of one request; rows go to ``self.out`` (a ``Mapped``).

    ``now_ns``: the receive time (ns since the epoch); timestamps later than it by more than
    ``FUTURE_SKEW_S`` are clamped to it and flagged.
    """

    def __init__(
        self, source: str, price: bool, now_ns: int, memory: Memory | None = None, marks=(), shard=None
    ):
        self.shard = shard  # (k, n): map only the spans of the traces in shard k of n
        self.source = source
        self.price = price
        self.now_ns = now_ns
        self.latest_ns = now_ns + int(FUTURE_SKEW_S * 1e9)
        self.out = Mapped()
        self.agent_by_trace: dict[str, str] = {}
        self.foreign_calls: list[int] = []  # indexes into out.call_rows
        self.tree = SpanTree(memory)
        self.ids = SpanIds(memory)
        self.call_flags: dict[int, set[str]] = {}
        self.to_price: list[Any] = []  # (call row, PriceRequest): priced as one batch at finish
        self.record_flags: dict[int, set[str]] = {}
        self.marks: list[Mark] = list(marks)  # rejected spans that left no row (their runs)

    def resource_spans(self, resource_spans: Iterable[Any]) -> None:
        out = self.out
        for rs in resource_spans:
            service = None
            for kv in rs.resource.attributes:
                if kv.key == sc.SERVICE_NAME:
                    service = kv.value.string_value or None
            resource = read_attributes(rs.resource.attributes)
            try:  # the attribution of a span that names none (most): (service name, the rest)
                who = attribution({}, resource)
                shared: _Shared | None = (who.pop("service_name"), who)
            except SpanRejected:  # a bad resource value: each span reads it (and is rejected)
                shared = None
            for scope_spans in rs.scope_spans:
                spans = scope_spans.spans
                if self.shard is not None:
                    k, n = self.shard
                    spans = [span for span in spans if trace_shard(span.trace_id, n) == k]
                out.spans += len(spans)
                for span in spans:
                    try:
                        self.span(span, service, resource, shared)
                    except SpanRejected as reason:
                        out.rejected += 1
                        self.ids.prints.pop((span.trace_id.hex(), span.span_id.hex()), None)
                        out.errors.append(f"span {span.span_id.hex() or '?'}: {reason}")

    def _times(self, span: Any) -> tuple[Times, list[str]]:
        return repaired_times(span.start_time_unix_nano, span.end_time_unix_nano, self.now_ns, self.latest_ns)

    def span(
        self, span: Any, service: str | None, resource: dict | None = None, shared: _Shared | None = None
    ) -> None:
        try:
            ids = self.ids.of(span)
        except SpanRejected:  # bad ids or a span id collision: no row; its run is marked
            mark = mark_of(span)
            if mark is not None:
                self.marks.append(mark)
            raise
        if ids is None:
            return  # the same span twice in one request: stored once
        attrs = read_attributes(span.attributes)
        try:
            self._span(span, ids, attrs, service, resource, shared)
        except SpanRejected:
            self._mark_rejected(span, ids, attrs, service)
            raise
        except ValueError as error:  # usage normalisation, validation or pricing: this span alone
            self._mark_rejected(span, ids, attrs, service)
            raise SpanRejected(usage_problem(attrs, error)) from error

    def _mark_rejected(self, span: Any, ids: tuple[str, str, str], attrs: dict, service: str | None) -> None:
        """Keep a rejected span's place with stub rows flagged ``rejected_span`` (its values
        are not stored; ``budgetlens.otlp.rejected``), so its run is marked, not clean."""
        ctx = stub_context(
            self.source, ids, attrs, service, self._times(span)[0], span.status.code == _STATUS_ERROR
        )
        rows = stub_rows(
            ctx, attrs.get(sc.GEN_AI_OPERATION_NAME), attrs.get(sc.OPENINFERENCE_SPAN_KIND), span.name
        )
        if not rows:  # a tool span: the flag goes on a row of its run
            self.marks.append((ctx.trace_hex, ctx.parent_hex, ctx.budget_run))
        self._append(ctx, rows, [])

    def _span(
        self,
        span: Any,
        ids: tuple[str, str, str],
        attrs: dict,
        service: str | None,
        resource: dict | None,
        shared: _Shared | None = None,
    ) -> None:
        trace_hex, span_hex, parent_hex = ids
        get = attrs.get
        op = get(sc.GEN_AI_OPERATION_NAME)
        kind = get(sc.OPENINFERENCE_SPAN_KIND)
        budget_run = get(sc.BUDGET_RUN_ID)
        kept = type(budget_run) is str and len(budget_run) <= MAX_RUN_ID_CHARS  # its check remembered
        if budget_run is not None and (problem := (_run_id_problem if kept else run_id_problem)(budget_run)):
            raise SpanRejected(f"attribute {sc.BUDGET_RUN_ID} must be {problem}")
        run_id = budget_run or trace_hex
        agent = get(sc.GEN_AI_AGENT_NAME)
        if agent is not None and not is_text(agent):
            agent = text(attrs, sc.GEN_AI_AGENT_NAME)
        if agent and not budget_run:
            self.agent_by_trace.setdefault(trace_hex, agent)
        if shared is not None and not names_attribution(attrs):
            service = shared[0] or service
            who = shared[1]  # only read: its values go into each row
        else:
            who = attribution(attrs, resource)
            service = who.pop("service_name") or service
        times, time_flags = self._times(span)
        code = span.status.code
        failed = code == _STATUS_ERROR
        ctx = SpanContext(
            self.source,
            attrs,
            span_hex,
            run_id,
            trace_hex,
            parent_hex,
            service,
            times,
            failed,
            budget_run,
            code == _STATUS_OK,
        )
        # built fully before anything is appended, so a rejected span adds nothing
        rows = self._main_rows(ctx, op, kind, span.name)
        if not parent_hex and not budget_run and (op or agent or kind or rows):
            rows.append(("record", root_record(ctx, agent), []))
        for table, row, _ in rows:
            if table != "event":
                row.update(who)
        for index, event in enumerate(span.events):
            if event.name in _EVENT_NAMES:
                rows.append(("event", event_row(event, index, ctx, self.now_ns, self.latest_ns), []))
        self._append(ctx, rows, time_flags)

    def _main_rows(self, ctx: SpanContext, op: Any, kind: Any, name: str) -> list[_Pending]:
        """The run record, model call or tool event a span is (at most one), as pending rows."""
        agentish = op == sc.OPERATION_INVOKE_AGENT or kind in _AGENT_KINDS
        if ctx.budget_run and (op == sc.OPERATION_INVOKE_AGENT or name.startswith("invoke_agent")):
            return [("record", run_record(ctx), [])]
        if not agentish and (
            op in sc.MODEL_CALL_OPERATIONS or kind == "LLM" or not USAGE_KEYS.isdisjoint(ctx.attrs)
        ):
            row, flags = fast_call_row(ctx, self.price, self.to_price)
            return [("call", row, flags)]
        if op == sc.OPERATION_EXECUTE_TOOL or kind == "TOOL":
            tool = {
                "event_id": f"{ctx.trace_hex}:{ctx.span_hex}",
                "run_id": ctx.run_id,
                "span_id": ctx.span_hex,
                "ts_utc": ctx.times[0],
                "name": sc.EVENT_TOOL_CALL,
                "tool_name": first_text(ctx.attrs, sc.GEN_AI_TOOL_NAME, sc.TOOL_NAME),
            }
            return [("event", tool, [])]
        return []

    def _append(self, ctx: SpanContext, rows: list[_Pending], time_flags: list[str]) -> None:
        """Append a span's rows, note its node, and attach the time flags to its call or record."""
        out = self.out
        node = Node(ctx.parent_hex, ctx.budget_run)
        self.tree.add(ctx.trace_hex, ctx.span_hex, node)
        for kind, row, flags in rows:
            if kind == "call":
                node.call = len(out.call_rows)
                if not ctx.budget_run:
                    self.foreign_calls.append(node.call)
                out.call_rows.append(row)
                if flags or time_flags:
                    self.call_flags[node.call] = {*flags, *time_flags}
            elif kind == "record":
                node.record = len(out.record_rows)
                out.record_rows.append(row)
                if (flags or time_flags) and node.call is None:
                    self.record_flags[node.record] = {*flags, *time_flags}
            else:
                node.events.append(len(out.event_rows))
                out.event_rows.append(row)

    def finish(self) -> Mapped:
        """Apply the trace-wide rules (task type from the agent, the tree rules, quality flags)
        and return the rows."""
        out, agents = self.out, self.agent_by_trace
        rows = out.call_rows
        if agents:
            for index in self.foreign_calls:
                row = rows[index]
                if row["task_type"] is None:
                    row["task_type"] = agents.get(row["trace_id"])
        self._break_loops()
        self.tree.inherit_runs(rows, out.event_rows)
        aggregates = self.tree.aggregates(rows, self.call_flags)
        mark_runs(self.marks, self.tree, out, self.call_flags, self.record_flags, aggregates)
        self._write_flags()
        collisions = self.ids.collisions
        if collisions:
            out.flagged["span_id_collision"] = out.flagged.get("span_id_collision", 0) + collisions
        self.tree.remember()
        prints = self.ids.prints
        if prints:  # the store compares it with a stored row's (budgetlens.store.resends)
            for row in rows:
                row["content_digest"] = prints.get((row["trace_id"], row["span_id"]))
        if prints and self.tree.memory is not None:
            self.tree.memory.remember_prints(prints)
        out.prints = prints
        if aggregates:
            dropped = {id(rows[index]) for index in aggregates}
            self.to_price = [item for item in self.to_price if id(item[0]) not in dropped]
            out.call_rows = [row for index, row in enumerate(rows) if index not in aggregates]
        apply_prices(self.to_price)  # the body's calls in one batch (aggregates are not priced)
        return out

    def _break_loops(self) -> None:
        """Spans on a parent loop (their own parent, or each other's ancestors) become roots:
        their rows keep their values, lose the looping ``parent_span_id`` and are flagged
        ``parent_loop``; their run is the one they name, else the trace id."""
        nodes = self.tree.nodes
        for key in self.tree.break_loops():
            node = nodes[key]
            if node.call is not None:
                self.out.call_rows[node.call]["parent_span_id"] = None
                self.call_flags.setdefault(node.call, set()).add(PARENT_LOOP)
            elif node.record is not None:
                self.record_flags.setdefault(node.record, set()).add(PARENT_LOOP)

    def _write_flags(self) -> None:
        """Write the quality flags into the rows and count them by reason."""
        out = self.out
        counts = out.flagged
        for rows, by_row in ((out.call_rows, self.call_flags), (out.record_rows, self.record_flags)):
            for index, flags in by_row.items():
                rows[index]["quality"] = ",".join(sorted(flags))
                for flag in flags:
                    counts[flag] = counts.get(flag, 0) + 1


def map_request(
    request: Any,
    *,
    source: str = "otlp",
    price: bool = True,
    now_ns: int | None = None,
    memory: Memory | None = None,
    marks: Iterable[Mark] = (),
    shard: tuple[int, int] | None = None,
) -> Mapped:
    """Map an ``ExportTraceServiceRequest`` (protobuf message) to store rows.

    ``source`` fills the ``source`` column; ``price=False`` skips genai-prices for foreign calls;
    ``now_ns``: the receive time (ns since the epoch, default now) future timestamps are clamped
    to; ``memory``: a ``SpanMemory`` shared by the requests of one collector, so the tree rules
    (inherited runs, aggregates) hold across requests. Never raises for span content: invalid
    spans are counted in ``Mapped.rejected``, repaired ones in ``Mapped.flagged`` (by quality flag).
    ``marks``: spans rejected before mapping (``Decoded.marks``) whose runs are marked.
    ``shard``: ``(k, n)`` maps only the spans whose trace is in shard ``k`` of ``n``
    (``trace_shard``; ``Mapped.spans`` counts those).
    """
    now = time.time_ns() if now_ns is None else now_ns
    mapper = _Mapper(source, price, now, memory, marks, shard)
    mapper.resource_spans(request.resource_spans)
    return mapper.finish()


def map_otlp_json(
    document: dict[str, Any], *, source: str = "otlp-json", price: bool = True, now_ns: int | None = None
) -> Mapped:
    """Map an OTLP/JSON trace document (a dict as loaded from a file) to store rows.

    Spans rejected while decoding (bad hex ids, wrong types) count in ``Mapped.rejected``.
    Raises ``budgetlens.otlp.decode.OtlpError`` when the document is not OTLP/JSON at all.
    """
    from budgetlens.otlp.decode import decode_json_document

    decoded = decode_json_document(document)
    mapped = map_request(decoded.request, source=source, price=price, now_ns=now_ns, marks=decoded.marks)
    mapped.spans += decoded.rejected
    mapped.rejected += decoded.rejected
    mapped.errors = decoded.errors + mapped.errors
    return mapped


__all__ = ["ALLOWED_ATTRIBUTES", "Mapped", "map_otlp_json", "map_request", "trace_shard"]
