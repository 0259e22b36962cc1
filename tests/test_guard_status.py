"""The status line shows the fraction of the limit its percent comes from (new-user finding 1)."""

from __future__ import annotations

import pytest

from budgetlens import RunBudget


def _used(run: RunBudget, prompt: int, completion: int) -> None:
    run.record({"prompt_tokens": prompt, "completion_tokens": completion}, model="gpt-4o")


def test_status_shows_the_input_fraction_when_the_input_limit_gives_the_percent():
    run = RunBudget(max_total_tokens=100_000, max_input_tokens=10_000)
    _used(run, 9_000, 100)
    stats = run.stats()
    assert stats.percent == 90.0
    assert (stats.percent_limit, stats.percent_used, stats.percent_max) == ("max_input_tokens", 9_000, 10_000)
    assert stats.status == "budget 90.0 % (9,000 / 10,000 input tokens)"
    assert stats.max_tokens == 100_000  # the total-token fields keep their meaning


def test_status_shows_the_output_fraction_when_the_output_limit_gives_the_percent():
    run = RunBudget(max_total_tokens=100_000, max_output_tokens=200)
    _used(run, 9_000, 150)
    assert run.stats().status == "budget 75.0 % (150 / 200 output tokens)"


def test_status_keeps_the_total_fraction_when_the_total_limit_gives_the_percent():
    run = RunBudget(max_total_tokens=10_000, max_input_tokens=100_000)
    _used(run, 9_000, 100)
    assert run.stats().status == "budget 91.0 % (9,100 / 10,000 tokens)"


def test_a_tie_between_total_and_input_shows_the_total_fraction():
    run = RunBudget(max_total_tokens=10_000, max_input_tokens=10_000)
    _used(run, 5_000, 0)
    assert run.stats().status == "budget 50.0 % (5,000 / 10,000 tokens)"


def test_status_shows_the_cost_fraction_in_usd_when_the_cost_limit_gives_the_percent():
    run = RunBudget(max_total_tokens=1_000_000, max_cost_usd=0.05)
    _used(run, 9_000, 100)
    stats = run.stats()
    assert stats.percent_limit == "max_cost_usd"
    assert stats.percent_used == pytest.approx(stats.cost_usd)
    assert stats.status == f"budget {stats.percent:.1f} % ({stats.percent_used:.4f} / 0.05 USD)"


def test_status_percent_and_fraction_agree_for_every_limit():
    for limits in (
        {"max_total_tokens": 100_000, "max_input_tokens": 10_000},
        {"max_total_tokens": 20_000, "max_output_tokens": 1_000},
        {"max_total_tokens": 9_500, "max_input_tokens": 10_000, "max_output_tokens": 500},
    ):
        run = RunBudget(**limits)
        _used(run, 9_000, 100)
        stats = run.stats()
        assert stats.percent == round(100 * stats.percent_used / stats.percent_max, 1)
