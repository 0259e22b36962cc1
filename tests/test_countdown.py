"""The countdown notice (issue 21 item 5, opt-in): a one-line budget notice the model can see."""

from __future__ import annotations

import pytest

from budgetlens import RunBudget
from budgetlens.guard.adapters._calls import add_countdown
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.usage import Usage


def _call(run, usage):
    run.record(usage, reservation=run.reserve(usage.input_tokens + usage.output_tokens))


def test_one_notice_per_threshold_with_percent_and_turns_left():
    run = RunBudget(max_total_tokens=10_000, countdown_at=(0.5, 0.8))
    _call(run, Usage(2_000, 500))  # 25 %: no threshold crossed
    assert run.countdown_notice() is None
    _call(run, Usage(2_000, 500))  # 5,000 used: 50 % left; 5,000 left / 2,500 per turn = 2 turns
    assert run.countdown_notice() == "budget: 50 % left, about 2 turns"
    assert run.countdown_notice() is None  # once per threshold
    _call(run, Usage(2_000, 1_200))  # 8,200 used: 18 % left; 1,800 // (8,200 // 3 = 2,733) = 0
    assert run.countdown_notice() == "budget: 18 % left, about 0 turns"


def test_the_turn_limit_bounds_the_turns_left_and_the_countdown_is_off_by_default():
    run = RunBudget(max_total_tokens=10_000, max_turns=3, countdown_at=[0.5])
    _call(run, Usage(4_000, 1_000))  # 50 % left; 5,000 // 5,000 = 1 turn by tokens, 2 by turns
    assert run.countdown_notice() == "budget: 50 % left, about 1 turn"
    quiet = RunBudget(max_total_tokens=10_000)
    _call(quiet, Usage(9_000, 0))
    assert quiet.countdown_notice() is None
    with pytest.raises(ValueError, match="countdown_at must be a fraction in"):
        RunBudget(countdown_at=(0, 0.5))


def test_the_adapters_add_the_notice_to_the_request_and_count_its_tokens():
    run = RunBudget(max_total_tokens=10_000, countdown_at=(0.5,))
    _call(run, Usage(5_000, 0))
    messages = [{"role": "user", "content": "Fix it"}]
    kwargs = {"messages": messages}
    parts = add_countdown(run, kwargs, "max_completion_tokens", (messages,))
    notice = "budget: 50 % left, about 1 turn"
    assert kwargs["messages"][-1] == {"role": "user", "content": notice} and messages == [messages[0]]
    assert estimate_tokens(*parts) == estimate_tokens(messages) + estimate_tokens(notice)
    assert add_countdown(run, kwargs, "max_completion_tokens", (messages,)) == (messages,)  # shown once
