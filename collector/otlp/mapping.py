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
  (start/end; status ERROR → stop reason ``failed``).

Run id: ``budgetlens.run_id``, else the trace id (hex). Task type: ``budgetlens.task_type``, else
``gen_ai.agent.name`` (from any span of the trace in the same request), else ``service.name``
(applied by the ``runs`` rollup). Only allow-listed attributes are read, so prompts, completions,
messages and tool arguments/results never reach a row. Foreign calls without a cost attribute
are priced with ``budgetlens.pricing.cost_usd`` (genai-prices); unpriced stays NULL.

Module layout: the allow-list, attribute readers and validators are in
``budgetlens.otlp.attributes``; ``Mapped`` (rows as tuples, readable as dicts or Arrow) in
``budgetlens.otlp.rows``.

A span with a bad value (missing or malformed ids, negative or non-numeric token counts, an
unknown stop reason or usage status) is rejected alone with a reason naming the attribute.

Runs as they really were (within one request, and across requests through a ``SpanMemory``):

- identity: a span is (trace id, span id); an exact repeat is stored once, a different span under
  the same ids is rejected (``span id collision``);
- a span that names no run belongs to the run of its nearest ancestor that names one;
- aggregates are not calls: a span with usage above other model-call spans of its trace is
  dropped as a call; a disagreement with the sum of the calls right below it is flagged;
- usage in a foreign convention (cache parts above input, reasoning above output) is normalized
  and flagged; impossible times (future beyond ``FUTURE_SKEW_S``, end before start, zero) are
  repaired and flagged. Flags (``budgetlens.semconv.QUALITY_FLAGS``) fill the ``quality``
  column and ``Mapped.flagged``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from budgetlens import semconv as sc
from budgetlens.otlp.attributes import (
    ALLOWED_ATTRIBUTES,
    EVENT_COUNTS,
    LIMITS,
    MAX_AMOUNT,
    MAX_ID_CHARS,
    NO_TOKENS,
    TOKEN_SOURCES,
    USAGE_KEYS,
    SpanRejected,
    amount,
    choice,
    count,
    first_count,
    first_text,
    maximum_of,
    read_attributes,
    text,
    token_counts,
)
from budgetlens.otlp.memory import SpanMemory
from budgetlens.otlp.rows import (
    CALL_KEYS,
    EVENT_KEYS,
    RECORD_KEYS,
    ROOT_RECORD_KEYS,
    TOOL_EVENT_KEYS,
    Mapped,
)

log = logging.getLogger(__name__)

_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
_AGENT_KINDS = ("AGENT", "CHAIN")
_EVENT_NAMES = frozenset(sc.EVENT_NAMES)
_RECORD_TOKENS = tuple(names for column, names in TOKEN_SOURCES if column != "total_tokens")
_CALL_COUNTS = tuple(
    (key, maximum_of(key))
    for key in (sc.BUDGET_TURN, sc.BUDGET_RESERVED_TOKENS, sc.BUDGET_USED_TOKENS, sc.BUDGET_REMAINING_TOKENS)
)
_CALL_TASK = CALL_KEYS.index("task_type")
_CALL_TRACE = CALL_KEYS.index("trace_id")
_CALL_RUN = CALL_KEYS.index("run_id")
_CALL_INPUT = CALL_KEYS.index("input_tokens")
_CALL_OUTPUT = CALL_KEYS.index("output_tokens")
_CALL_QUALITY = CALL_KEYS.index("quality")
_EVENT_RUN = EVENT_KEYS.index("run_id")
#: Clock skew allowed between an agent and the collector before a timestamp counts as future.
FUTURE_SKEW_S = 300.0
_MAX_DEPTH = 1000  # parent chains longer than this (or cyclic) are not followed

# The tuples below are written in these column orders; fail loudly if the schema moves.
_EXPECTED = {
    "call": (
        "span_id",
        "run_id",
        "trace_id",
        "parent_span_id",
        "source",
        "service_name",
        "task_type",
        "operation_name",
        "provider_name",
        "request_model",
        "response_model",
        "start_utc",
        "end_utc",
        "duration_s",
        "turn",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "reserved_tokens",
        "used_tokens",
        "remaining_tokens",
        "cost_usd",
        "usage_status",
        "error_type",
        "quality",
        "call_id",
        "price_version",
        "usage_details",
        "unpriced_parts",
    ),
    "record": (
        "run_id",
        "trace_id",
        "source",
        "service_name",
        "task_type",
        "agent_name",
        "model",
        "start_utc",
        "end_utc",
        "duration_s",
        "turns",
        "tool_calls",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cost_usd",
        "stop_reason",
        "usage_status",
        "retryable",
        *(column for column, _, _ in LIMITS),
        "quality",
    ),
    "event": (
        "event_id",
        "run_id",
        "span_id",
        "ts_utc",
        "name",
        "reason",
        "from_model",
        "to_model",
        "tool_name",
        "reserved_tokens",
        "used_tokens",
        "remaining_tokens",
        "percent",
    ),
}
if tuple(_EXPECTED.values()) != (CALL_KEYS, RECORD_KEYS, EVENT_KEYS):
    raise RuntimeError("budgetlens.otlp.mapping: store columns changed; update the row tuples")


def _is_text(value) -> bool:
    """True for a value ``text`` would return unchanged: a non-empty str of <= 200 chars."""
    return type(value) is str and 0 < len(value) <= 200


@dataclass(slots=True)
class _Node:
    """What ``finish`` needs of one accepted span: its parent (hex, "" for a root), the run id
    it names (``budgetlens.run_id``, None when it names none) and the rows it produced."""

    parent: str
    run: str | None
    call: int | None = None
    record: int | None = None
    events: list[int] = field(default_factory=list)
    inherited: str | None = None  # the run of its nearest named ancestor, once resolved


class _Span(NamedTuple):
    """The parts of one span that its rows are built from."""

    attrs: dict
    span_hex: str
    run_id: str
    trace_hex: str
    parent_hex: str
    service: str | None
    times: tuple
    failed: bool
    budget_run: str | None


class _Mapper:
    """Maps the spans of one request; rows go to ``self.out`` (a ``Mapped``).

    ``now_ns``: the receive time (ns since the epoch); timestamps later than it by more than
    ``FUTURE_SKEW_S`` are clamped to it and flagged.
    """

    def __init__(self, source: str, price: bool, now_ns: int, memory: SpanMemory | None = None):
        self.source = source
        self.memory = memory
        self.price = price
        self.now_ns = now_ns
        self.latest_ns = now_ns + int(FUTURE_SKEW_S * 1e9)
        self.out = Mapped()
        self.agent_by_trace: dict[str, str] = {}
        self.foreign_calls: list[int] = []  # indexes into out.call_rows
        self.nodes: dict[tuple[str, str], _Node] = {}  # (trace hex, span hex) -> node
        self.seen: dict[tuple[str, str], object] = {}  # (trace hex, span hex) -> first span
        self.call_flags: dict[int, set[str]] = {}
        self.record_flags: dict[int, set[str]] = {}

    def resource_spans(self, resource_spans) -> None:
        out = self.out
        for rs in resource_spans:
            service = None
            for kv in rs.resource.attributes:
                if kv.key == sc.SERVICE_NAME:
                    service = kv.value.string_value or None
            for scope_spans in rs.scope_spans:
                spans = scope_spans.spans
                out.spans += len(spans)
                for span in spans:
                    try:
                        self.span(span, service)
                    except SpanRejected as reason:
                        out.rejected += 1
                        out.errors.append(f"span {span.span_id.hex() or '?'}: {reason}")

    def _identity(self, span) -> tuple[str, str, str] | None:
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
            raise SpanRejected(
                f"span id collision: trace {key[0]} already has a different span {key[1]} "
                "in this request (a span is identified by trace id + span id)"
            )
        return key[0], key[1], parent.hex()

    def _times(self, span) -> tuple[tuple, list[str]]:
        """(start µs, end µs, duration s) of a span and the quality flags of their repair: a zero
        timestamp is NULL (``missing_time``), one past the receive time + skew is the receive
        time (``future_time``), an end before the start is the start (``end_before_start``)."""
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        flags = []
        if not start or not end:
            flags.append("missing_time")
        if start > self.latest_ns or end > self.latest_ns:
            flags.append("future_time")
            start, end = min(start, self.now_ns), min(end, self.now_ns)
        if start and end and end < start:
            flags.append("end_before_start")
            end = start
        times = (
            start // 1000 if start else None,
            end // 1000 if end else None,
            (end - start) / 1e9 if start and end else None,
        )
        return times, flags

    def span(self, span, service) -> None:
        ids = self._identity(span)
        if ids is None:
            return  # the same span twice in one request: stored once
        trace_hex, span_hex, parent_hex = ids
        attrs = read_attributes(span.attributes)
        get = attrs.get
        op = get(sc.GEN_AI_OPERATION_NAME)
        kind = get(sc.OPENINFERENCE_SPAN_KIND)
        budget_run = get(sc.BUDGET_RUN_ID)
        if budget_run is not None and (
            type(budget_run) is not str or not budget_run or len(budget_run) > MAX_ID_CHARS
        ):
            raise SpanRejected(
                f"attribute {sc.BUDGET_RUN_ID} must be a non-empty string of at "
                f"most {MAX_ID_CHARS} characters"
            )
        run_id = budget_run or trace_hex
        agent = get(sc.GEN_AI_AGENT_NAME)
        if agent is not None and not _is_text(agent):
            agent = text(attrs, sc.GEN_AI_AGENT_NAME)
        if agent and not budget_run:
            self.agent_by_trace.setdefault(trace_hex, agent)
        times, time_flags = self._times(span)
        failed = span.status.code == _STATUS_ERROR
        ctx = _Span(attrs, span_hex, run_id, trace_hex, parent_hex, service, times, failed, budget_run)
        # (kind of row, row, narrow keys, flags): built fully before anything is appended, so a
        # rejected span adds nothing
        rows = self._main_rows(ctx, op, kind, span.name)
        if not parent_hex and not budget_run and (op or agent or kind or rows):
            rows.append(("record", self.root_record(ctx, agent), ROOT_RECORD_KEYS, []))
        for index, event in enumerate(span.events):
            if event.name in _EVENT_NAMES:
                rows.append(("event", self.event(event, index, ctx), None, []))
        self._append(ctx, rows, time_flags)

    def _main_rows(self, ctx: _Span, op, kind, name: str) -> list:
        """The run record, model call or tool event a span is (at most one), as ``rows`` items."""
        agentish = op == sc.OPERATION_INVOKE_AGENT or kind in _AGENT_KINDS
        if ctx.budget_run and (op == sc.OPERATION_INVOKE_AGENT or name.startswith("invoke_agent")):
            return [("record", self.run_record(ctx), None, [])]
        if not agentish and (
            op in sc.MODEL_CALL_OPERATIONS or kind == "LLM" or not USAGE_KEYS.isdisjoint(ctx.attrs)
        ):
            row, flags = self.call(ctx)
            return [("call", row, None, flags)]
        if op == sc.OPERATION_EXECUTE_TOOL or kind == "TOOL":
            key = f"{ctx.trace_hex}:{ctx.span_hex}"
            tool = first_text(ctx.attrs, sc.GEN_AI_TOOL_NAME, sc.TOOL_NAME)
            row = (key, ctx.run_id, ctx.span_hex, ctx.times[0], sc.EVENT_TOOL_CALL, None, None, None, tool)
            return [("event", (*row, None, None, None, None), TOOL_EVENT_KEYS, [])]
        return []

    def _append(self, ctx: _Span, rows: list, time_flags: list[str]) -> None:
        """Append a span's rows, note its node, and attach the time flags to its call or record."""
        out = self.out
        node = _Node(ctx.parent_hex, ctx.budget_run)
        self.nodes[(ctx.trace_hex, ctx.span_hex)] = node
        for kind, row, narrow, flags in rows:
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
                out.record_keys.append(narrow)
                if time_flags and node.call is None:
                    self.record_flags[node.record] = set(time_flags)
            else:
                node.events.append(len(out.event_rows))
                out.event_rows.append(row)
                out.event_keys.append(narrow)

    def root_record(self, ctx: _Span, agent) -> tuple:
        """The run record of a foreign root span (the trace's run: start/end, failed)."""
        return (
            ctx.run_id,
            ctx.trace_hex,
            self.source,
            ctx.service,
            agent,
            agent,
            first_text(ctx.attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME),
            *ctx.times,
            *(None,) * 9,
            sc.STOP_FAILED if ctx.failed else None,
            None,
            None,
            *(None,) * len(LIMITS),
            None,
        )

    def run_record(self, ctx: _Span) -> tuple:
        attrs = ctx.attrs
        stop = choice(attrs, sc.BUDGET_STOP_REASON, sc.STOP_REASONS)
        retryable = attrs.get(sc.BUDGET_RETRYABLE)
        if retryable is not None and type(retryable) is not bool:
            raise SpanRejected(f"attribute {sc.BUDGET_RETRYABLE} must be a boolean")
        head = (
            ctx.run_id,
            ctx.trace_hex,
            self.source,
            ctx.service,
            text(attrs, sc.BUDGET_TASK_TYPE),
            text(attrs, sc.GEN_AI_AGENT_NAME),
            text(attrs, sc.GEN_AI_REQUEST_MODEL),
            *ctx.times,
            count(attrs, sc.BUDGET_TURNS),
            count(attrs, sc.BUDGET_TOOL_CALLS),
        )
        total = count(attrs, sc.BUDGET_USED_TOKENS)
        cost = amount(attrs, sc.BUDGET_COST_USD)
        status = choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES)
        inp, outp, cache_read, cache_write, reasoning = (
            first_count(attrs, names) for names in _RECORD_TOKENS
        )
        limits = tuple(count(attrs, key) if integral else amount(attrs, key) for _, key, integral in LIMITS)
        return (
            *head,
            inp,
            outp,
            total,
            cache_read,
            cache_write,
            reasoning,
            cost,
            stop or (sc.STOP_FAILED if ctx.failed else None),
            status,
            retryable,
            *limits,
            None,
        )

    def call(self, ctx: _Span) -> tuple[tuple, list[str]]:
        """The model_calls row of a span and its quality flags (``foreign_usage``,
        ``partial_usage``)."""
        # Each value is taken as it is when it already has the form the row needs (the common
        # case); anything else goes through the validator, which converts it or rejects the span
        # with the same message, in the same order as the row's fields.
        attrs = ctx.attrs
        get = attrs.get
        flags = []
        tokens = token_counts(attrs)
        if tokens is not NO_TOKENS:
            tokens, normalized = _normalize_usage(tokens)
            if normalized:
                flags.append("foreign_usage")
        status = get(sc.BUDGET_USAGE_STATUS)
        if status is None:
            reported = tokens[0] is not None or tokens[1] is not None or tokens[2] is not None
            status = sc.USAGE_REPORTED if reported else sc.USAGE_UNKNOWN
        elif status not in sc.USAGE_STATUSES:
            choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES)
        if status == sc.USAGE_PARTIAL:
            flags.append("partial_usage")
        request_model, response_model, provider = _models(attrs)
        cost = get(sc.BUDGET_COST_USD)
        if cost is not None and not (type(cost) is float and 0 <= cost <= MAX_AMOUNT):
            cost = amount(attrs, sc.BUDGET_COST_USD)
        version = unpriced = None
        if cost is None and not ctx.budget_run and status == sc.USAGE_REPORTED:
            parts = (amount(attrs, sc.GEN_AI_USAGE_INPUT_COST), amount(attrs, sc.GEN_AI_USAGE_OUTPUT_COST))
            if None not in parts:
                cost = parts[0] + parts[1]
            elif self.price:  # at the span's start: a late or backfilled span keeps its date's price
                cost, version, unpriced = _price(
                    response_model or request_model, tokens, provider, ctx.times[0]
                )
        error_type = get(sc.ERROR_TYPE)
        if error_type is not None:
            error_type = text(attrs, sc.ERROR_TYPE)
        if ctx.failed and not error_type:
            error_type = "_OTHER"
        task = get(sc.BUDGET_TASK_TYPE)
        if task is not None and not _is_text(task):
            task = text(attrs, sc.BUDGET_TASK_TYPE)
        op = get(sc.GEN_AI_OPERATION_NAME)
        if op is not None and not _is_text(op):
            op = text(attrs, sc.GEN_AI_OPERATION_NAME)
        counts = []
        for key, maximum in _CALL_COUNTS:
            value = get(key)
            if value is not None and not (type(value) is int and 0 <= value <= maximum):
                value = count(attrs, key, maximum)
            counts.append(value)
        row = (
            ctx.span_hex,
            ctx.run_id,
            ctx.trace_hex,
            ctx.parent_hex or None,
            self.source,
            ctx.service,
            task,
            op,
            provider,
            request_model,
            response_model,
            *ctx.times,
            counts[0],
            *tokens,
            *counts[1:],
            cost,
            status,
            error_type,
            None,
            f"{ctx.trace_hex}:{ctx.span_hex}",
            version,
            None,
            unpriced,
        )
        return row, flags

    def event(self, event, index, ctx: _Span) -> tuple:
        attrs = read_attributes(event.attributes)
        ts = event.time_unix_nano
        if ts > self.latest_ns:
            ts = self.now_ns
        head = (
            f"{ctx.trace_hex}:{ctx.span_hex}:{index}",
            ctx.run_id,
            ctx.span_hex,
            ts // 1000 if ts else None,
            event.name,
            first_text(attrs, sc.BUDGET_REASON, sc.BUDGET_STOP_REASON),
            text(attrs, sc.BUDGET_FROM_MODEL),
            text(attrs, sc.BUDGET_TO_MODEL),
            text(attrs, sc.GEN_AI_TOOL_NAME),
        )
        percent = amount(attrs, sc.BUDGET_PERCENT)
        return (*head, *(count(attrs, key) for _, key in EVENT_COUNTS), percent)

    def finish(self) -> Mapped:
        rows, agents = self.out.call_rows, self.agent_by_trace
        if agents:
            for index in self.foreign_calls:
                row = rows[index]
                if row[_CALL_TASK] is None:
                    rows[index] = _replace(row, _CALL_TASK, agents.get(row[_CALL_TRACE]))
        self._inherit_runs()
        aggregates = self._aggregates()
        self._write_flags()
        if self.memory is not None:
            self.memory.remember(
                [
                    (trace_hex, span_hex, node.parent, node.run or node.inherited, node.call is not None)
                    for (trace_hex, span_hex), node in self.nodes.items()
                ]
            )
        if aggregates:
            self.out.call_rows = [row for index, row in enumerate(rows) if index not in aggregates]
        return self.out

    def _ancestors(self, trace_hex: str, node: _Node):
        """The nodes above ``node`` in this request, nearest first (stops at a missing parent)."""
        depth = 0
        while node.parent and depth < _MAX_DEPTH:
            parent = self.nodes.get((trace_hex, node.parent))
            if parent is None:
                return
            yield parent
            node, depth = parent, depth + 1

    def _inherit_runs(self) -> None:
        """A span that names no run belongs to the run of its nearest ancestor that names one."""
        out = self.out
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
                out.call_rows[node.call] = _replace(out.call_rows[node.call], _CALL_RUN, run)
            for index in node.events:
                out.event_rows[index] = _replace(out.event_rows[index], _EVENT_RUN, run)

    def _aggregates(self) -> set[int]:
        """Indexes of call rows that are aggregates: usage that sums calls below them in the same
        trace (whatever their name or convention). A disagreement between an aggregate's figures
        and the sum of the calls right below it flags ``aggregate_mismatch`` on the first of them."""
        rows = self.out.call_rows
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
            figures = [_usage_figures(rows[index]) for index in children]
            summed = tuple(sum(f[i] or 0 for f in figures) for i in range(2))
            if tuple(v or 0 for v in _usage_figures(rows[aggregate])) != summed:
                self.call_flags.setdefault(min(children), set()).add("aggregate_mismatch")
        for aggregate in {*below, *earlier}:
            self.call_flags.pop(aggregate, None)  # not a call: its own flags do not count
        return set(below) | earlier

    def _write_flags(self) -> None:
        """Write the quality flags into the rows and count them by reason."""
        out = self.out
        counts = out.flagged
        for index, flags in self.call_flags.items():
            out.call_rows[index] = _replace(out.call_rows[index], _CALL_QUALITY, ",".join(sorted(flags)))
            for flag in flags:
                counts[flag] = counts.get(flag, 0) + 1
        for index, flags in self.record_flags.items():
            row = out.record_rows[index]
            out.record_rows[index] = (*row[:-1], ",".join(sorted(flags)))
            for flag in flags:
                counts[flag] = counts.get(flag, 0) + 1


def _replace(row: tuple, index: int, value) -> tuple:
    return (*row[:index], value, *row[index + 1 :])


def _usage_figures(row: tuple) -> tuple:
    """(input, output) tokens of a model_calls row tuple."""
    return row[_CALL_INPUT], row[_CALL_OUTPUT]


def _models(attrs: dict) -> tuple:
    """(request model, response model, provider) of a call span, from the first name present."""
    get = attrs.get
    request_model = get(sc.GEN_AI_REQUEST_MODEL)
    if not _is_text(request_model):
        request_model = first_text(attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME, sc.LLM_REQUEST_MODEL)
    response_model = get(sc.GEN_AI_RESPONSE_MODEL)
    if not _is_text(response_model):
        response_model = first_text(attrs, sc.GEN_AI_RESPONSE_MODEL, sc.LLM_RESPONSE_MODEL)
    provider = get(sc.GEN_AI_PROVIDER_NAME)
    if not _is_text(provider):
        provider = first_text(
            attrs, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM, sc.LLM_PROVIDER, sc.LLM_SYSTEM
        )
    return request_model, response_model, provider


def _normalize_usage(tokens: tuple) -> tuple[tuple, bool]:
    """Usage counts (``TOKEN_SOURCES`` order) in the standard convention, and whether they had to
    be normalized: cache read + write above the input means the input excluded them (Anthropic,
    Bedrock), so they are added to it, as ``budgetlens.usage`` does for those providers; reasoning
    above the output means the output excluded it (Gemini), so it is added. A reported total
    must equal input + output before or after that; otherwise the span is rejected
    (SpanRejected naming the fields)."""
    inp, outp, total, cache_read, cache_write, reasoning = tokens
    fixed_inp, fixed_out = inp, outp
    if inp is not None and (cache_read or 0) + (cache_write or 0) > inp:
        fixed_inp = inp + (cache_read or 0) + (cache_write or 0)
    if outp is not None and (reasoning or 0) > outp:
        fixed_out = outp + (reasoning or 0)
    normalized = (fixed_inp, fixed_out) != (inp, outp)
    if total is not None and inp is not None and outp is not None:
        if total not in (inp + outp, fixed_inp + fixed_out):
            raise SpanRejected(f"total tokens ({total}) must equal input + output tokens ({inp} + {outp})")
        if normalized:
            total = fixed_inp + fixed_out
    return (fixed_inp, fixed_out, total, cache_read, cache_write, reasoning), normalized


def _price(model, tokens: tuple, provider, start_micros):
    """(cost USD, price version, unpriced parts) from ``budgetlens.pricing.price_call``
    (genai-prices' own calculation at the span's start, ``start_micros`` since the epoch, UTC;
    None = now); (None, None, None) when unpriced. ``tokens`` in ``TOKEN_SOURCES`` order."""
    if not model or tokens[0] is None or tokens[1] is None:  # a total alone cannot be priced
        return None, None, None
    try:
        from budgetlens.pricing import price_call
        from budgetlens.usage import Usage

        inp, outp, _, cache_read, cache_write, reasoning = tokens
        usage = Usage(
            input_tokens=inp or 0,
            output_tokens=outp or 0,
            cache_read_tokens=cache_read or 0,
            cache_write_tokens=cache_write or 0,
            reasoning_tokens=reasoning or 0,
        )
        at = None if start_micros is None else _EPOCH + dt.timedelta(microseconds=start_micros)
        priced = price_call(model, usage, provider=provider, at=at)
        return priced.cost_usd, priced.price_version, ",".join(priced.unpriced) or None
    except Exception as error:  # pricing must never cost a span; unpriced is NULL
        log.debug("no price for %s (%s): %s", model, provider, error)
        return None, None, None


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def map_request(
    request,
    *,
    source: str = "otlp",
    price: bool = True,
    now_ns: int | None = None,
    memory: SpanMemory | None = None,
) -> Mapped:
    """Map an ``ExportTraceServiceRequest`` (protobuf message) to store rows.

    ``source`` fills the ``source`` column; ``price=False`` skips genai-prices for foreign calls;
    ``now_ns``: the receive time (ns since the epoch, default now) future timestamps are clamped
    to; ``memory``: a ``SpanMemory`` shared by the requests of one collector, so the tree rules
    (inherited runs, aggregates) hold across requests. Never raises for span content: invalid
    spans are counted in ``Mapped.rejected``, repaired ones in ``Mapped.flagged`` (by quality flag).
    """
    mapper = _Mapper(source, price, time.time_ns() if now_ns is None else now_ns, memory)
    mapper.resource_spans(request.resource_spans)
    return mapper.finish()


def map_otlp_json(
    document: dict, *, source: str = "otlp-json", price: bool = True, now_ns: int | None = None
) -> Mapped:
    """Map an OTLP/JSON trace document (a dict as loaded from a file) to store rows.

    Spans rejected while decoding (bad hex ids, wrong types) count in ``Mapped.rejected``.
    Raises ``budgetlens.otlp.decode.OtlpError`` when the document is not OTLP/JSON at all.
    """
    from budgetlens.otlp.decode import decode_json_document

    decoded = decode_json_document(document)
    mapped = map_request(decoded.request, source=source, price=price, now_ns=now_ns)
    mapped.spans += decoded.rejected
    mapped.rejected += decoded.rejected
    mapped.errors = decoded.errors + mapped.errors
    return mapped


__all__ = ["ALLOWED_ATTRIBUTES", "Mapped", "map_otlp_json", "map_request"]
