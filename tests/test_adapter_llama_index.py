"""LlamaIndex under a budget (issue 20): the real ``llama-index-core`` with its LiteLLM LLM
against the local server (no network)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest

from budgetlens import BudgetExceeded, RunBudget
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, STOP_BUDGET_WRAP_UP, USAGE_REPORTED

sys.path.insert(0, str(Path(__file__).parent / "examples"))
from _adapter_helpers import CALL
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS, LLMServer

# llama-index and LiteLLM take seconds to import: the tests import them where they use them
require("llama_index.core", "llama_index.llms.litellm")

pytestmark = pytest.mark.system  # each test starts an HTTP server


def hi():
    """The conversation a chat sends."""
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role="user", content="Fix the failing test")]


@pytest.fixture(scope="module")
def server():
    with LLMServer() as s:
        yield s


def llm(server, name="gpt-4o-mini", **kwargs):
    from llama_index.llms.litellm import LiteLLM

    return LiteLLM(model=f"openai/{name}", api_base=server.openai_url, api_key="test", **kwargs)


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def test_chat_sync_async_and_streamed_are_reserved_and_recorded(server):
    from budgetlens.guard.adapters.llama_index import guard_llm

    run = RunBudget(max_total_tokens=50_000)
    guarded = guard_llm(llm(server), run)
    assert guarded.chat(hi()).message.content == "Done."
    assert server.requests[-1][1]["max_tokens"] == 4096
    assert "".join(c.delta or "" for c in guarded.stream_chat(hi())) == "Done."
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}

    async def main():
        await guarded.achat(hi())
        async for _ in await guarded.astream_chat(hi()):
            pass

    asyncio.run(main())
    result = run.finish()
    assert result.turns == 4 and result.usage == CALL + CALL + CALL + CALL
    assert result.usage_status == USAGE_REPORTED


def test_complete_and_its_stream_and_async_forms_are_guarded_like_chat(server):
    # LiteLLM's complete goes through its private _chat, past a guarded chat: guarded all the same
    from budgetlens.guard.adapters.llama_index import guard_llm

    run = RunBudget(max_total_tokens=50_000)
    guarded = guard_llm(llm(server), run)
    sent = len(server.requests)
    assert guarded.complete("Fix the failing test").text == "Done."
    assert "".join(c.delta or "" for c in guarded.stream_complete("Fix the failing test")) == "Done."

    async def main():
        assert (await guarded.acomplete("Fix the failing test")).text == "Done."
        async for _ in await guarded.astream_complete("Fix the failing test"):
            pass

    asyncio.run(main())
    assert len(server.requests) == sent + 4
    assert all(body["max_tokens"] == 4096 for _, body in server.requests[sent:])
    result = run.finish()
    assert result.turns == 4 and result.usage == CALL + CALL + CALL + CALL
    assert result.usage_status == USAGE_REPORTED
    with pytest.raises(BudgetExceeded):
        guard_llm(llm(server, max_tokens=2_000), RunBudget(max_total_tokens=1_000)).complete("Fix")
    assert len(server.requests) == sent + 4


def test_refused_before_sending_and_failures_settled(server):
    from budgetlens.guard.adapters.llama_index import guard_llm

    run = RunBudget(max_total_tokens=1_000)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded) as info:
        guard_llm(llm(server, max_tokens=2_000), run).chat(hi())
    assert info.value.reason == STOP_BUDGET_TOKENS and len(server.requests) == sent
    other = RunBudget(max_total_tokens=50_000)
    with pytest.raises(Exception):  # noqa: B017 - LiteLLM's RateLimitError
        guard_llm(llm(server, "error-429", max_retries=0), other).chat(hi())
    assert other.stats().turns == 0 and other.stats().reserved_tokens == 0
    with contextlib.suppress(Exception):  # LiteLLM may raise at the cut; either way it is charged
        for _ in guard_llm(llm(server, "drop-stream"), other).stream_chat(hi()):
            pass
    result = other.finish()  # settled, never left open (LiteLLM may count a cut stream itself)
    assert result.turns == 1 and result.used_tokens > 0 and other.stats().reserved_tokens == 0


def test_function_agent_calls_and_tools_are_guarded(server):
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    from budgetlens.guard.adapters.llama_index import guard_llama_agent

    async def main(run, model="gpt-4o-mini"):
        agent = FunctionAgent(tools=[FunctionTool.from_defaults(read_file)], llm=llm(server, model))
        guard_llama_agent(agent, run)
        return await agent.run("Fix the failing test")

    with RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(main(run))
    assert run.result.turns == 2 and run.result.tool_calls == 1
    assert run.result.usage_status == USAGE_REPORTED and run.result.used_tokens == 2 * (
        INPUT_TOKENS + OUTPUT_TOKENS
    )
    with pytest.raises(Exception), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as stopped:  # noqa: B017
        asyncio.run(main(stopped))
    assert stopped.result.tool_calls == 0 and stopped.result.stop_reason == STOP_BUDGET_TOOLS


def test_a_function_agent_out_of_budget_answers_from_the_wrap_up_slice(server):
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Call 1 reserves its
    # prompt + 1,000 (the LLM's max_tokens) and uses 1,200 + 300 = 1,500; call 2 (prompt + 1,000)
    # no longer fits the 500 left: it is the final call, without tools, capped at 1,000 (< the
    # 1,500 - prompt the slice leaves), and the run stops with budget_wrap_up after it.
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    from budgetlens.guard.adapters.llama_index import guard_llama_agent

    async def main(run):
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(read_file)], llm=llm(server, max_tokens=1_000)
        )
        guard_llama_agent(agent, run)
        return await agent.run("Fix the failing test")

    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    before = len(server.requests)
    answer = asyncio.run(main(run))
    bodies = [body for _, body in server.requests[before:]]
    assert "Done." in str(answer)
    assert [b["max_tokens"] for b in bodies] == [1_000, 1_000]
    assert [("tools" in b) for b in bodies] == [True, False]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and result.turns == 2 and result.tool_calls == 1
    assert result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS)
