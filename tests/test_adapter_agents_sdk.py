"""The OpenAI Agents SDK under a budget (issue 20): streams, handoffs, ``as_tool`` sub-agents,
parallel tool calls, errors and wrapped refusals, with the real ``openai-agents`` package against
the local server of tests/examples/llm_server.py (no network)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import require
from llm_server import CACHED_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.semconv import (
    STOP_BUDGET_TOOLS,
    STOP_BUDGET_WRAP_UP,
    STOP_COMPLETED,
    USAGE_REPORTED,
    USAGE_UNKNOWN,
)

# openai-agents takes seconds to import: the tests import it where they use it, not at collection
require("agents")

pytestmark = pytest.mark.system  # each test starts an HTTP server

CALL = Usage(INPUT_TOKENS, OUTPUT_TOKENS, cache_read_tokens=CACHED_TOKENS, reasoning_tokens=REASONING_TOKENS)


@pytest.fixture(scope="module", autouse=True)
def _no_tracing():
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def read_file_tool():
    """``read_file`` as an Agents SDK tool."""
    from agents import function_tool

    return function_tool(read_file)


def client(server):
    import openai

    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


def chat_model(server, name="gpt-4o-mini"):
    from agents import OpenAIChatCompletionsModel

    return OpenAIChatCompletionsModel(name, client(server))


def responses_model(server, name="gpt-4o-mini"):
    from agents import OpenAIResponsesModel

    return OpenAIResponsesModel(name, client(server))


def streamed(agent, task, **kwargs):
    """``Runner.run_streamed`` read to its end (inside a running event loop, as it needs)."""
    from agents import Runner

    async def main():
        result = Runner.run_streamed(agent, task, **kwargs)
        async for _ in result.stream_events():
            pass
        return result

    return asyncio.run(main())


def test_run_streamed_chat_completions_on_another_server_asks_for_usage(server):
    from agents import Agent

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(name="a", instructions="x", model=chat_model(server))
    with RunBudget(max_total_tokens=50_000) as run:
        hooks = BudgetRunHooks(run)
        streamed(agent, "hi", hooks=hooks, run_config=hooks.run_config())
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert run.result.usage == CALL and run.result.usage_status == USAGE_REPORTED


def test_run_streamed_without_usage_is_unknown_never_zero(server):
    from agents import Agent

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(name="a", instructions="x", model=chat_model(server))
    with RunBudget(max_total_tokens=50_000) as run:
        streamed(agent, "hi", hooks=BudgetRunHooks(run))
    assert "stream_options" not in server.requests[-1][1]  # the SDK asked for none
    assert run.result.usage_status == USAGE_UNKNOWN and run.result.used_tokens > 0


def test_a_refusal_wrapped_by_the_sdk_is_a_budget_stop(server):
    # three parallel tool calls under max_tool_calls=2: the SDK runs tool hooks in tasks and wraps
    # their errors in UserError; the refusal comes out as itself and the run is a budget stop
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(
        name="a", instructions="x", tools=[read_file_tool()], model=responses_model(server, "parallel-gpt")
    )
    with pytest.raises(BudgetExceeded) as info, RunBudget(max_total_tokens=50_000, max_tool_calls=2) as run:
        asyncio.run(Runner.run(agent, "read", hooks=BudgetRunHooks(run)))
    assert info.value.reason == STOP_BUDGET_TOOLS
    assert run.result.stop_reason == STOP_BUDGET_TOOLS and run.result.tool_calls == 2
    assert not run.result.retryable


def test_handoffs_are_counted_as_tool_calls(server):
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    target = Agent(name="reviewer", instructions="review", model=responses_model(server))
    agent = Agent(name="triage", instructions="x", handoffs=[target], model=responses_model(server))
    with RunBudget(max_total_tokens=50_000) as run:
        result = asyncio.run(Runner.run(agent, "review it", hooks=BudgetRunHooks(run)))
    assert result.last_agent.name == "reviewer"
    assert run.result.tool_calls == 1 and run.result.turns == 2
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as stopped:
        asyncio.run(Runner.run(agent, "review it", hooks=BudgetRunHooks(stopped)))
    assert stopped.result.stop_reason == STOP_BUDGET_TOOLS


def test_as_tool_sub_agent_calls_are_charged_to_the_run(server):
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    sub = Agent(name="reader", instructions="read", tools=[read_file_tool()], model=responses_model(server))
    tool = sub.as_tool(tool_name="reader", tool_description="reads files")
    agent = Agent(name="lead", instructions="x", tools=[tool], model=responses_model(server))
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(Runner.run(agent, "go", hooks=BudgetRunHooks(run)))
    calls = len(server.requests) - sent
    # lead: tool call + answer; reader: tool call + answer = 4 model calls, 2 tool calls
    assert calls == 4 and run.result.turns == calls and run.result.usage == CALL + CALL + CALL + CALL
    assert run.result.tool_calls == 2


def test_sub_agent_over_budget_is_refused_before_its_call(server):
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    sub = Agent(name="reader", instructions="read", model=responses_model(server))
    sub.model_settings.max_tokens = 30_000
    agent = Agent(
        name="lead",
        instructions="x",
        tools=[sub.as_tool(tool_name="reader", tool_description="reads")],
        model=responses_model(server),
    )
    agent.model_settings.max_tokens = 1_000
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=20_000) as run:
        asyncio.run(Runner.run(agent, "go", hooks=BudgetRunHooks(run)))
    assert len(server.requests) - sent == 1  # the lead's call only
    assert run.result.stop_reason == "budget_tokens"


def test_a_model_call_that_raised_is_unknown_and_charged_its_reservation(server):
    import openai
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(name="a", instructions="x", model=chat_model(server, "error-429"))
    agent.model_settings.max_tokens = 500
    with pytest.raises(openai.RateLimitError), RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(Runner.run(agent, "hi", hooks=BudgetRunHooks(run)))
    assert run.result.usage_status == USAGE_UNKNOWN and run.result.used_tokens > 500
    assert run.result.turns == 1 and run.result.stop_reason == "failed"


def test_a_cut_stream_is_unknown_and_charged_its_reservation(server):
    from agents import Agent

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(name="a", instructions="x", model=chat_model(server, "drop-stream"))
    agent.model_settings.max_tokens = 500
    with RunBudget(max_total_tokens=50_000) as run:
        hooks = BudgetRunHooks(run)
        streamed(agent, "hi", hooks=hooks, run_config=hooks.run_config())
    assert run.result.usage_status == USAGE_UNKNOWN and run.result.used_tokens > 500
    assert run.result.turns == 1


def test_plain_run_still_reports_exactly(server):
    from agents import Agent, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    agent = Agent(name="a", instructions="x", tools=[read_file_tool()], model=responses_model(server))
    with RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(Runner.run(agent, "read", hooks=BudgetRunHooks(run)))
    assert (run.result.stop_reason, run.result.turns, run.result.tool_calls) == (STOP_COMPLETED, 2, 1)
    assert run.result.usage == CALL + CALL and run.result.usage_status == USAGE_REPORTED


# --- the wrap-up slice (issue 21) -----------------------------------------------------------------
@pytest.mark.parametrize("api, run_streamed", [("chat", False), ("chat", True), ("responses", False)])
def test_an_agent_out_of_budget_answers_from_the_wrap_up_slice(server, api, run_streamed):
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Call 1 reserves its
    # prompt + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500, asking for read_file; call 2
    # (prompt + 1,000) does not fit the 500 left: it is the final call, sent without tools, the
    # instruction last, capped at 1,000; "Done." is the run's final_output, the stop budget_wrap_up.
    from agents import Agent, ModelSettings, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    model = chat_model(server) if api == "chat" else responses_model(server)
    agent = Agent(
        name="a",
        instructions="x",
        tools=[read_file_tool()],
        model=model,
        model_settings=ModelSettings(max_tokens=1_000),
    )
    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    hooks = BudgetRunHooks(run)
    before = len(server.requests)
    if run_streamed:
        result = streamed(agent, "read", hooks=hooks, run_config=hooks.run_config())
    else:
        result = asyncio.run(Runner.run(agent, "read", hooks=hooks, run_config=hooks.run_config()))
    bodies = [body for _, body in server.requests[before:]]
    assert result.final_output == "Done."
    cap_key = "max_tokens" if api == "chat" else "max_output_tokens"
    assert [b.get(cap_key) for b in bodies] == [1_000, 1_000]
    assert [bool(b.get("tools")) for b in bodies] == [True, False]
    last = (bodies[-1].get("messages") or bodies[-1].get("input"))[-1]
    assert last["role"] == "user" and WRAP_UP_INSTRUCTION in str(last["content"])
    done = run.finish()
    assert done.stop_reason == STOP_BUDGET_WRAP_UP and done.turns == 2 and done.tool_calls == 1
    assert done.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS) == 3_000


def test_an_as_tool_sub_agent_does_not_take_the_wrap_up_slice(server):
    # the lead's call 1 uses 1,500 of the 2,000 ordinary tokens; the reader's call (prompt + 1,000)
    # does not fit the 500 left and its model is not wrapped: it is refused before it is sent
    # (not sent as the final call with its tools), and the run stops there, a token stop
    from agents import Agent, ModelSettings, Runner

    from budgetlens.guard.adapters import BudgetRunHooks

    sub = Agent(
        name="reader",
        instructions="read",
        model=responses_model(server),
        model_settings=ModelSettings(max_tokens=1_000),
    )
    agent = Agent(
        name="lead",
        instructions="x",
        tools=[sub.as_tool(tool_name="reader", tool_description="reads")],
        model=responses_model(server),
        model_settings=ModelSettings(max_tokens=1_000),
    )
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000) as run:
        hooks = BudgetRunHooks(run)
        asyncio.run(Runner.run(agent, "go", hooks=hooks, run_config=hooks.run_config()))
    assert len(server.requests) - sent == 1  # the lead's call only
    assert run.result.stop_reason == "budget_tokens" and run.result.used_tokens == 1_500
