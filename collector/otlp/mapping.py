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
"""

from __future__ import annotations

import datetime as dt
import logging

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


class _Mapper:
    """Maps the spans of one request; rows go to ``self.out`` (a ``Mapped``)."""

    def __init__(self, source: str, price: bool):
        self.source = source
        self.price = price
        self.out = Mapped()
        self.agent_by_trace: dict[str, str] = {}
        self.foreign_calls: list[int] = []  # indexes into out.call_rows

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

    def span(self, span, service) -> None:
        trace, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
        if len(trace) != 16 or trace == _ZERO_TRACE:
            raise SpanRejected("trace_id must be 16 bytes (32 hex digits), not all zero")
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            raise SpanRejected("span_id must be 8 bytes (16 hex digits), not all zero")
        if parent and len(parent) != 8:
            raise SpanRejected("parent_span_id must be empty or 8 bytes (16 hex digits)")
        attrs = read_attributes(span.attributes)
        trace_hex, span_hex = trace.hex(), span_id.hex()
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
        agentish = op == sc.OPERATION_INVOKE_AGENT or kind in _AGENT_KINDS
        start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
        times = (
            start_ns // 1000 if start_ns else None,
            end_ns // 1000 if end_ns else None,
            (end_ns - start_ns) / 1e9 if start_ns and end_ns else None,
        )
        failed = span.status.code == _STATUS_ERROR
        out = self.out
        # (rows, keys list or None, row, narrow keys, foreign call?): built fully before
        # anything is appended, so a rejected span adds nothing
        rows = []
        if budget_run and (op == sc.OPERATION_INVOKE_AGENT or span.name.startswith("invoke_agent")):
            rows.append(
                (
                    out.record_rows,
                    out.record_keys,
                    self.run_record(attrs, run_id, trace_hex, service, times, failed),
                    None,
                    False,
                )
            )
        elif not agentish and (
            op in sc.MODEL_CALL_OPERATIONS or kind == "LLM" or not USAGE_KEYS.isdisjoint(attrs)
        ):
            foreign = not budget_run
            rows.append(
                (
                    out.call_rows,
                    None,
                    self.call(attrs, span_hex, run_id, trace_hex, parent, service, times, failed, foreign),
                    None,
                    foreign,
                )
            )
        elif op == sc.OPERATION_EXECUTE_TOOL or kind == "TOOL":
            rows.append(
                (
                    out.event_rows,
                    out.event_keys,
                    (
                        span_hex,
                        run_id,
                        span_hex,
                        times[0],
                        sc.EVENT_TOOL_CALL,
                        None,
                        None,
                        None,
                        first_text(attrs, sc.GEN_AI_TOOL_NAME, sc.TOOL_NAME),
                        None,
                        None,
                        None,
                        None,
                    ),
                    TOOL_EVENT_KEYS,
                    False,
                )
            )
        if not parent and not budget_run and (op or agent or kind or rows):
            rows.append(
                (
                    out.record_rows,
                    out.record_keys,
                    (
                        run_id,
                        trace_hex,
                        self.source,
                        service,
                        agent,
                        agent,
                        first_text(attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME),
                        *times,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        sc.STOP_FAILED if failed else None,
                        None,
                        None,
                        *(None,) * len(LIMITS),
                    ),
                    ROOT_RECORD_KEYS,
                    False,
                )
            )
        events = span.events
        if events:
            for index, event in enumerate(events):
                if event.name in _EVENT_NAMES:
                    rows.append(
                        (
                            out.event_rows,
                            out.event_keys,
                            self.event(event, index, span_hex, run_id),
                            None,
                            False,
                        )
                    )
        for target, keys, row, narrow, foreign in rows:
            if foreign:
                self.foreign_calls.append(len(target))
            target.append(row)
            if keys is not None:
                keys.append(narrow)

    def run_record(self, attrs, run_id, trace_hex, service, times, failed) -> tuple:
        stop = choice(attrs, sc.BUDGET_STOP_REASON, sc.STOP_REASONS)
        retryable = attrs.get(sc.BUDGET_RETRYABLE)
        if retryable is not None and type(retryable) is not bool:
            raise SpanRejected(f"attribute {sc.BUDGET_RETRYABLE} must be a boolean")
        head = (
            run_id,
            trace_hex,
            self.source,
            service,
            text(attrs, sc.BUDGET_TASK_TYPE),
            text(attrs, sc.GEN_AI_AGENT_NAME),
            text(attrs, sc.GEN_AI_REQUEST_MODEL),
            *times,
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
            stop or (sc.STOP_FAILED if failed else None),
            status,
            retryable,
            *limits,
        )

    def call(self, attrs, span_hex, run_id, trace_hex, parent, service, times, failed, foreign) -> tuple:
        # Each value is taken as it is when it already has the form the row needs (the common
        # case); anything else goes through the validator, which converts it or rejects the span
        # with the same message, in the same order as the row's fields.
        get = attrs.get
        tokens = token_counts(attrs)
        if tokens is not NO_TOKENS:
            _check_usage(tokens)
        status = get(sc.BUDGET_USAGE_STATUS)
        if status is None:
            reported = tokens[0] is not None or tokens[1] is not None or tokens[2] is not None
            status = sc.USAGE_REPORTED if reported else sc.USAGE_UNKNOWN
        elif status not in sc.USAGE_STATUSES:
            choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES)
        request_model = get(sc.GEN_AI_REQUEST_MODEL)
        if not _is_text(request_model):
            request_model = first_text(
                attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME, sc.LLM_REQUEST_MODEL
            )
        response_model = get(sc.GEN_AI_RESPONSE_MODEL)
        if not _is_text(response_model):
            response_model = first_text(attrs, sc.GEN_AI_RESPONSE_MODEL, sc.LLM_RESPONSE_MODEL)
        provider = get(sc.GEN_AI_PROVIDER_NAME)
        if not _is_text(provider):
            provider = first_text(
                attrs, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM, sc.LLM_PROVIDER, sc.LLM_SYSTEM
            )
        cost = get(sc.BUDGET_COST_USD)
        if cost is not None and not (type(cost) is float and 0 <= cost <= MAX_AMOUNT):
            cost = amount(attrs, sc.BUDGET_COST_USD)
        version = unpriced = None
        if cost is None and foreign and status == sc.USAGE_REPORTED:
            parts = (amount(attrs, sc.GEN_AI_USAGE_INPUT_COST), amount(attrs, sc.GEN_AI_USAGE_OUTPUT_COST))
            if None not in parts:
                cost = parts[0] + parts[1]
            elif self.price:  # at the span's start: a late or backfilled span keeps its date's price
                cost, version, unpriced = _price(response_model or request_model, tokens, provider, times[0])
        error_type = get(sc.ERROR_TYPE)
        if error_type is not None:
            error_type = text(attrs, sc.ERROR_TYPE)
        if failed and not error_type:
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
        turn, reserved, used, remaining = counts
        return (
            span_hex,
            run_id,
            trace_hex,
            parent.hex() or None,
            self.source,
            service,
            task,
            op,
            provider,
            request_model,
            response_model,
            *times,
            turn,
            *tokens,
            reserved,
            used,
            remaining,
            cost,
            status,
            error_type,
            version,
            None,
            unpriced,
        )

    def event(self, event, index, span_hex, run_id) -> tuple:
        attrs = read_attributes(event.attributes)
        ts = event.time_unix_nano
        head = (
            f"{span_hex}:{index}",
            run_id,
            span_hex,
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
                    rows[index] = (*row[:_CALL_TASK], agents.get(row[_CALL_TRACE]), *row[_CALL_TASK + 1 :])
        return self.out


def _check_usage(tokens: tuple) -> None:
    """Reject usage the ``Usage`` type would not accept (``tokens`` in ``TOKEN_SOURCES`` order):
    cache read + write above the input tokens they are part of, reasoning above the output, or
    a reported total that differs from input + output. Raises SpanRejected naming the fields."""
    inp, outp, total, cache_read, cache_write, reasoning = tokens
    if inp is not None and (cache_read or 0) + (cache_write or 0) > inp:
        raise SpanRejected(
            "cache read + cache write tokens exceed the input tokens "
            f"({sc.GEN_AI_USAGE_INPUT_TOKENS} includes the cached tokens)"
        )
    if outp is not None and (reasoning or 0) > outp:
        raise SpanRejected(
            f"reasoning tokens exceed the output tokens ({sc.GEN_AI_USAGE_OUTPUT_TOKENS} includes reasoning)"
        )
    if total is not None and inp is not None and outp is not None and total != inp + outp:
        raise SpanRejected(f"total tokens ({total}) must equal input + output tokens ({inp} + {outp})")


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


def map_request(request, *, source: str = "otlp", price: bool = True) -> Mapped:
    """Map an ``ExportTraceServiceRequest`` (protobuf message) to store rows.

    ``source`` fills the ``source`` column; ``price=False`` skips genai-prices for foreign calls.
    Never raises for span content: invalid spans are counted in ``Mapped.rejected``.
    """
    mapper = _Mapper(source, price)
    mapper.resource_spans(request.resource_spans)
    return mapper.finish()


def map_otlp_json(document: dict, *, source: str = "otlp-json", price: bool = True) -> Mapped:
    """Map an OTLP/JSON trace document (a dict as loaded from a file) to store rows.

    Spans rejected while decoding (bad hex ids, wrong types) count in ``Mapped.rejected``.
    Raises ``budgetlens.otlp.decode.OtlpError`` when the document is not OTLP/JSON at all.
    """
    from budgetlens.otlp.decode import decode_json_document

    decoded = decode_json_document(document)
    mapped = map_request(decoded.request, source=source, price=price)
    mapped.spans += decoded.rejected
    mapped.rejected += decoded.rejected
    mapped.errors = decoded.errors + mapped.errors
    return mapped


__all__ = ["ALLOWED_ATTRIBUTES", "Mapped", "map_otlp_json", "map_request"]
