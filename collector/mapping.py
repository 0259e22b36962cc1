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
are priced with ``collector.pricing.cost_usd`` (genai-prices); unpriced stays NULL.

A span with a bad value (missing or malformed ids, negative or non-numeric token counts, an
unknown stop reason or usage status) is rejected alone with a reason naming the attribute.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass, field

from collector import semconv as sc

log = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1)
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
_AGENT_KINDS = ("AGENT", "CHAIN")

#: (row field, attribute names in precedence order).
_TOKEN_SOURCES = (
    ("input_tokens", (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS,
                      sc.LLM_TOKEN_COUNT_PROMPT)),
    ("output_tokens", (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS,
                       sc.LLM_TOKEN_COUNT_COMPLETION)),
    ("total_tokens", (sc.LLM_USAGE_TOTAL_TOKENS, sc.LLM_TOKEN_COUNT_TOTAL)),
    ("cache_read_tokens", (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                           sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_OPENLLMETRY,
                           sc.LLM_TOKEN_COUNT_CACHE_READ)),
    ("cache_write_tokens", (sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
                            sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_OPENLLMETRY,
                            sc.LLM_TOKEN_COUNT_CACHE_WRITE)),
    ("reasoning_tokens", (sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, sc.LLM_TOKEN_COUNT_REASONING)),
)
_USAGE_KEYS = frozenset(name for _, names in _TOKEN_SOURCES for name in names)
_TOKEN_COLUMNS = tuple(column for column, _ in _TOKEN_SOURCES)
_LIMITS = (
    ("limit_total_tokens", sc.BUDGET_LIMIT_TOTAL_TOKENS, True),
    ("limit_input_tokens", sc.BUDGET_LIMIT_INPUT_TOKENS, True),
    ("limit_output_tokens", sc.BUDGET_LIMIT_OUTPUT_TOKENS, True),
    ("limit_turns", sc.BUDGET_LIMIT_TURNS, True),
    ("limit_tool_calls", sc.BUDGET_LIMIT_TOOL_CALLS, True),
    ("limit_duration_s", sc.BUDGET_LIMIT_DURATION_S, False),
    ("limit_cost_usd", sc.BUDGET_LIMIT_COST_USD, False),
)
_EVENT_COUNTS = (
    ("reserved_tokens", sc.BUDGET_RESERVED_TOKENS),
    ("used_tokens", sc.BUDGET_USED_TOKENS),
    ("remaining_tokens", sc.BUDGET_REMAINING_TOKENS),
)

#: The only span attributes ever read (the allow-list that keeps content out of the store).
ALLOWED_ATTRIBUTES = frozenset(
    {name for _, names in _TOKEN_SOURCES for name in names}
    | {key for _, key, _ in _LIMITS}
    | {key for _, key in _EVENT_COUNTS}
    | {
        sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM,
        sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_AGENT_NAME,
        sc.GEN_AI_TOOL_NAME, sc.ERROR_TYPE, sc.OPENINFERENCE_SPAN_KIND, sc.LLM_MODEL_NAME,
        sc.LLM_PROVIDER, sc.LLM_SYSTEM, sc.LLM_REQUEST_MODEL, sc.LLM_RESPONSE_MODEL,
        sc.TOOL_NAME, sc.GEN_AI_USAGE_INPUT_COST, sc.GEN_AI_USAGE_OUTPUT_COST,
        sc.BUDGET_RUN_ID, sc.BUDGET_TASK_TYPE, sc.BUDGET_TURN, sc.BUDGET_TURNS,
        sc.BUDGET_TOOL_CALLS, sc.BUDGET_STOP_REASON, sc.BUDGET_USAGE_STATUS,
        sc.BUDGET_COST_USD, sc.BUDGET_RETRYABLE, sc.BUDGET_FROM_MODEL, sc.BUDGET_TO_MODEL,
        sc.BUDGET_PERCENT, sc.BUDGET_REASON,
    }
)
_EVENT_NAMES = frozenset(sc.EVENT_NAMES)


class _Reject(ValueError):
    """One span is invalid; the message names the attribute and the rule."""


@dataclass
class Mapped:
    """Rows for ``collector.store.write_batch`` plus what was rejected.

    ``calls``/``records``/``events`` are lists of dicts keyed by store columns; ``spans`` is the
    number of spans seen (accepted + rejected); ``errors`` holds one reason per rejected span.
    """

    calls: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def error_message(self, limit: int = 5) -> str:
        """A short message for OTLP ``partial_success.error_message`` (first ``limit`` reasons)."""
        shown = "; ".join(self.errors[:limit])
        more = len(self.errors) - limit
        return f"{shown}; and {more} more" if more > 0 else shown


def _attributes(key_values) -> dict:
    """Allow-listed attributes of a repeated KeyValue as a dict of plain values."""
    out = {}
    for kv in key_values:
        key = kv.key
        if key in ALLOWED_ATTRIBUTES:
            value = kv.value
            which = value.WhichOneof("value")
            if which is not None:
                out[key] = getattr(value, which)
    return out


def _count(attrs: dict, key: str):
    value = attrs.get(key)
    if value is None:
        return None
    kind = type(value)
    if kind is int and value >= 0:
        return value
    if kind is int:
        if value >= 0:
            return value
    elif kind is float:
        if math.isfinite(value) and value >= 0 and value.is_integer():
            return int(value)
    elif kind is str:
        if value.isascii() and value.isdigit():
            return int(value)
    raise _Reject(f"attribute {key} must be a non-negative integer (got {str(value)[:40]!r})")


def _first_count(attrs: dict, keys):
    for key in keys:
        if key in attrs:
            return _count(attrs, key)
    return None


def _token_counts(attrs: dict) -> dict:
    """``{row field: count}`` for every ``_TOKEN_SOURCES`` field (None when absent)."""
    row = dict.fromkeys(_TOKEN_COLUMNS)
    if _USAGE_KEYS.isdisjoint(attrs):
        return row
    for column, names in _TOKEN_SOURCES:
        for key in names:
            if key in attrs:
                value = attrs[key]
                row[column] = value if type(value) is int and value >= 0 else _count(attrs, key)
                break
    return row


def _amount(attrs: dict, key: str):
    value = attrs.get(key)
    if value is None:
        return None
    if type(value) in (int, float) and math.isfinite(value) and value >= 0:
        return float(value)
    if type(value) is str:
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if math.isfinite(number) and number >= 0:
            return number
    raise _Reject(f"attribute {key} must be a non-negative number (got {str(value)[:40]!r})")


def _choice(attrs: dict, key: str, allowed: tuple):
    value = attrs.get(key)
    if value is None or value in allowed:
        return value
    raise _Reject(f"attribute {key} must be one of {', '.join(allowed)} (got {str(value)[:40]!r})")


def _text(attrs: dict, *keys: str):
    if len(keys) == 1:
        value = attrs.get(keys[0])
        if value is None or value == "":
            return None
        return value[:200] if type(value) is str else str(value)[:200]
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return str(value)[:200]
    return None


def _utc(nanos: int):
    return _EPOCH + dt.timedelta(microseconds=nanos // 1000) if nanos else None


class _Mapper:
    def __init__(self, source: str, price: bool):
        self.source = source
        self.price = price
        self.out = Mapped()
        self.agent_by_trace: dict[str, str] = {}
        self.foreign_calls: list[dict] = []

    def resource_spans(self, resource_spans) -> None:
        for rs in resource_spans:
            service = None
            for kv in rs.resource.attributes:
                if kv.key == sc.SERVICE_NAME:
                    service = kv.value.string_value or None
            for scope_spans in rs.scope_spans:
                for span in scope_spans.spans:
                    self.out.spans += 1
                    try:
                        self.span(span, service)
                    except _Reject as reason:
                        self.out.rejected += 1
                        self.out.errors.append(f"span {span.span_id.hex() or '?'}: {reason}")

    def span(self, span, service) -> None:
        trace, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
        if len(trace) != 16 or trace == _ZERO_TRACE:
            raise _Reject("trace_id must be 16 bytes (32 hex digits), not all zero")
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            raise _Reject("span_id must be 8 bytes (16 hex digits), not all zero")
        if parent and len(parent) != 8:
            raise _Reject("parent_span_id must be empty or 8 bytes (16 hex digits)")
        attrs = _attributes(span.attributes)
        trace_hex, span_hex = trace.hex(), span_id.hex()
        op = attrs.get(sc.GEN_AI_OPERATION_NAME)
        kind = attrs.get(sc.OPENINFERENCE_SPAN_KIND)
        budget_run = attrs.get(sc.BUDGET_RUN_ID)
        if budget_run is not None and (type(budget_run) is not str or not budget_run):
            raise _Reject(f"attribute {sc.BUDGET_RUN_ID} must be a non-empty string")
        run_id = budget_run or trace_hex
        agent = _text(attrs, sc.GEN_AI_AGENT_NAME)
        if agent and not budget_run:
            self.agent_by_trace.setdefault(trace_hex, agent)
        agentish = op == sc.OPERATION_INVOKE_AGENT or kind in _AGENT_KINDS
        start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
        start, end = _utc(start_ns), _utc(end_ns)
        duration = (end_ns - start_ns) / 1e9 if start_ns and end_ns else None
        failed = span.status.code == _STATUS_ERROR
        rows = []  # built fully before anything is appended, so a rejected span adds nothing
        if budget_run and (op == sc.OPERATION_INVOKE_AGENT or span.name.startswith("invoke_agent")):
            rows.append((self.out.records, self.run_record(attrs, run_id, trace_hex, service,
                                                           start, end, duration, failed)))
        elif not agentish and (op in sc.MODEL_CALL_OPERATIONS or kind == "LLM"
                               or not _USAGE_KEYS.isdisjoint(attrs)):
            call = self.call(attrs, span_hex, run_id, trace_hex, parent, service, op,
                             start, end, duration, failed, foreign=not budget_run)
            rows.append((self.out.calls, call))
        elif op == sc.OPERATION_EXECUTE_TOOL or kind == "TOOL":
            rows.append((self.out.events, {
                "event_id": span_hex, "run_id": run_id, "span_id": span_hex, "ts_utc": start,
                "name": sc.EVENT_TOOL_CALL, "tool_name": _text(attrs, sc.GEN_AI_TOOL_NAME,
                                                               sc.TOOL_NAME)}))
        if not parent and not budget_run and (op or agent or kind or rows):
            rows.append((self.out.records, {
                "run_id": run_id, "trace_id": trace_hex, "source": self.source,
                "service_name": service, "task_type": agent, "agent_name": agent,
                "model": _text(attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME),
                "start_utc": start, "end_utc": end, "duration_s": duration,
                "stop_reason": sc.STOP_FAILED if failed else None}))
        for index, event in enumerate(span.events):
            if event.name in _EVENT_NAMES:
                rows.append((self.out.events, self.event(event, index, span_hex, run_id)))
        for target, row in rows:
            target.append(row)
            if target is self.out.calls and row.pop("_foreign", False):
                self.foreign_calls.append(row)

    def run_record(self, attrs, run_id, trace_hex, service, start, end, duration, failed) -> dict:
        stop = _choice(attrs, sc.BUDGET_STOP_REASON, sc.STOP_REASONS)
        retryable = attrs.get(sc.BUDGET_RETRYABLE)
        if retryable is not None and type(retryable) is not bool:
            raise _Reject(f"attribute {sc.BUDGET_RETRYABLE} must be a boolean")
        record = {
            "run_id": run_id, "trace_id": trace_hex, "source": self.source,
            "service_name": service, "task_type": _text(attrs, sc.BUDGET_TASK_TYPE),
            "agent_name": _text(attrs, sc.GEN_AI_AGENT_NAME),
            "model": _text(attrs, sc.GEN_AI_REQUEST_MODEL),
            "start_utc": start, "end_utc": end, "duration_s": duration,
            "turns": _count(attrs, sc.BUDGET_TURNS),
            "tool_calls": _count(attrs, sc.BUDGET_TOOL_CALLS),
            "total_tokens": _count(attrs, sc.BUDGET_USED_TOKENS),
            "cost_usd": _amount(attrs, sc.BUDGET_COST_USD),
            "stop_reason": stop or (sc.STOP_FAILED if failed else None),
            "usage_status": _choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES),
            "retryable": retryable,
        }
        for column, names in _TOKEN_SOURCES:
            if column != "total_tokens":
                record[column] = _first_count(attrs, names)
        for column, key, integral in _LIMITS:
            record[column] = _count(attrs, key) if integral else _amount(attrs, key)
        return record

    def call(self, attrs, span_hex, run_id, trace_hex, parent, service, op, start, end,
             duration, failed, foreign) -> dict:
        row = _token_counts(attrs)
        status = _choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES)
        if status is None:
            reported = row["input_tokens"] is not None or row["output_tokens"] is not None
            status = sc.USAGE_REPORTED if reported else sc.USAGE_UNKNOWN
        request_model = _text(attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME,
                              sc.LLM_REQUEST_MODEL)
        response_model = _text(attrs, sc.GEN_AI_RESPONSE_MODEL, sc.LLM_RESPONSE_MODEL)
        provider = _text(attrs, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM, sc.LLM_PROVIDER,
                         sc.LLM_SYSTEM)
        cost = _amount(attrs, sc.BUDGET_COST_USD)
        if cost is None and foreign and status == sc.USAGE_REPORTED:
            parts = (_amount(attrs, sc.GEN_AI_USAGE_INPUT_COST),
                     _amount(attrs, sc.GEN_AI_USAGE_OUTPUT_COST))
            if None not in parts:
                cost = parts[0] + parts[1]
            elif self.price:
                cost = _price(response_model or request_model, row, provider)
        error_type = _text(attrs, sc.ERROR_TYPE) or ("_OTHER" if failed else None)
        row["span_id"] = span_hex
        row["run_id"] = run_id
        row["trace_id"] = trace_hex
        row["parent_span_id"] = parent.hex() or None
        row["source"] = self.source
        row["service_name"] = service
        row["task_type"] = _text(attrs, sc.BUDGET_TASK_TYPE)
        row["operation_name"] = _text(attrs, sc.GEN_AI_OPERATION_NAME)
        row["provider_name"] = provider
        row["request_model"] = request_model
        row["response_model"] = response_model
        row["start_utc"] = start
        row["end_utc"] = end
        row["duration_s"] = duration
        row["turn"] = _count(attrs, sc.BUDGET_TURN)
        row["reserved_tokens"] = _count(attrs, sc.BUDGET_RESERVED_TOKENS)
        row["used_tokens"] = _count(attrs, sc.BUDGET_USED_TOKENS)
        row["remaining_tokens"] = _count(attrs, sc.BUDGET_REMAINING_TOKENS)
        row["cost_usd"] = cost
        row["usage_status"] = status
        row["error_type"] = error_type
        row["_foreign"] = foreign
        return row

    def event(self, event, index, span_hex, run_id) -> dict:
        attrs = _attributes(event.attributes)
        row = {
            "event_id": f"{span_hex}:{index}", "run_id": run_id, "span_id": span_hex,
            "ts_utc": _utc(event.time_unix_nano), "name": event.name,
            "reason": _text(attrs, sc.BUDGET_REASON, sc.BUDGET_STOP_REASON),
            "from_model": _text(attrs, sc.BUDGET_FROM_MODEL),
            "to_model": _text(attrs, sc.BUDGET_TO_MODEL),
            "tool_name": _text(attrs, sc.GEN_AI_TOOL_NAME),
            "percent": _amount(attrs, sc.BUDGET_PERCENT),
        }
        for column, key in _EVENT_COUNTS:
            row[column] = _count(attrs, key)
        return row

    def finish(self) -> Mapped:
        for row in self.foreign_calls:
            if row["task_type"] is None:
                row["task_type"] = self.agent_by_trace.get(row["trace_id"])
        return self.out


def _price(model, row: dict, provider):
    """Cost in USD from ``collector.pricing.cost_usd`` (genai-prices); None when unpriced."""
    if not model:
        return None
    try:
        from collector.pricing import cost_usd
        from collector.usage import Usage

        usage = Usage(
            input_tokens=row["input_tokens"] or 0,
            output_tokens=row["output_tokens"] or 0,
            cache_read_tokens=row["cache_read_tokens"] or 0,
            cache_write_tokens=row["cache_write_tokens"] or 0,
            reasoning_tokens=row["reasoning_tokens"] or 0,
        )
        return cost_usd(model, usage, provider=provider)
    except Exception as error:  # pricing must never cost a span; unpriced is NULL
        log.debug("no price for %s (%s): %s", model, provider, error)
        return None


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
    Raises ``collector.otlp_decode.OtlpError`` when the document is not OTLP/JSON at all.
    """
    from collector.otlp_decode import decode_json_document

    decoded = decode_json_document(document)
    mapped = map_request(decoded.request, source=source, price=price)
    mapped.spans += decoded.rejected
    mapped.rejected += decoded.rejected
    mapped.errors = decoded.errors + mapped.errors
    return mapped
