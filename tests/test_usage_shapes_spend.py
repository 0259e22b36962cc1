"""Issue 15 rows for the guard: Bedrock spellings, partial usage, shared spend reservations."""

from __future__ import annotations

import threading

import pytest

from budgetlens import RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.results import BudgetExceeded
from budgetlens.guard.spend import SpendTracker
from budgetlens.pricing import estimate_cost_usd
from budgetlens.usage import Usage, normalize_usage, usage_missing_parts


@pytest.mark.parametrize(
    "payload",
    [
        # InvokeModel invocation-metrics / header spelling of the cache buckets
        {
            "inputTokens": 500,
            "outputTokens": 100,
            "cacheReadInputTokenCount": 2000,
            "cacheWriteInputTokenCount": 1000,
        },
        # the same call in the Converse spelling
        {
            "inputTokens": 500,
            "outputTokens": 100,
            "cacheReadInputTokens": 2000,
            "cacheWriteInputTokens": 1000,
        },
        # every part in the *TokenCount spelling
        {
            "inputTokenCount": 500,
            "outputTokenCount": 100,
            "cacheReadInputTokenCount": 2000,
            "cacheWriteInputTokenCount": 1000,
        },
    ],
)
def test_bedrock_cache_spellings_are_read_not_dropped(payload):
    usage = normalize_usage(payload, "aws.bedrock")
    # input excludes the cache buckets on Bedrock: 500 + 2000 + 1000
    assert usage == Usage(3500, 100, 2000, 1000, 0)
    assert usage.total_tokens == 3600


def test_bedrock_unknown_token_spelling_is_refused_by_name():
    with pytest.raises(ValueError, match="cacheReadTokenCount"):
        normalize_usage({"inputTokens": 500, "outputTokens": 100, "cacheReadTokenCount": 3000})


@pytest.mark.parametrize(
    ("payload", "missing"),
    [
        ({"type": "message_delta", "usage": {"output_tokens": 40}}, ("input_tokens",)),
        ({"type": "message_delta", "usage": {"output_tokens": 40, "input_tokens": 0}}, ("input_tokens",)),
        ({"type": "message_delta", "usage": {"output_tokens": 40, "input_tokens": None}}, ("input_tokens",)),
        ({"prompt_tokens": 300}, ("output_tokens",)),
        ({"outputTokens": 12}, ("input_tokens",)),
        ({"input_tokens": 300, "output_tokens": 40}, ()),
        ({"type": "message_delta", "usage": {"output_tokens": 40, "input_tokens": 900}}, ()),
        (None, ()),
    ],
)
def test_usage_missing_parts(payload, missing):
    assert usage_missing_parts(payload, "anthropic") == missing


def test_message_delta_alone_charges_the_reservation_input_and_is_partial():
    run = RunBudget(max_total_tokens=100_000)
    res = run.reserve(3000, output_tokens=1000)  # input part 2,000
    run.record({"type": "message_delta", "usage": {"output_tokens": 40}}, reservation=res)
    result = run.finish()
    assert result.usage.input_tokens == 2000
    assert result.usage.output_tokens == 40
    assert result.used_tokens == 2040
    assert result.usage_status == sc.USAGE_PARTIAL


def test_partial_usage_without_reservation_is_never_zero_input():
    run = RunBudget(max_total_tokens=100_000)
    run.record({"type": "message_delta", "usage": {"output_tokens": 40}})
    result = run.finish()
    assert result.usage.input_tokens > 0
    assert result.usage_status == sc.USAGE_PARTIAL


def _daily_tracker(spent: float) -> SpendTracker:
    tracker = SpendTracker({"daily": 1.00}, clock=lambda: 1_700_000_000.0)
    tracker.add(spent)
    return tracker


def test_concurrent_runs_reserve_against_a_shared_spend_window():
    per_call = estimate_cost_usd("gpt-4o", 10_000, 2_000, "openai")  # input 8,000 + output 2,000
    assert per_call is not None
    tracker = _daily_tracker(0.90)  # $0.10 of $1.00 left
    barrier = threading.Barrier(5)
    admitted, refused = [], []
    lock = threading.Lock()

    def agent(index: int) -> None:
        run = RunBudget(max_total_tokens=1_000_000, model_chain=["gpt-4o"], provider="openai", spend=tracker)
        barrier.wait()
        try:
            res = run.reserve(10_000, output_tokens=2_000)
        except BudgetExceeded as exc:
            with lock:
                refused.append(exc.reason)
            return
        with lock:
            admitted.append(index)
        run.record(
            {"prompt_tokens": 8_000, "completion_tokens": 2_000}, "gpt-4o", reservation=res, provider="openai"
        )

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected_admitted = int(0.10 // per_call)  # what fits in $0.10
    assert len(admitted) == expected_admitted
    assert refused == [sc.STOP_BUDGET_COST] * (5 - expected_admitted)
    assert tracker.spent("daily") <= 1.00 + 1e-9
    assert tracker.reserved("daily") == 0.0


def test_released_and_reset_reservations_give_spend_back():
    tracker = _daily_tracker(0.0)
    run = RunBudget(max_total_tokens=1_000_000, model_chain=["gpt-4o"], provider="openai", spend=tracker)
    res = run.reserve(10_000, output_tokens=2_000)
    assert tracker.reserved("daily") > 0
    run.release(res)
    assert tracker.reserved("daily") == 0.0
    run.reserve(10_000, output_tokens=2_000)
    run.reset()
    assert tracker.reserved("daily") == 0.0
    assert tracker.spent("daily") == 0.0


def test_a_call_without_usage_keeps_its_reserved_cost_as_spend():
    tracker = _daily_tracker(0.0)
    run = RunBudget(max_total_tokens=1_000_000, model_chain=["gpt-4o"], provider="openai", spend=tracker)
    res = run.reserve(10_000, output_tokens=2_000)
    run.record(None, reservation=res)
    assert tracker.spent("daily") == pytest.approx(res.cost_usd)
    assert tracker.reserved("daily") == 0.0
