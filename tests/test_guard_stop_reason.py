"""``RunBudget.stop_reason``: the reason the next ``before_turn`` would raise, so that a loop that
ends on ``record`` returning STOP can pass it to ``finish`` (new-user report: the only way to learn
it was to call ``before_turn`` again and read the BudgetExceeded)."""

from __future__ import annotations

import random

import pytest

from budgetlens import Action, BudgetExceeded, RunBudget, TokenPool, Usage
from budgetlens import semconv as sc


def _next_turn_reason(run: RunBudget) -> str | None:
    try:
        run.before_turn()
    except BudgetExceeded as exc:
        return exc.reason
    return None


def test_a_token_limit_reached_by_record_names_budget_tokens_and_finish_stores_it():
    run = RunBudget(max_total_tokens=5_000)
    res = run.reserve(1_000)
    assert run.stop_reason is None
    action = run.record(Usage(4_000, 1_200), reservation=res)
    assert action is Action.STOP and run.stop_reason == sc.STOP_BUDGET_TOKENS
    assert run.finish(stop_reason=run.stop_reason).stop_reason == sc.STOP_BUDGET_TOKENS
    assert run.stop_reason == sc.STOP_BUDGET_TOKENS  # after finish: the run's own


def test_cost_turns_and_time_limits_each_name_their_reason():
    cost = RunBudget(max_cost_usd=0.001)
    cost.record(Usage(10_000, 10_000), "gpt-4o", reservation=cost.reserve(100, "gpt-4o"))
    assert cost.stop_reason == sc.STOP_BUDGET_COST

    turns = RunBudget(max_turns=2)
    for _ in range(2):
        turns.record(Usage(10, 10), reservation=turns.reserve(100))
    assert turns.stop_reason == sc.STOP_BUDGET_TURNS

    now = [0.0]
    timed = RunBudget(max_duration_s=5, clock=lambda: now[0])
    assert timed.stop_reason is None
    now[0] = 5.0
    assert timed.stop_reason == sc.STOP_BUDGET_TIME


def test_a_spent_shared_pool_is_the_child_runs_stop():
    pool = TokenPool(1_000)
    first, second = RunBudget(pool=pool), RunBudget(pool=pool)
    first.record(Usage(900, 100), reservation=first.reserve(1_000))
    assert second.stop_reason == sc.STOP_BUDGET_TOKENS


def test_reading_it_emits_nothing_and_keeps_no_refusal():
    events = []
    run = RunBudget(max_total_tokens=1_000, on_event=events.append)
    run.record(Usage(900, 200), reservation=run.reserve(500))
    before = len(events)
    assert run.stop_reason == sc.STOP_BUDGET_TOKENS
    assert len(events) == before
    # no refusal was kept: a run that only read it and finished without a reason is "completed"
    assert run.finish().stop_reason == sc.STOP_COMPLETED


@pytest.mark.parametrize("seed", range(20))
def test_it_equals_what_before_turn_raises_on_random_runs(seed):
    rng = random.Random(seed)
    limits = {
        "max_total_tokens": rng.choice([None, rng.randint(500, 20_000)]),
        "max_turns": rng.choice([None, rng.randint(1, 8)]),
        "max_cost_usd": rng.choice([None, rng.uniform(0.001, 0.05)]),
    }
    run = RunBudget(**limits)
    for _ in range(rng.randint(0, 10)):
        expected = run.stop_reason
        assert _next_turn_reason(run) == expected
        if expected is not None:
            break
        try:
            res = run.reserve(rng.randint(1, 2_000), "gpt-4o-mini")
        except BudgetExceeded:
            break
        run.record(Usage(rng.randint(0, 3_000), rng.randint(0, 1_000)), "gpt-4o-mini", reservation=res)
    assert run.stop_reason == _next_turn_reason(run)
