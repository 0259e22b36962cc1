"""Google ADK under a budget (issue 20): the real ``google-adk`` package (its LiteLLM model, so the
local OpenAI-shaped server stands in for the provider; no network) with ``BudgetPlugin``."""

from __future__ import annotations

import asyncio

import pytest
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS

from budgetlens import BudgetExceeded, RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION

# google-adk takes seconds to import: the tests import it where they use it, not at collection
require("google.adk", "litellm")

pytestmark = pytest.mark.system  # each test starts an HTTP server

PER_CALL = INPUT_TOKENS + OUTPUT_TOKENS


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def model(server, name="gpt-4o-mini"):
    from google.adk.models.lite_llm import LiteLlm

    return LiteLlm(model=f"openai/{name}", api_base=server.openai_url, api_key="test")


def run_agent(agent, run, text="Fix the failing test", streaming=False):
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from budgetlens.guard.adapters.google_adk import BudgetPlugin

    async def main():
        runner = InMemoryRunner(agent, app_name="t", plugins=[BudgetPlugin(run)])  # the budget's two lines
        session = await runner.session_service.create_session(app_name="t", user_id="u")
        config = RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(
            user_id="u", session_id=session.id, new_message=message, run_config=config
        ):
            pass

    asyncio.run(main())


def test_agent_calls_are_reserved_recorded_and_tools_counted(server):
    from google.adk.agents import LlmAgent
    from google.genai import types

    agent = LlmAgent(name="fixer", model=model(server), instruction="Fix bugs.", tools=[read_file])
    with RunBudget(max_total_tokens=50_000) as run:
        run_agent(agent, run)
    assert (run.result.turns, run.result.tool_calls, run.result.used_tokens) == (2, 1, 2 * PER_CALL)
    assert run.result.usage_status == sc.USAGE_REPORTED
    capped = LlmAgent(
        name="fixer",
        model=model(server),
        instruction="Fix bugs.",
        generate_content_config=types.GenerateContentConfig(temperature=0),
    )
    with RunBudget(max_total_tokens=50_000) as run:
        run_agent(capped, run)
    assert server.requests[-1][1]["max_completion_tokens"] == 4096  # the cap was sent


def test_refused_before_sending_and_tool_limit(server):
    from google.adk.agents import LlmAgent
    from google.genai import types

    agent = LlmAgent(
        name="fixer",
        model=model(server),
        instruction="Fix bugs.",
        tools=[read_file],
        generate_content_config=types.GenerateContentConfig(max_output_tokens=2_000),
    )
    sent = len(server.requests)
    with pytest.raises(RuntimeError) as info, RunBudget(max_total_tokens=1_000) as run:
        run_agent(agent, run)  # ADK re-raises the plugin's refusal as RuntimeError from it
    assert isinstance(info.value.__cause__, BudgetExceeded)
    assert len(server.requests) == sent and run.result.stop_reason == sc.STOP_BUDGET_TOKENS
    plain = LlmAgent(name="fixer", model=model(server), instruction="Fix bugs.", tools=[read_file])
    with pytest.raises(RuntimeError), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as stopped:
        run_agent(plain, stopped)
    assert stopped.result.stop_reason == sc.STOP_BUDGET_TOOLS


def test_streaming_mode_records_the_final_chunk_once(server):
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm

    # ADK's LiteLlm asks for no stream usage: unknown, charged its reservation, never 0
    agent = LlmAgent(name="fixer", model=model(server), instruction="Fix bugs.")
    with RunBudget(max_total_tokens=50_000) as run:
        run_agent(agent, run, streaming=True)
    assert server.requests[-1][1]["stream"] is True
    assert (
        run.result.turns == 1
        and run.result.usage_status == sc.USAGE_UNKNOWN
        and run.result.used_tokens > 4_000
    )
    # asked for, the final chunk's usage is recorded once
    asking = LiteLlm(
        model="openai/gpt-4o-mini",
        api_base=server.openai_url,
        api_key="t",
        stream_options={"include_usage": True},
    )
    with RunBudget(max_total_tokens=50_000) as run:
        run_agent(LlmAgent(name="fixer", model=asking, instruction="Fix bugs."), run, streaming=True)
    assert run.result.turns == 1 and run.result.used_tokens == PER_CALL
    assert run.result.usage_status == sc.USAGE_REPORTED


def test_model_error_is_settled(server):
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm

    agent = LlmAgent(name="fixer", model=model(server, "error-429"), instruction="x")
    with pytest.raises(Exception), RunBudget(max_total_tokens=50_000) as run:  # noqa: B017 - ADK's own error type
        run_agent(agent, run)
    assert run.result.turns == 0 and run.result.used_tokens == 0  # a 429: released

    class LostConnection(BaseLlm):
        """A model whose connection drops mid-call (no HTTP status: it may have run)."""

        async def generate_content_async(self, llm_request, stream=False):
            raise ConnectionResetError("connection reset by peer")
            yield  # an async generator, as ADK expects

    lost = LlmAgent(name="fixer", model=LostConnection(model="gpt-4o-mini"), instruction="x")
    with pytest.raises(ConnectionResetError), RunBudget(max_total_tokens=50_000) as unknown:
        run_agent(lost, unknown)
    assert unknown.result.usage_status == sc.USAGE_UNKNOWN and unknown.result.used_tokens > 0
    assert unknown.result.turns == 1


def test_agent_tool_sub_agent_is_charged_to_the_run(server):
    from google.adk.agents import LlmAgent
    from google.adk.tools.agent_tool import AgentTool

    reader = LlmAgent(name="reader", model=model(server), instruction="Read files.", tools=[read_file])
    lead = LlmAgent(
        name="lead", model=model(server), instruction="Delegate.", tools=[AgentTool(agent=reader)]
    )
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run:
        run_agent(lead, run)
    calls = len(server.requests) - sent
    assert calls == 4 and run.result.turns == 4 and run.result.tool_calls == 2
    assert run.result.used_tokens == 4 * PER_CALL


def test_an_agent_out_of_budget_answers_from_the_wrap_up_slice(server):
    from google.adk.agents import LlmAgent
    from google.genai import types

    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Call 1 reserves its
    # prompt + 1,000 (max_output_tokens) and uses 1,200 + 300 = 1,500; call 2 (prompt + 1,000) does
    # not fit the 500 left: it is the final call, without tools, capped at 1,000 (below the
    # 1,500 - prompt the slice leaves), and the run stops with budget_wrap_up after it.
    agent = LlmAgent(
        name="fixer",
        model=model(server),
        instruction="Fix bugs.",
        tools=[read_file],
        generate_content_config=types.GenerateContentConfig(max_output_tokens=1_000),
    )
    before = len(server.requests)
    with RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000) as run:
        run_agent(agent, run)
    bodies = [body for _, body in server.requests[before:]]
    assert [b["max_completion_tokens"] for b in bodies] == [1_000, 1_000]
    assert [("tools" in b) for b in bodies] == [True, False]
    assert WRAP_UP_INSTRUCTION in str(bodies[-1]["messages"][-1]["content"])
    assert bodies[-1]["messages"][-1]["role"] == "user"
    assert run.result.stop_reason == sc.STOP_BUDGET_WRAP_UP
    assert (run.result.turns, run.result.tool_calls, run.result.used_tokens) == (2, 1, 2 * PER_CALL)
