"""The store row each kind of span becomes (design §4): run records, model calls, budget events.

Pure functions of one span's allow-listed attributes (``SpanContext``); the request-wide rules
(identity, times, the span tree, quality flags) are in ``budgetlens.otlp.mapping`` and
``budgetlens.otlp.tree``. Rows are dicts keyed by store columns (``budgetlens.otlp.rows``).
Each function raises SpanRejected naming the attribute and the rule for a bad value.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from budgetlens import semconv as sc
from budgetlens.otlp.attributes import (
    EVENT_COUNTS,
    LIMITS,
    MAX_AMOUNT,
    NO_TOKENS,
    TOKEN_SOURCES,
    SpanRejected,
    amount,
    check_models,
    choice,
    count,
    first_count,
    first_text,
    maximum_of,
    read_attributes,
    text,
    token_counts,
)
from budgetlens.otlp.rows import Row, utc
from budgetlens.pricing import CallPrice, PriceRequest, price_call, price_calls, usage_details
from budgetlens.usage import Usage, normalize_counts

log = logging.getLogger(__name__)

_RECORD_TOKENS = tuple((column, names) for column, names in TOKEN_SOURCES if column != "total_tokens")
#: (model_calls column, span attribute, largest value) of the guard's per-call counts.
_CALL_COUNTS = tuple(
    (column, key, maximum_of(key))
    for column, key in (
        ("turn", sc.BUDGET_TURN),
        ("reserved_tokens", sc.BUDGET_RESERVED_TOKENS),
        ("used_tokens", sc.BUDGET_USED_TOKENS),
        ("remaining_tokens", sc.BUDGET_REMAINING_TOKENS),
    )
)
Times = tuple[int | None, int | None, float | None]
_TIER_KEYS = frozenset((*sc.SERVICE_TIER_RESPONSE_ATTRIBUTES, *sc.SERVICE_TIER_REQUEST_ATTRIBUTES))


def repaired_times(start: int, end: int, now_ns: int, latest_ns: int) -> tuple[Times, list[str]]:
    """(start µs, end µs, duration s) of a span's ``start``/``end`` (ns since the epoch) and the
    quality flags of their repair: a zero timestamp is NULL (``missing_time``), one past
    ``latest_ns`` (the receive time ``now_ns`` + skew) is ``now_ns`` (``future_time``), an end
    before the start is the start (``end_before_start``)."""
    flags: list[str] = []
    if not start or not end:
        flags.append("missing_time")
    if start > latest_ns or end > latest_ns:
        flags.append("future_time")
        start, end = min(start, now_ns), min(end, now_ns)
    if start and end and end < start:
        flags.append("end_before_start")
        end = start
    times: Times = (
        start // 1000 if start else None,
        end // 1000 if end else None,
        (end - start) / 1e9 if start and end else None,
    )
    return times, flags


"""(start µs since the epoch, end µs, duration s) of a span; None where unknown."""


def is_text(value: object) -> bool:
    """True for a value ``text`` would return unchanged: a non-empty str of <= 200 chars."""
    return type(value) is str and 0 < len(value) <= 200


class SpanContext(NamedTuple):
    """The parts of one span that its rows are built from (``source``: the rows' source)."""

    source: str
    attrs: dict[str, Any]
    span_hex: str
    run_id: str
    trace_hex: str
    parent_hex: str
    service: str | None
    times: Times
    failed: bool
    budget_run: str | None
    #: The span's status is OK (set explicitly by the instrumentation: the operation succeeded).
    succeeded: bool = False


def root_record(ctx: SpanContext, agent: str | None) -> Row:
    """The run record of a foreign root span (the trace's run: start/end, stop reason).

    The root's own status decides the run: ERROR -> ``failed``, OK -> ``completed`` (a call
    error below it that the run recovered from, e.g. a retried attempt, does not fail it);
    UNSET leaves the stop reason to the store's rollup (``failed`` when a call errored)."""
    start, end, duration = ctx.times
    check_models(ctx.attrs)
    return {
        "run_id": ctx.run_id,
        "trace_id": ctx.trace_hex,
        "source": ctx.source,
        "service_name": ctx.service,
        "task_type": agent,
        "agent_name": agent,
        "model": first_text(ctx.attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME),
        "start_utc": start,
        "end_utc": end,
        "duration_s": duration,
        "stop_reason": sc.STOP_FAILED if ctx.failed else (sc.STOP_COMPLETED if ctx.succeeded else None),
        "quality": None,
    }


def run_record(ctx: SpanContext) -> Row:
    """The run_records row of a guard's run span (every ``RECORD_KEYS`` column)."""
    attrs = ctx.attrs
    check_models(attrs)
    stop = choice(attrs, sc.BUDGET_STOP_REASON, sc.STOP_REASONS)
    retryable = attrs.get(sc.BUDGET_RETRYABLE)
    if retryable is not None and type(retryable) is not bool:
        raise SpanRejected(f"attribute {sc.BUDGET_RETRYABLE} must be a boolean")
    start, end, duration = ctx.times
    row: Row = {
        "run_id": ctx.run_id,
        "trace_id": ctx.trace_hex,
        "source": ctx.source,
        "service_name": ctx.service,
        "task_type": text(attrs, sc.BUDGET_TASK_TYPE),
        "agent_name": text(attrs, sc.GEN_AI_AGENT_NAME),
        "model": text(attrs, sc.GEN_AI_REQUEST_MODEL),
        "start_utc": start,
        "end_utc": end,
        "duration_s": duration,
        "turns": count(attrs, sc.BUDGET_TURNS),
        "tool_calls": count(attrs, sc.BUDGET_TOOL_CALLS),
    }
    total = count(attrs, sc.BUDGET_USED_TOKENS)
    cost = amount(attrs, sc.BUDGET_COST_USD)
    status = choice(attrs, sc.BUDGET_USAGE_STATUS, sc.USAGE_STATUSES)
    for column, names in _RECORD_TOKENS:
        row[column] = first_count(attrs, names)
    row["total_tokens"] = total
    row["cost_usd"] = cost
    row["stop_reason"] = stop or (sc.STOP_FAILED if ctx.failed else None)
    row["usage_status"] = status
    row["retryable"] = retryable
    for column, key, integral in LIMITS:
        row[column] = count(attrs, key) if integral else amount(attrs, key)
    row["quality"] = None
    row["parent_run_id"] = text(attrs, sc.BUDGET_PARENT_RUN_ID)
    return row


def call_row(
    ctx: SpanContext, price: bool, pending: list[tuple[Row, PriceRequest]] | None = None
) -> tuple[Row, list[str]]:
    """The model_calls row of a span and its quality flags (``foreign_usage``,
    ``partial_usage``, ``total_mismatch``: a reported total that is not input + output, kept in
    ``usage_details`` as ``provider_total_tokens``); ``price``: price a foreign call without a cost through
    ``budgetlens.pricing.price_call`` (unpriced: NULL). With ``pending`` the call is not priced
    here: (row, its PriceRequest) is appended, for :func:`apply_prices` to price the batch.
    Raises SpanRejected naming the attribute."""
    # Each value is taken as it is when it already has the form the row needs (the common
    # case); anything else goes through the validator, which converts it or rejects the span
    # with the same message, in the same order as the row's fields.
    attrs = ctx.attrs
    get = attrs.get
    flags = []
    tokens = token_counts(attrs)
    provider_total = None
    if tokens is not NO_TOKENS:
        tokens, normalized, provider_total = normalize_counts(tokens)
        if normalized:
            flags.append("foreign_usage")
        if provider_total is not None:
            flags.append("total_mismatch")
    inp, outp, total, cache_read, cache_write, reasoning = tokens
    status = get(sc.BUDGET_USAGE_STATUS)
    if status is None:
        reported = inp is not None or outp is not None or total is not None
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
    later = None
    # A guard's call span without a cost (its run needed no price before the next call) is
    # priced here, like a foreign one (issue 25).
    if cost is None and status == sc.USAGE_REPORTED:
        parts = (amount(attrs, sc.GEN_AI_USAGE_INPUT_COST), amount(attrs, sc.GEN_AI_USAGE_OUTPUT_COST))
        stated = _stated_cost(attrs)
        if stated is not None:
            cost = stated  # the source's cost, never repriced
        elif parts[0] is not None and parts[1] is not None:
            cost = parts[0] + parts[1]
        elif price:  # at the span's start: a late or backfilled span keeps its date's price
            usage = None  # a total alone cannot be priced
            if inp is not None and outp is not None:  # normalized: the parts fit
                usage = Usage(
                    inp,
                    outp,
                    cache_read or 0,
                    cache_write or 0,
                    reasoning or 0,
                    service_tier=service_tier(attrs),
                )
            request = PriceRequest(response_model or request_model, usage, provider, utc(ctx.times[0]))
            if pending is None:
                priced = price_call(request.model, usage, provider, at=request.at)
                cost, version, unpriced = _price_values(request, priced)
            else:
                later = request
    error_type = get(sc.ERROR_TYPE)
    if error_type is not None:
        error_type = text(attrs, sc.ERROR_TYPE)
    if ctx.failed and not error_type:
        error_type = "_OTHER"
    task = get(sc.BUDGET_TASK_TYPE)
    if task is not None and not is_text(task):
        task = text(attrs, sc.BUDGET_TASK_TYPE)
    op = get(sc.GEN_AI_OPERATION_NAME)
    if op is not None and not is_text(op):
        op = text(attrs, sc.GEN_AI_OPERATION_NAME)
    row = call_head(
        ctx,
        task,
        op,
        provider,
        request_model,
        response_model,
        (inp, outp, total, cache_read, cache_write, reasoning),
    )
    for column, key, maximum in _CALL_COUNTS:
        value = get(key)
        if value is not None and not (type(value) is int and 0 <= value <= maximum):
            value = count(attrs, key, maximum)
        row[column] = value
    row["cost_usd"] = cost
    row["usage_status"] = status
    row["error_type"] = error_type
    row["quality"] = None
    row["call_id"] = f"{ctx.trace_hex}:{ctx.span_hex}"
    row["price_version"] = version
    row["usage_details"] = (
        None if provider_total is None else usage_details(Usage(provider_total_tokens=provider_total))
    )
    row["unpriced_parts"] = unpriced
    if later is not None and pending is not None:
        pending.append((row, later))
    return row, flags


def _price_values(request: PriceRequest, priced: CallPrice) -> tuple[Any, Any, Any]:
    """(cost_usd, price_version, unpriced_parts) columns of a priced call."""
    if priced.unpriced_reason:
        log.debug("call of %r unpriced: %s", request.model, priced.unpriced_reason)
    return priced.cost_usd, priced.price_version, ",".join(priced.unpriced) or None


def apply_prices(pending: list[tuple[Row, PriceRequest]]) -> None:
    """Price the calls :func:`call_row` left ``pending`` in one batch
    (:func:`budgetlens.pricing.price_calls`: each price resolved once, rates x counts) and
    write their ``cost_usd``, ``price_version`` and ``unpriced_parts`` columns."""
    if not pending:
        return
    priced = price_calls([request for _, request in pending])
    for (row, request), result in zip(pending, priced, strict=True):
        row["cost_usd"], row["price_version"], row["unpriced_parts"] = _price_values(request, result)


def event_row(event: Any, index: int, ctx: SpanContext, now_ns: int, latest_ns: int) -> Row:
    """The budget_events row of the ``index``-th span event, a ``budgetlens.*`` one (every
    ``EVENT_KEYS`` column); a time past ``latest_ns`` is ``now_ns``."""
    attrs = read_attributes(event.attributes)
    ts = event.time_unix_nano
    if ts > latest_ns:
        ts = now_ns
    row: Row = {
        "event_id": f"{ctx.trace_hex}:{ctx.span_hex}:{index}",
        "run_id": ctx.run_id,
        "span_id": ctx.span_hex,
        "ts_utc": ts // 1000 if ts else None,
        "name": event.name,
        "reason": first_text(attrs, sc.BUDGET_REASON, sc.BUDGET_STOP_REASON),
        "from_model": text(attrs, sc.BUDGET_FROM_MODEL),
        "to_model": text(attrs, sc.BUDGET_TO_MODEL),
        "tool_name": text(attrs, sc.GEN_AI_TOOL_NAME),
    }
    for column, key in EVENT_COUNTS:
        row[column] = count(attrs, key)
    row["percent"] = amount(attrs, sc.BUDGET_PERCENT)
    row["tool_cost_usd"] = amount(attrs, sc.BUDGET_TOOL_COST_USD)
    return row


def service_tier(attrs: dict[str, Any]) -> str | None:
    """The service tier a call span names (``flex``, ``priority``, ``batch``, ...; lower case):
    the response's tier, else the request's unless ``auto``; None when neither says."""
    if _TIER_KEYS.isdisjoint(attrs):
        return None
    tier = first_text(attrs, *sc.SERVICE_TIER_RESPONSE_ATTRIBUTES)
    if tier is None:
        tier = first_text(attrs, *sc.SERVICE_TIER_REQUEST_ATTRIBUTES)
        if tier is not None and tier.lower() == "auto":
            return None
    return tier.lower() if tier else None


def _stated_cost(attrs: dict[str, Any]) -> float | None:
    """``gen_ai.usage.cost.amount`` (USD) when its currency is USD or absent; None otherwise."""
    stated = amount(attrs, sc.GEN_AI_USAGE_COST_AMOUNT)
    if stated is None:
        return None
    currency = text(attrs, sc.GEN_AI_USAGE_COST_CURRENCY)
    if currency is not None and currency.upper() != "USD":
        log.debug("cost in %s not read (costs are stored in USD)", currency)
        return None
    return stated


def _models(attrs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(request model, response model, provider) of a call span, from the first name present."""
    get = attrs.get
    check_models(attrs)
    request_model = get(sc.GEN_AI_REQUEST_MODEL)
    if not is_text(request_model):
        request_model = first_text(attrs, sc.GEN_AI_REQUEST_MODEL, sc.LLM_MODEL_NAME, sc.LLM_REQUEST_MODEL)
    response_model = get(sc.GEN_AI_RESPONSE_MODEL)
    if not is_text(response_model):
        response_model = first_text(attrs, sc.GEN_AI_RESPONSE_MODEL, sc.LLM_RESPONSE_MODEL)
    provider = get(sc.GEN_AI_PROVIDER_NAME)
    if not is_text(provider):
        provider = first_text(
            attrs, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_SYSTEM, sc.LLM_PROVIDER, sc.LLM_SYSTEM
        )
    return request_model, response_model, provider


__all__ = [
    "SpanContext",
    "apply_prices",
    "Times",
    "call_row",
    "event_row",
    "is_text",
    "root_record",
    "run_record",
    "service_tier",
]


def call_head(ctx, task, op, provider, request_model, response_model, tokens: tuple) -> Row:
    """A call row's span, model and token columns (``tokens``: input, output, total, cache read,
    cache write, reasoning), in the column order both mappings (``call_row`` and
    :func:`budgetlens.otlp.call_fast.fast_call_row`) build the rest on."""
    start, end, duration = ctx.times
    inp, outp, total, cache_read, cache_write, reasoning = tokens
    return {
        "span_id": ctx.span_hex,
        "run_id": ctx.run_id,
        "trace_id": ctx.trace_hex,
        "parent_span_id": ctx.parent_hex or None,
        "source": ctx.source,
        "service_name": ctx.service,
        "task_type": task,
        "operation_name": op,
        "provider_name": provider,
        "request_model": request_model,
        "response_model": response_model,
        "start_utc": start,
        "end_utc": end,
        "duration_s": duration,
        "input_tokens": inp,
        "output_tokens": outp,
        "total_tokens": total,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": reasoning,
    }
