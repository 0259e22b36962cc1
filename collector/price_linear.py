"""Resolved prices kept per process, and the linear path that prices a call from them (issue 25).

Each resolved price (a genai-prices (provider, model, prices in force, tier) or a user price
file's model: ``budgetlens.pricing`` names its key) gets its :class:`~budgetlens.price_rates.Rates`
derived once, from genai-prices' own calculation (:func:`remember`); None when it is tiered or not
linear (priced call by call). :func:`linear_cost` is :func:`budgetlens.pricing.cost_usd`'s fast
path: rates x counts, no :class:`~budgetlens.pricing.CallPrice` built, the same figure.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from decimal import Decimal
from typing import Any

from budgetlens.price_file import configured_file
from budgetlens.price_rates import Rates, derive_rates
from budgetlens.price_resolve import resolve_genai, resolve_now, today
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

__all__ = ["PRICE_ERRORS", "UNSET", "genai_calc", "linear_cost", "now_rates", "rates", "remember"]

#: What genai-prices or a user price file can raise while a call is priced (all mean: unpriced).
PRICE_ERRORS = (OSError, ValueError, ArithmeticError, LookupError, TypeError)

UNSET: Any = object()
#: Rates of each resolved price, by its key (None: tiered or not linear: priced call by call).
rates: dict[tuple[Any, ...], Rates | None] = {}
#: (model, provider, tier) -> (end of the UTC day in epoch seconds, the rates of the price in
#: force today): what :func:`budgetlens.price_resolve.resolve_now` keeps for the day
#: (``price_resolve.today``) with its rates, read by :func:`linear_cost` in one lookup.
now_rates: dict[tuple[Any, ...], tuple[float, Rates]] = {}


def genai_calc(
    info: Any, provider: Any, usage: Any, when: dt.datetime, context: dict[str, str] | None
) -> tuple[Decimal, Any]:
    """(total USD, the ModelPrice used) of a genai-prices usage by ``info.calc_price``."""
    calc = info.calc_price(usage, provider, genai_request_timestamp=when, price_context=context)
    return calc.total_price, calc.model_price


def remember(key: tuple[Any, ...], calc: Any) -> Rates | None:
    """Derive (once) and keep the rates of a resolved price; None when it is priced call by call."""
    try:
        found = derive_rates(calc)
    except PRICE_ERRORS as error:  # the per-call path reports it for each call
        log.debug("no rates for %s: %s", key, error)
        found = None
    if len(rates) > 4096:
        rates.clear()
    rates[key] = found
    return found


def linear_cost(
    model: str, usage: Usage, provider: str | None, at: dt.datetime | None, prices_file: Any
) -> float | None:
    """:func:`budgetlens.pricing.cost_usd` of a call :func:`budgetlens.pricing.price_call` prices
    by genai-prices rates with no part left unpriced, without building its ``CallPrice`` (the guard
    prices each call at record with a cost limit); None when the full path must decide (a user
    price file, no rates yet, a part unpriced, a price error: it logs and says why). ``at``: an
    aware UTC datetime, or None for now (the price in force today, looked up once a day)."""
    try:
        if configured_file(prices_file):
            return None
        if at is None:
            memo = (model, provider, usage.service_tier)
            kept = now_rates.get(memo)
            found = kept[1] if kept is not None and time.time() < kept[0] else _rates_now(memo)
        else:
            resolved = resolve_genai(model, provider, usage.service_tier, at)
            found = None if resolved is None else rates.get(resolved[2])
        priced = None if found is None else found.cost(usage)
    except PRICE_ERRORS:
        return None
    return priced[0] if priced is not None and not priced[1] else None


def _rates_now(memo: tuple[Any, ...]) -> Rates | None:
    """The rates of the price in force now for ``memo`` (model, provider, tier), by
    :func:`budgetlens.price_resolve.resolve_now`; kept in :data:`now_rates` until the end of
    the UTC day when ``resolve_now`` keeps its answer that long (a date-only price)."""
    resolved = resolve_now(*memo)
    found = None if resolved is None else rates.get(resolved[2])
    day = today.get(memo)
    if found is not None and day is not None and day[1] is resolved:
        if len(now_rates) > 4096:
            now_rates.clear()
        now_rates[memo] = (day[0], found)
    return found
