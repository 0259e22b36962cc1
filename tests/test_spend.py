"""Spend windows across runs: calendar daily/monthly in a zone, rolling 24h/30d, alert, stop."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from budgetlens import BudgetExceeded, RunBudget, SpendTracker, Usage
from budgetlens.semconv import STOP_BUDGET_COST


def ts(text: str, tz: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_one_alert_at_80_percent_per_daily_window():
    alerts = []
    clock = Clock(ts("2026-11-29 09:00"))
    tracker = SpendTracker({"daily": 10.0}, on_alert=alerts.append, clock=clock)
    tracker.add(7.9)
    tracker.add(0.2)
    tracker.add(1.0)
    assert [(a.window, a.percent, a.period) for a in alerts] == [("daily", 81.0, "2026-11-29")]
    clock.now = ts("2026-11-30 00:00:01")
    tracker.add(8.5)
    assert len(alerts) == 2 and alerts[1].period == "2026-11-30"


def test_hard_stop_at_the_limit():
    tracker = SpendTracker({"daily": 5.0}, clock=Clock(ts("2026-11-29 12:00")))
    tracker.add(4.99)
    tracker.check()
    tracker.add(0.01)
    with pytest.raises(BudgetExceeded) as info:
        tracker.check()
    assert (info.value.reason, info.value.limit) == (STOP_BUDGET_COST, 5.0)


def test_daily_window_resets_at_local_midnight_of_the_chosen_zone():
    zone = "America/New_York"
    clock = Clock(ts("2026-11-29 23:30", zone))
    tracker = SpendTracker({"daily": 10.0}, tz=zone, clock=clock)
    tracker.add(6.0)
    clock.now = ts("2026-11-30 00:30", zone)  # 05:30 UTC: a new day in New York
    assert tracker.spent("daily") == 0.0
    # The same two instants are 04:30 and 05:30 UTC of one UTC day: no reset in UTC.
    utc_clock = Clock(ts("2026-11-29 23:30", zone))
    utc = SpendTracker({"daily": 10.0}, clock=utc_clock)
    utc.add(6.0)
    utc_clock.now = ts("2026-11-30 00:30", zone)
    assert utc.spent("daily") == 6.0


def test_monthly_window_is_calendar_month_not_30_days():
    clock = Clock(ts("2026-01-31 10:00"))
    tracker = SpendTracker({"monthly": 100.0, "30d": 100.0}, clock=clock)
    tracker.add(50.0)
    clock.now = ts("2026-02-01 10:00")
    assert tracker.spent("monthly") == 0.0
    assert tracker.spent("30d") == 50.0


def test_rolling_24h_window_drops_spend_older_than_24_hours():
    clock = Clock(ts("2026-11-29 10:00"))
    tracker = SpendTracker({"24h": 10.0}, clock=clock)
    tracker.add(9.0)
    clock.now = ts("2026-11-30 09:59")
    with pytest.raises(BudgetExceeded):
        tracker.add(1.0) or tracker.check()
    clock.now = ts("2026-11-30 10:00")
    assert tracker.spent("24h") == pytest.approx(1.0)
    tracker.check()


@pytest.mark.parametrize(
    "limits, named", [({"weekly": 5}, "weekly"), ({"daily": 0}, "daily"), ({}, "at least one")]
)
def test_bad_windows_are_rejected_naming_them(limits, named):
    with pytest.raises(ValueError, match=named):
        SpendTracker(limits)


def test_bad_time_zone_is_rejected():
    with pytest.raises(ValueError, match="tz"):
        SpendTracker({"daily": 1.0}, tz="Mars/Olympus")


def test_runs_sharing_a_tracker_stop_when_the_window_is_spent():
    tracker = SpendTracker({"daily": 0.02})
    first = RunBudget(spend=tracker)
    first.record(Usage(4_000, 1_000), model="gpt-4o", reservation=first.reserve(5_000))  # $0.02
    first.finish()
    second = RunBudget(spend=tracker)
    with pytest.raises(BudgetExceeded) as info:
        second.before_turn()
    assert info.value.reason == STOP_BUDGET_COST
    assert second.finish().stop_reason == STOP_BUDGET_COST


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_window_limit_is_rejected(value):
    with pytest.raises(ValueError, match="finite USD amount > 0"):
        SpendTracker({"daily": value})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5])
def test_non_finite_or_negative_cost_is_rejected(value):
    with pytest.raises(ValueError, match="cost_usd must be a finite USD amount >= 0"):
        SpendTracker({"daily": 1.0}).add(value)


def test_overlapping_under_estimated_calls_pass_the_limit_by_at_most_their_summed_shortfall():
    """The documented bound: spend passes a window's limit by at most the sum of the in-flight
    calls' shortfall against their estimates (not what one call overshoots)."""
    tracker = SpendTracker({"daily": 1.0}, clock=lambda: 1_700_000_000.0)
    estimate, actual = 0.02, 0.03  # every call costs 50 % more than it reserved
    for _ in range(50):  # 50 calls in flight at once: together they fill the limit exactly
        tracker.reserve(estimate)
    with pytest.raises(BudgetExceeded):
        tracker.reserve(0.001)  # no 51st call while they are open
    for _ in range(50):  # each settles: its real cost replaces its estimate
        tracker.release(estimate)
        tracker.add(actual)
    overshoot = tracker.spent("daily") - 1.0
    shortfall = 50 * (actual - estimate)
    assert overshoot == pytest.approx(shortfall)  # the bound is reached, never passed
    assert overshoot > 40 * (actual - estimate)  # far more than one call's overshoot
    with pytest.raises(BudgetExceeded):
        tracker.reserve(0.0)
