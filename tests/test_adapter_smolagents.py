"""smolagents under a budget (issue 20): the real ``smolagents`` package with its OpenAI model
against the local server (no network)."""

from __future__ import annotations

import pytest

pytest.importorskip("smolagents")

from llm_server import CACHED_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS
from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.utils import AgentGenerationError

from budgetlens import RunBudget, Usage
from budgetlens.guard.adapters.smolagents import guard_smolagent
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, USAGE_REPORTED, USAGE_UNKNOWN

pytestmark = pytest.mark.system  # each test starts an HTTP server

CALL = Usage(INPUT_TOKENS, OUTPUT_TOKENS, cache_read_tokens=CACHED_TOKENS, reasoning_tokens=REASONING_TOKENS)


@tool
def read_file(path: str) -> str:
    """Read a file of the repository.

    Args:
        path: the file's path.
    """
    return "def f(): ..."


def agent(server, name="gpt-4o-mini", **kwargs):
    model = OpenAIServerModel(model_id=name, api_base=server.openai_url, api_key="test")
    return ToolCallingAgent(tools=[read_file], model=model, max_steps=4, verbosity_level=0, **kwargs)


def test_tool_calling_agent_is_reserved_recorded_and_its_tools_counted(server):
    with RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(agent(server), run).run("Fix the failing test")
    assert (run.result.turns, run.result.tool_calls) == (2, 1)  # final_answer is not a tool call
    assert run.result.usage == CALL + CALL and run.result.usage_status == USAGE_REPORTED
    assert server.requests[-1][1]["max_tokens"] == 4096


def test_refusal_before_the_call_is_wrapped_by_smolagents_and_still_the_budget_stop(server):
    a = agent(server)
    a.model.kwargs["max_tokens"] = 2_000
    sent = len(server.requests)
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=1_000) as run:
        guard_smolagent(a, run).run("go")
    assert len(server.requests) == sent and run.result.stop_reason == STOP_BUDGET_TOKENS
    assert not run.result.retryable


def test_a_tool_refusal_smolagents_hands_to_the_model_stops_the_run_at_the_next_call(server):
    sent = len(server.requests)
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as run:
        guard_smolagent(agent(server), run).run("go")
    assert len(server.requests) - sent == 1  # the call asking for the tool; none after the refusal
    assert run.result.stop_reason == STOP_BUDGET_TOOLS and run.result.tool_calls == 0


def test_managed_sub_agent_calls_are_charged_to_the_run(server):
    sub = agent(server)
    sub.name, sub.description = "reader", "Reads files of the repository."
    lead = ToolCallingAgent(
        tools=[],
        managed_agents=[sub],
        model=OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.openai_url, api_key="test"),
        max_steps=4,
        verbosity_level=0,
    )
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(lead, run).run("go")
    calls = len(server.requests) - sent
    # lead: reader + final_answer; reader: read_file + final_answer; 2 tool calls (reader, read_file)
    assert calls == 4 and run.result.turns == calls and run.result.tool_calls == 2
    assert run.result.used_tokens == calls * (INPUT_TOKENS + OUTPUT_TOKENS)


def test_a_failed_call_without_status_is_unknown(server):
    a = agent(server)
    a.model.client.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    a.model.client.max_retries = 0
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(a, run).run("go")
    assert run.result.usage_status == USAGE_UNKNOWN and run.result.used_tokens > 0


def test_streamed_steps_are_recorded_from_the_deltas_usage(server):
    with RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(agent(server, stream_outputs=True), run).run("Fix the failing test")
    assert server.requests[-1][1]["stream"] is True
    assert run.result.turns == 2 and run.result.usage_status == USAGE_REPORTED
    assert run.result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS)
