"""A batch priced together equals each call priced alone (issue 25), across the dates and times
of day at which genai-prices' conditional prices and price variants change."""

from __future__ import annotations

import datetime as dt
import random

from genai_prices import data_snapshot
from genai_prices.types import StartDateConstraint, TimeOfDateConstraint

from budgetlens.pricing import PriceRequest, clear_price_cache, price_call, price_calls
from budgetlens.usage import Usage


def _constrained(kind: type) -> list[tuple[str, str]]:
    """(provider id, model id) of genai-prices models with a price or variant under ``kind``."""
    out = []
    for provider in data_snapshot.get_snapshot().providers:
        for info in provider.models:
            items = [*(info.prices if isinstance(info.prices, list) else ()), *(info.price_variants or ())]
            if any(isinstance(item.constraint, kind) for item in items):
                out.append((provider.id, info.id))
    return out


def _moments(constraint_kind: type, rng: random.Random) -> list[dt.datetime]:
    """Call times around the days and hours where such constraints switch, naive (UTC) and aware."""
    if constraint_kind is TimeOfDateConstraint:
        day = dt.datetime(2026, 3, 4, tzinfo=dt.UTC)
        moments = [day + dt.timedelta(minutes=30 * step, seconds=rng.randrange(60)) for step in range(48)]
    else:
        starts = sorted(
            {
                item.constraint.start_date
                for provider in data_snapshot.get_snapshot().providers
                for info in provider.models
                for item in [
                    *(info.prices if isinstance(info.prices, list) else ()),
                    *(info.price_variants or ()),
                ]
                if isinstance(item.constraint, StartDateConstraint)
            }
        )
        moments = []
        for start in rng.sample(starts, min(len(starts), 12)):
            midnight = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
            moments += [midnight - dt.timedelta(microseconds=1), midnight, midnight + dt.timedelta(hours=23)]
    berlin = dt.timezone(dt.timedelta(hours=2))
    return [
        *moments,
        *(m.replace(tzinfo=None) for m in moments[::3]),
        *(m.astimezone(berlin) for m in moments[1::3]),
    ]


def _batch_equals_one_by_one(
    models: list[tuple[str, str]], moments: list[dt.datetime], rng: random.Random
) -> int:
    requests = [
        PriceRequest(
            model,
            Usage(
                rng.randrange(1, 200_000),
                rng.randrange(0, 5_000),
                service_tier=rng.choice([None, "priority", "flex"]),
            ),
            provider,
            rng.choice(moments),
        )
        for provider, model in models
        for _ in range(6)
    ]
    batch = price_calls(requests)
    alone = [price_call(r.model, r.usage, r.provider, at=r.at) for r in requests]
    assert batch == alone
    return sum(result.cost_usd is not None for result in batch)


def test_a_batch_across_price_start_dates_equals_each_call_priced_alone():
    clear_price_cache()
    rng = random.Random(251)
    models = _constrained(StartDateConstraint)
    assert models
    priced = _batch_equals_one_by_one(
        rng.sample(models, min(len(models), 40)), _moments(StartDateConstraint, rng), rng
    )
    assert priced > 100


def test_a_batch_across_off_peak_hours_equals_each_call_priced_alone():
    clear_price_cache()
    rng = random.Random(252)
    models = _constrained(TimeOfDateConstraint)
    assert models, "genai-prices has time-of-day prices (off-peak)"
    assert _batch_equals_one_by_one(models, _moments(TimeOfDateConstraint, rng), rng) > 10
