"""The guard prices a call only when something needs the figure before the next call (issue 25)."""

from __future__ import annotations

import pytest

from budgetlens import RunBudget, Usage, cost_usd
from budgetlens.guard.spend import SpendTracker


def _pending(run: RunBudget) -> int:
    return len(run._state.use._later)


def test_without_a_cost_limit_record_leaves_the_price_to_when_the_cost_is_read():
    run = RunBudget(max_total_tokens=100_000)
    run.record(Usage(1_000, 100), model="gpt-4o", reservation=run.reserve(2_000))
    run.record(Usage(3_000, 300, 1_000), model="gpt-4o", reservation=run.reserve(4_000))
    assert _pending(run) == 2  # recorded, not priced yet
    expected = cost_usd("gpt-4o", Usage(1_000, 100)) + cost_usd("gpt-4o", Usage(3_000, 300, 1_000))
    assert run.stats().cost_usd == pytest.approx(expected, rel=1e-12)
    assert _pending(run) == 0
    result = run.finish()
    assert result.cost_usd == pytest.approx(expected, rel=1e-12)


def test_an_unpriced_model_read_lazily_is_unpriced_not_zero():
    run = RunBudget()
    run.record(Usage(1_000, 100), model="acme-llm-7", reservation=run.reserve(2_000))
    assert _pending(run) == 1
    assert run.finish().cost_usd is None


def test_a_cost_limit_prices_each_call_at_record():
    run = RunBudget(max_cost_usd=1.0)
    run.record(Usage(1_000, 100), model="gpt-4o", reservation=run.reserve(2_000))
    assert _pending(run) == 0
    assert run._state.use._cost_usd == pytest.approx(cost_usd("gpt-4o", Usage(1_000, 100)), rel=1e-12)


def test_a_spend_window_prices_each_call_at_record():
    run = RunBudget(spend=SpendTracker({"daily": 10.0}))
    run.record(Usage(1_000, 100), model="gpt-4o", reservation=run.reserve(2_000))
    assert _pending(run) == 0
