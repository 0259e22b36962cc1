"""Microsoft Agent Framework under a budget (issue 20): the real ``agent-framework-core`` and
``agent-framework-openai`` packages against the local server (no network)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from _adapter_helpers import CALL
from conftest import require

from budgetlens import BudgetExceeded, RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION

# agent-framework takes seconds to import: the tests import it where they use it, not at collection
require("agent_framework", "agent_framework_openai")

pytestmark = pytest.mark.system  # each test starts an HTTP server


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def client(server, model="gpt-4o-mini"):
    from agent_framework.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(model=model, base_url=server.openai_url, api_key="test")


def agent(server, run, model="gpt-4o-mini", **kwargs):
    from agent_framework import Agent

    from budgetlens.guard.adapters.agent_framework import budget_middleware

    return Agent(
        client=client(server, model),
        instructions="Fix bugs.",
        tools=[read_file],
        middleware=budget_middleware(run),
        **kwargs,
    )


def test_agent_run_is_reserved_recorded_and_its_tools_counted(server):
    with RunBudget(max_total_tokens=50_000) as run:
        reply = asyncio.run(agent(server, run).run("Fix the failing test"))
    assert reply.text == "Done."
    assert (run.result.turns, run.result.tool_calls, run.result.usage) == (2, 1, CALL + CALL)
    assert run.result.usage_status == sc.USAGE_REPORTED
    body = server.requests[-1][1]
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 4096


def test_streamed_run_is_recorded(server):
    async def main(run):
        async for _ in agent(server, run).run("Fix the failing test", stream=True):
            pass

    with RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(main(run))
    assert run.result.turns == 2 and run.result.tool_calls == 1
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert run.result.usage == CALL + CALL and run.result.usage_status == sc.USAGE_REPORTED


def test_stream_without_usage_is_unknown(server):
    from agent_framework import Agent

    from budgetlens.guard.adapters.agent_framework import budget_middleware

    async def main(run):
        async for _ in Agent(client=client(server, "drop-stream"), middleware=budget_middleware(run)).run(
            "hi", stream=True
        ):
            pass

    # a cut stream may raise; either way the call is charged
    with RunBudget(max_total_tokens=50_000) as run, contextlib.suppress(Exception):
        asyncio.run(main(run))
    assert (
        run.result.usage_status == sc.USAGE_UNKNOWN and run.result.used_tokens > 0 and run.result.turns == 1
    )


def test_refused_before_sending_and_parallel_tools_over_the_limit(server):
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=1_000) as run:
        asyncio.run(agent(server, run, default_options={"max_tokens": 2_000}).run("go"))
    assert len(server.requests) == sent and run.result.stop_reason == sc.STOP_BUDGET_TOKENS
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=50_000, max_tool_calls=2) as stopped:
        asyncio.run(agent(server, stopped, "parallel-gpt").run("go"))
    assert stopped.result.stop_reason == sc.STOP_BUDGET_TOOLS


def test_status_error_releases_and_sub_agent_is_charged(server):
    from agent_framework import Agent

    from budgetlens.guard.adapters.agent_framework import budget_middleware

    run = RunBudget(max_total_tokens=50_000)
    with pytest.raises(Exception):  # noqa: B017 - the framework's own error type
        asyncio.run(agent(server, run, "error-500").run("go"))
    assert run.stats().turns == 0 and run.stats().reserved_tokens == 0
    with RunBudget(max_total_tokens=50_000) as charged:
        reader = Agent(
            client=client(server), name="reader", instructions="read", middleware=budget_middleware(charged)
        )
        lead = Agent(
            client=client(server),
            instructions="delegate",
            tools=[reader.as_tool()],
            middleware=budget_middleware(charged),
        )
        asyncio.run(lead.run("go"))
    assert charged.result.turns == 3 and charged.result.tool_calls == 1


def test_an_agent_out_of_budget_answers_from_the_wrap_up_slice(server):
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Call 1 reserves its
    # prompt + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500; call 2 (prompt + 1,000) does not
    # fit the 500 left: it is the final call, without tools, capped at 1,000 (below the
    # 1,500 - prompt the slice leaves), and the run stops with budget_wrap_up after it.
    before = len(server.requests)
    with RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000) as run:
        reply = asyncio.run(
            agent(server, run, default_options={"max_tokens": 1_000}).run("Fix the failing test")
        )
    assert reply.text == "Done."
    bodies = [body for _, body in server.requests[before:]]
    assert [b.get("max_tokens", b.get("max_completion_tokens")) for b in bodies] == [1_000, 1_000]
    assert [("tools" in b) for b in bodies] == [True, False]
    last = bodies[-1]["messages"][-1]
    assert last["role"] == "user" and WRAP_UP_INSTRUCTION in str(last["content"])
    assert run.result.stop_reason == sc.STOP_BUDGET_WRAP_UP
    assert (run.result.turns, run.result.tool_calls, run.result.usage) == (2, 1, CALL + CALL)
