"""pydantic-ai under a budget (issue 20): the real ``pydantic-ai`` package with its OpenAI model
against the local server (no network)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import require
from llm_server import CACHED_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, STOP_BUDGET_WRAP_UP, USAGE_REPORTED

# pydantic-ai takes a second to import: the tests import it where they use it, not at collection
require("pydantic_ai")

pytestmark = pytest.mark.system  # each test starts an HTTP server

CALL = Usage(INPUT_TOKENS, OUTPUT_TOKENS, cache_read_tokens=CACHED_TOKENS, reasoning_tokens=REASONING_TOKENS)


def model(server, name="gpt-4o-mini"):
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=server.openai_url, api_key="test"))


def agent_with_tool(m, **kwargs):
    from pydantic_ai import Agent

    agent = Agent(m, **kwargs)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return "def f(): ..."

    return agent


def test_agent_run_is_reserved_recorded_and_tools_counted(server):
    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    with RunBudget(max_total_tokens=50_000) as run:
        result = agent_with_tool(BudgetModel(model(server), run)).run_sync("Fix the failing test")
    assert result.output == "Done."
    assert (run.result.turns, run.result.tool_calls, run.result.usage) == (2, 1, CALL + CALL)
    assert run.result.usage_status == USAGE_REPORTED and run.result.cost_usd > 0
    body = server.requests[-1][1]
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 4096  # a cap was added


def test_usage_limits_let_a_second_call_through_but_the_budget_refuses_before_sending(server):
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    settings = {"max_tokens": 1_000}
    sent = len(server.requests)
    with pytest.raises(UsageLimitExceeded):  # pydantic-ai checks tokens only after the response
        agent_with_tool(model(server), model_settings=settings).run_sync(
            "go", usage_limits=UsageLimits(total_tokens_limit=2_000)
        )
    assert len(server.requests) - sent == 2  # the second call was sent and paid for: 3,000 tokens
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=2_000) as run:
        agent_with_tool(BudgetModel(model(server), run), model_settings=settings).run_sync("go")
    assert len(server.requests) - sent == 1 and run.result.used_tokens == 1_500
    assert run.result.stop_reason == STOP_BUDGET_TOKENS


def test_streamed_run_is_recorded(server):
    from pydantic_ai import Agent

    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    async def main(run):
        agent = Agent(BudgetModel(model(server), run))
        async with agent.run_stream("hi") as result:
            return await result.get_output()

    with RunBudget(max_total_tokens=50_000) as run:
        assert asyncio.run(main(run)) == "Done."
    assert run.result.usage == CALL and run.result.turns == 1
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}


def test_http_error_releases_and_parallel_tool_calls_over_the_limit_stop(server):
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError

    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    run = RunBudget(max_total_tokens=50_000)
    with pytest.raises(ModelHTTPError):
        Agent(BudgetModel(model(server, "error-500"), run), retries=0).run_sync("hi")
    assert run.stats().reserved_tokens == 0 and run.stats().turns == 0
    with (
        pytest.raises(BudgetExceeded) as info,
        RunBudget(max_total_tokens=50_000, max_tool_calls=2) as stopped,
    ):
        agent_with_tool(BudgetModel(model(server, "parallel-gpt"), stopped)).run_sync("go")
    assert info.value.reason == STOP_BUDGET_TOOLS and stopped.result.stop_reason == STOP_BUDGET_TOOLS


def test_a_sub_agent_with_a_budget_model_of_the_same_run_is_charged(server):
    from pydantic_ai import Agent

    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    with RunBudget(max_total_tokens=50_000) as run:
        sub = Agent(BudgetModel(model(server), run))
        lead = Agent(BudgetModel(model(server), run))

        @lead.tool_plain
        async def delegate(task: str) -> str:
            """Ask the sub-agent."""
            return (await sub.run(task)).output

        lead.run_sync("go")
    assert run.result.turns == 3 and run.result.tool_calls == 1 and run.result.usage == CALL + CALL + CALL


def test_an_agent_out_of_budget_answers_from_the_wrap_up_slice(server):
    # max_total_tokens 2,500 with a 1,000-token slice: ordinary room 1,500. Each prompt counts 100.
    # Call 1 reserves 100 + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500; call 2 (100 + 1,000)
    # does not fit the 0 left: it is the final call, without the function tool, capped at
    # 2,500 - 1,500 - 100 = 900, and the run stops with budget_wrap_up after it.
    from budgetlens.guard.adapters.pydantic_ai import BudgetModel

    run = RunBudget(max_total_tokens=2_500, wrap_up_tokens=1_000)
    before = len(server.requests)
    guarded = BudgetModel(model(server), run, count_tokens=lambda messages: 100)
    agent = agent_with_tool(guarded, model_settings={"max_tokens": 1_000})
    assert agent.run_sync("Fix the failing test").output == "Done."
    bodies = [body for _, body in server.requests[before:]]
    assert [b.get("max_completion_tokens", b.get("max_tokens")) for b in bodies] == [1_000, 900]
    assert [("tools" in b) for b in bodies] == [True, False]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and (result.turns, result.tool_calls) == (2, 1)
    assert result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS)
