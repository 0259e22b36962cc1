"""One recorded model call: how it is priced and what the run keeps of it once settled.

:func:`paid_cost` is the default :data:`PriceCall` of :class:`budgetlens.guard.run_state.RunState`;
:func:`prepare_call` checks, normalizes and (when it can) prices a call before ``RunState`` takes
its lock; :class:`RecordedCall` is what ``RunState`` settles under its lock and hands to the telemetry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, NamedTuple

from budgetlens.guard import options as opt
from budgetlens.guard.results import Action
from budgetlens.pricing import PriceRequest, cost_usd
from budgetlens.usage import Usage, normalize_usage, usage_missing_parts
from budgetlens.usage_check import check_usage_payload

__all__ = ["PROBE_USAGE", "PriceCall", "RecordedCall", "paid_cost", "prepare_call", "price_at_record"]

#: Prices a call already paid for: (model, usage, provider) -> USD, or None when unpriced.
PriceCall = Callable[[str | None, Usage, str | None], float | None]
PROBE_USAGE = Usage(0, 0)  # prices nothing: tells whether a model has a price (not None)


#: USD of a call already paid for, ``paid_cost(model, usage, provider)``: priced now by
#: :func:`budgetlens.pricing.cost_usd` itself (``price_call``'s figure: every billed dimension: tokens
#: by kind and modality, cache writes by duration, web searches, service tier; no wrapper on the hot
#: path). It never raises for a price: a price file that fails only now is logged there and the call
#: counts as unpriced, so it is never dropped.
paid_cost: PriceCall = cost_usd


def prepare_call(
    usage: Any,
    model: str | None,
    reservation: Any,
    provider: str | None,
    response_model: str | None,
    price: PriceCall,
    needs_cost: bool,
) -> tuple[Usage | None, tuple[str, ...], tuple[bool, float | None]]:
    """A call's usage before the run's lock: (the normalized usage, None without one; the parts a
    partial usage misses; (priced now, its USD or None)). ``price`` prices it now when the model is
    known without settling and the figure is needed (``needs_cost``) or ``price`` is not the default.
    Raises ValueError for a bad model name or a misread usage payload (never "a call without usage")."""
    if model is not None:
        opt.check_model(model)
    normalized: Usage | None
    missing: tuple[str, ...]
    if usage.__class__ is Usage:  # already normalized and complete (the hot path)
        normalized, missing = usage, ()
    else:
        if usage is not None:
            check_usage_payload(usage)  # a misread usage is an error, not "a call without usage"
        normalized = normalize_usage(usage, provider) if usage is not None else None
        missing = usage_missing_parts(usage, provider) if normalized is not None else ()
    # Price outside the lock when the model is known without settling (genai-prices' own
    # calculation takes far longer than the bookkeeping); else once the reservation is settled.
    # A partial usage is completed from the reservation first, so it is priced inside.
    # The response names the model when neither the request nor the reservation did.
    early = normalized is not None and not missing and (model or reservation or response_model) is not None
    paid = None
    if early and not needs_cost and price is paid_cost:
        early = False  # no price needed before the next call: priced when the cost is read
    if early and normalized is not None:
        priced = model or getattr(reservation, "model", None) or response_model
        paid = price(priced, normalized, provider)
    return normalized, missing, (early, paid)


def price_at_record(
    model: str | None, usage: Usage | None, provider: str | None, price: PriceCall, needs_cost: bool
) -> tuple[float | None, PriceRequest | None]:
    """(USD, None) of a call settled under the run's lock and not priced before it (None: unpriced
    or usage unknown); or (None, the request to price it with) when nothing needs the figure
    before the next call (issue 25: priced in one batch when the cost is read)."""
    if usage is None:
        return None, None
    if needs_cost or price is not paid_cost:
        return price(model, usage, provider), None
    if not model:
        return None, None  # no model: unpriced (as price_call says), nothing to price later
    return None, PriceRequest(model, usage, provider, dt.datetime.now(tz=dt.UTC))


class RecordedCall(NamedTuple):
    """One recorded call, as settled under the lock (tokens; USD; None: unpriced or unknown)."""

    action: Action
    model: str | None
    start_ns: int | None
    usage: Usage | None
    cost_usd: float | None
    reserved_tokens: int
    used_tokens: int
    turn: int
    remaining_tokens: int | None
