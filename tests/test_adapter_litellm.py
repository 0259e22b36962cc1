"""The LiteLLM Python SDK under a budget (issue 20): the real ``litellm`` package against the local
server (no network; LiteLLM's own price map is read from its package)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from _adapter_helpers import ANTHROPIC_CALL, CALL, MESSAGES, TOOLS
from conftest import require

from budgetlens import BudgetExceeded, RunBudget
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, USAGE_REPORTED, USAGE_UNKNOWN

# LiteLLM takes seconds to import: the tests import it where they use it, not at collection
require("litellm")

pytestmark = pytest.mark.system  # each test starts an HTTP server


def kw(server, model="openai/gpt-4o-mini", **extra):
    return {"model": model, "api_base": server.openai_url, "api_key": "test", "messages": MESSAGES, **extra}


def test_completion_is_reserved_with_a_cap_and_recorded(server):
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=50_000)
    llm = GuardedLiteLLM(run)
    assert llm.completion(**kw(server)).choices[0].message.content == "Done."
    assert server.requests[-1][1]["max_tokens"] == 4096
    result = run.finish()
    assert result.usage == CALL and result.usage_status == USAGE_REPORTED and result.cost_usd > 0


def test_anthropic_through_litellm_counts_the_cache_once(server):
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=50_000)
    GuardedLiteLLM(run).completion(
        model="anthropic/claude-haiku-4-5", api_base=server.anthropic_url, api_key="t", messages=MESSAGES
    )
    assert server.requests[-1][0] == "/v1/messages"
    assert run.finish().usage == ANTHROPIC_CALL


def test_streams_sync_and_async_ask_for_usage_and_record_it(server):
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=50_000)
    llm = GuardedLiteLLM(run)
    chunks = list(llm.completion(**kw(server, stream=True)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Done." and server.requests[-1][1]["stream_options"] == {"include_usage": True}

    async def agent():
        await llm.acompletion(**kw(server))
        async for _ in await llm.acompletion(**kw(server, stream=True)):
            pass

    asyncio.run(agent())
    stats = run.stats()
    assert stats.usage == CALL + CALL + CALL and stats.reserved_tokens == 0 and stats.turns == 3


def test_call_that_does_not_fit_is_never_sent(server):
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=1_000)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded) as info:
        GuardedLiteLLM(run).completion(**kw(server, max_tokens=2_000))
    assert info.value.reason == STOP_BUDGET_TOKENS and len(server.requests) == sent


def test_a_logger_hook_cannot_stop_litellm_but_the_wrapper_does(server):
    import litellm

    class Refuse(litellm.integrations.custom_logger.CustomLogger):
        def log_pre_api_call(self, model, messages, kwargs):
            raise BudgetExceeded(STOP_BUDGET_TOKENS, 1, 1)

    litellm.callbacks = [Refuse()]
    try:
        sent = len(server.requests)
        litellm.completion(**kw(server))  # the logger's refusal is swallowed: the call goes out
        assert len(server.requests) == sent + 1
    finally:
        litellm.callbacks = []


def test_rate_limit_releases_and_cut_stream_is_unknown(server):
    import litellm

    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=50_000)
    llm = GuardedLiteLLM(run)
    with pytest.raises(litellm.RateLimitError):
        llm.completion(**kw(server, "openai/error-429", num_retries=0))
    assert run.stats().reserved_tokens == 0 and run.stats().turns == 0
    # LiteLLM 1.110 raises MidStreamFallbackError at the cut (unknown, charged); 1.83 ends the
    # stream and may count it itself: either way the call is settled, never left open
    with contextlib.suppress(litellm.exceptions.MidStreamFallbackError):
        for _ in llm.completion(**kw(server, "openai/drop-stream", stream=True, max_tokens=500)):
            pass
    result = run.finish()
    assert result.turns == 1 and run.stats().reserved_tokens == 0
    assert result.usage_status == USAGE_UNKNOWN or result.used_tokens > 0


def test_parallel_tool_calls_count_against_max_tool_calls(server):
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=50_000, max_tool_calls=2)
    with pytest.raises(BudgetExceeded) as info:
        GuardedLiteLLM(run).completion(**kw(server, "openai/parallel-gpt", tools=TOOLS))
    assert info.value.reason == STOP_BUDGET_TOOLS and run.finish().stop_reason == STOP_BUDGET_TOOLS
