"""Which genai-prices entry and which of its prices are in force for a call: a model's
(provider, model info, rates key, source), kept per UTC date where only start dates decide
(``budgetlens.pricing`` prices with it; the figures stay genai-prices' own)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from budgetlens.price_names import genai_model

#: (model, provider, tier, UTC date) -> what :func:`resolve_genai` found, for models whose prices in
#: force change only with the UTC date (every constraint a ``StartDateConstraint`` or none).
by_day: dict[tuple[Any, ...], tuple[Any, Any, tuple[Any, ...], str]] = {}


def resolve_genai(
    model: str, provider: str | None, tier: str | None, when: dt.datetime
) -> tuple[Any, Any, tuple[Any, ...], str] | None:
    """(genai-prices Provider, ModelInfo, the ``budgetlens.pricing`` rates key of the price in force at ``when``, the
    source) of a model; None when it has no entry. Kept per UTC date for a model whose prices in
    force depend on the date only (the common case: start dates), so a call of such a model does
    not re-read its constraints; a time-of-day price is resolved at each call."""
    day = (when if when.tzinfo is dt.UTC else when.astimezone(dt.UTC)).date()
    memo = (model, provider, tier, day)
    found = by_day.get(memo)
    if found is not None:
        return found
    named = genai_model(model, provider)
    if named is None:
        return None
    genai_provider, info = named
    key = ("genai", genai_provider.id, info.id, tier, in_force(info, when))
    found = (genai_provider, info, key, f"genai-prices:{genai_provider.id}/{info.id}")
    if by_date_only(info):
        if len(by_day) > 4096:
            by_day.clear()
        by_day[memo] = found
    return found


#: (model, provider, tier) -> (end of the UTC day in epoch seconds, what :func:`resolve_genai`
#: found for that day): the same answer as ``by_day``, looked up without building a datetime.
today: dict[tuple[Any, ...], tuple[float, tuple[Any, Any, tuple[Any, ...], str]]] = {}
_DAY_S = 86_400


def resolve_now(
    model: str, provider: str | None, tier: str | None
) -> tuple[Any, Any, tuple[Any, ...], str] | None:
    """:func:`resolve_genai` at the current time (the guard prices a call when it is recorded):
    for a model whose price in force changes only with the UTC date, kept until the end of the
    current UTC day; otherwise (a time-of-day price, no entry) resolved at each call."""
    memo = (model, provider, tier)
    kept = today.get(memo)
    now_s = time.time()
    if kept is not None and now_s < kept[0]:
        return kept[1]
    when = dt.datetime.fromtimestamp(now_s, tz=dt.UTC)
    found = resolve_genai(model, provider, tier, when)
    if found is not None and (model, provider, tier, when.date()) in by_day:
        if len(today) > 4096:
            today.clear()
        today[memo] = ((now_s // _DAY_S + 1) * _DAY_S, found)
    return found


def by_date_only(info: Any) -> bool:
    """True when every conditional price and price variant of a genai-prices model is
    unconditional or starts on a date (its price in force changes only with the UTC date)."""
    from genai_prices.types import StartDateConstraint

    prices = info.prices if isinstance(info.prices, list) else ()
    constraints = [c.constraint for c in prices] + [v.constraint for v in info.price_variants or ()]
    return all(c is None or type(c) is StartDateConstraint for c in constraints)


def in_force(info: Any, when: dt.datetime) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which of a genai-prices model's conditional prices and price variants are in force at
    ``when`` (their own ``constraint.active``): two calls with the same answer have the same
    price (genai-prices picks among the ones in force)."""
    prices = info.prices
    if not info.price_variants and not isinstance(prices, list):
        return (), ()  # one price, always in force
    conditions = (
        tuple(c.constraint is None or c.constraint.active(when) for c in prices)
        if isinstance(prices, list)
        else ()
    )
    variants = tuple(v.constraint is None or v.constraint.active(when) for v in info.price_variants or ())
    return conditions, variants
