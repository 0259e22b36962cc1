"""A call priced now (the guard's ``record``: no ``at``) takes the price in force today, kept until
the end of the UTC day (``price_resolve.resolve_now``); every figure equals ``price_call`` at
that moment (issue 25)."""

from __future__ import annotations

import datetime as dt
import random

from genai_prices.types import StartDateConstraint, TimeOfDateConstraint

from budgetlens import price_resolve, pricing
from budgetlens.pricing import clear_price_cache, cost_usd, price_call
from budgetlens.usage import Usage
from tests.test_price_batch import _constrained


def _at(monkeypatch, moment: dt.datetime) -> None:
    """The clocks a call priced now reads (``resolve_now``'s and the per-call path's), set to ``moment``."""
    as_utc = pricing._as_utc
    monkeypatch.setattr(price_resolve.time, "time", lambda: moment.timestamp())
    monkeypatch.setattr(pricing, "_as_utc", lambda at: moment if at is None else as_utc(at))


def test_a_call_priced_now_equals_price_call_at_that_moment_across_a_price_start_date(monkeypatch):
    clear_price_cache()
    usage = Usage(60_000, 5_000, 10_000)
    moments = [
        dt.datetime(2026, 8, 20, 12, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 8, 20, 23, 59, 59, 999_000, tzinfo=dt.UTC),
        dt.datetime(2026, 8, 21, 0, 0, tzinfo=dt.UTC),  # gpt-5.6-sol's price changes here
        dt.datetime(2026, 8, 21, 18, 0, tzinfo=dt.UTC),
    ]
    costs = []
    for moment in moments:
        _at(monkeypatch, moment)
        costs.append(cost_usd("gpt-5.6-sol", usage))
        assert costs[-1] == price_call("gpt-5.6-sol", usage, at=moment).cost_usd
    assert costs[0] == costs[1] != costs[2] == costs[3]
    assert len(price_resolve.today) == 1  # kept per (model, provider, tier): the day's answer


def test_models_priced_now_equal_price_call_and_time_of_day_prices_are_not_kept(monkeypatch):
    clear_price_cache()
    rng = random.Random(2525)
    moment = dt.datetime(2026, 3, 4, 9, 30, tzinfo=dt.UTC)
    _at(monkeypatch, moment)
    by_date = rng.sample(_constrained(StartDateConstraint), 20)
    by_hour = _constrained(TimeOfDateConstraint)
    assert by_hour, "genai-prices has time-of-day prices (off-peak)"
    compared = 0
    for provider, model in [*by_date, *by_hour, ("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5")]:
        for _ in range(4):
            usage = Usage(
                rng.randrange(1, 300_000),
                rng.randrange(0, 8_000),
                service_tier=rng.choice([None, "priority", "flex"]),
            )
            now = cost_usd(model, usage, provider)
            assert now == price_call(model, usage, provider, at=moment).cost_usd
            compared += now is not None
    assert compared > 40
    kept = {memo[:2] for memo in price_resolve.today}
    assert kept and not kept & {(model, provider) for provider, model in by_hour}
