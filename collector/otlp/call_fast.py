"""The model_calls row of a common call span, built with less per-span work than ``call_row``.

``fast_call_row`` is ``budgetlens.otlp.span_rows.call_row`` for the spans most bodies carry
(the guard's and current-GenAI-semconv provider spans): when a span names none of the
attributes only the general path reads (``SLOW_KEYS``: deprecated, OpenInference and OpenLLMetry
token names, totals, stated costs and cost parts, service tiers, the other model and provider
names), each token column has one candidate attribute, so the counts are read straight from
their keys, and no cost part, stated cost or tier needs looking at. Any value not already in
the form the row needs (a non-int count, an unknown usage status, a non-text model, ...) hands
the span to ``call_row``, which converts it or rejects the span with its own message; the
result is the same row, flags and pending price (``tests/test_otlp_call_fast.py`` compares
both on varied bodies). Pure, no I/O besides pricing (as ``call_row``).
"""

from __future__ import annotations

from budgetlens import semconv as sc
from budgetlens.otlp.attributes import MAX_TOKENS, USAGE_KEYS, check_models
from budgetlens.otlp.rows import Row, utc
from budgetlens.otlp.span_rows import (
    _CALL_COUNTS,
    MAX_AMOUNT,
    SpanContext,
    _price_values,
    call_head,
    call_row,
)
from budgetlens.pricing import PriceRequest, price_call
from budgetlens.usage import Usage, normalize_counts

__all__ = ["SLOW_KEYS", "fast_call_row"]

#: The one attribute each token column is read from on the fast path (``TOKEN_SOURCES``' first).
_INPUT = sc.GEN_AI_USAGE_INPUT_TOKENS
_OUTPUT = sc.GEN_AI_USAGE_OUTPUT_TOKENS
_CACHE_READ = sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
_CACHE_WRITE = sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS
_REASONING = sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
_FAST_TOKENS = frozenset((_INPUT, _OUTPUT, _CACHE_READ, _CACHE_WRITE, _REASONING))

#: Attributes that ``call_row`` reads and this path does not: a span naming one goes to ``call_row``.
SLOW_KEYS = frozenset(
    (
        *(USAGE_KEYS - _FAST_TOKENS),  # other conventions' token names and every total
        sc.LLM_MODEL_NAME,
        sc.LLM_REQUEST_MODEL,
        sc.LLM_RESPONSE_MODEL,
        sc.GEN_AI_SYSTEM,
        sc.LLM_PROVIDER,
        sc.LLM_SYSTEM,
        sc.GEN_AI_USAGE_INPUT_COST,
        sc.GEN_AI_USAGE_OUTPUT_COST,
        sc.GEN_AI_USAGE_COST_AMOUNT,
        sc.GEN_AI_USAGE_COST_CURRENCY,
        *sc.SERVICE_TIER_RESPONSE_ATTRIBUTES,
        *sc.SERVICE_TIER_REQUEST_ATTRIBUTES,
    )
)


def fast_call_row(
    ctx: SpanContext, price: bool, pending: list[tuple[Row, PriceRequest]] | None = None
) -> tuple[Row, list[str]]:
    """``call_row(ctx, price, pending)``, with less work for a span without ``SLOW_KEYS``."""
    attrs = ctx.attrs
    if not SLOW_KEYS.isdisjoint(attrs):
        return call_row(ctx, price, pending)
    get = attrs.get
    inp, outp = get(_INPUT), get(_OUTPUT)
    cache_read, cache_write, reasoning = get(_CACHE_READ), get(_CACHE_WRITE), get(_REASONING)
    for value in (inp, outp, cache_read, cache_write, reasoning):  # each as token_counts takes it
        if value is not None and not (type(value) is int and 0 <= value <= MAX_TOKENS):
            return call_row(ctx, price, pending)
    flags = []
    total = None
    if (
        inp is not None
        or outp is not None
        or cache_read is not None
        or cache_write is not None
        or reasoning is not None
    ):
        counts, normalized, _ = normalize_counts((inp, outp, None, cache_read, cache_write, reasoning))
        inp, outp, total, cache_read, cache_write, reasoning = counts
        if normalized:
            flags.append("foreign_usage")
    status = get(sc.BUDGET_USAGE_STATUS)
    if status is None:
        status = sc.USAGE_REPORTED if inp is not None or outp is not None else sc.USAGE_UNKNOWN
    elif status not in sc.USAGE_STATUSES:
        return call_row(ctx, price, pending)
    if status == sc.USAGE_PARTIAL:
        flags.append("partial_usage")
    request_model = get(sc.GEN_AI_REQUEST_MODEL)
    response_model = get(sc.GEN_AI_RESPONSE_MODEL)
    provider = get(sc.GEN_AI_PROVIDER_NAME)
    error_type = get(sc.ERROR_TYPE)
    task = get(sc.BUDGET_TASK_TYPE)
    op = get(sc.GEN_AI_OPERATION_NAME)
    for value in (request_model, response_model, provider, error_type, task, op):  # is_text, inline
        if value is not None and not (type(value) is str and 0 < len(value) <= 200):
            return call_row(ctx, price, pending)
    cost = get(sc.BUDGET_COST_USD)
    if cost is not None and not (type(cost) is float and 0 <= cost <= MAX_AMOUNT):
        return call_row(ctx, price, pending)
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
            return call_row(ctx, price, pending)
        row[column] = value
    check_models(attrs)  # after every value above is plain: where call_row's checks would reach it
    version = unpriced = None
    later = None
    if cost is None and status == sc.USAGE_REPORTED and price:
        usage = None  # a total alone cannot be priced
        if inp is not None and outp is not None:
            usage = Usage(inp, outp, cache_read or 0, cache_write or 0, reasoning or 0, service_tier=None)
        request = PriceRequest(response_model or request_model, usage, provider, utc(ctx.times[0]))
        if pending is None:
            priced = price_call(request.model, usage, provider, at=request.at)
            cost, version, unpriced = _price_values(request, priced)
        else:
            later = request
    if ctx.failed and not error_type:
        error_type = "_OTHER"
    row["cost_usd"] = cost
    row["usage_status"] = status
    row["error_type"] = error_type
    row["quality"] = None
    row["call_id"] = f"{ctx.trace_hex}:{ctx.span_hex}"
    row["price_version"] = version
    row["usage_details"] = None  # no total on this path: never a provider total beside the parts
    row["unpriced_parts"] = unpriced
    if later is not None and pending is not None:
        pending.append((row, later))
    return row, flags
