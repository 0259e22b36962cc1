"""smolagents under a budget (issue 20): the real ``smolagents`` package with its OpenAI model
against the local server (no network)."""

from __future__ import annotations

import pytest
from _adapter_helpers import CALL
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS

from budgetlens import RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.adapters._wrap_up import FINAL_ANSWER_INSTRUCTION

require("smolagents")  # its tests import it; under CI=true a missing framework fails

pytestmark = pytest.mark.system  # each test starts an HTTP server


def read_file(path: str) -> str:
    """Read a file of the repository.

    Args:
        path: the file's path.
    """
    return "def f(): ..."


def read_file_tool():
    """``read_file`` as a smolagents tool."""
    from smolagents import tool

    return tool(read_file)


def agent(server, name="gpt-4o-mini", **kwargs):
    from smolagents import OpenAIServerModel, ToolCallingAgent

    model = OpenAIServerModel(model_id=name, api_base=server.openai_url, api_key="test")
    return ToolCallingAgent(tools=[read_file_tool()], model=model, max_steps=4, verbosity_level=0, **kwargs)


def test_tool_calling_agent_is_reserved_recorded_and_its_tools_counted(server):
    from budgetlens.guard.adapters.smolagents import guard_smolagent

    with RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(agent(server), run).run("Fix the failing test")
    assert (run.result.turns, run.result.tool_calls) == (2, 1)  # final_answer is not a tool call
    assert run.result.usage == CALL + CALL and run.result.usage_status == sc.USAGE_REPORTED
    assert server.requests[-1][1]["max_tokens"] == 4096


def test_refusal_before_the_call_is_wrapped_by_smolagents_and_still_the_budget_stop(server):
    from smolagents.utils import AgentGenerationError

    from budgetlens.guard.adapters.smolagents import guard_smolagent

    a = agent(server)
    a.model.kwargs["max_tokens"] = 2_000
    sent = len(server.requests)
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=1_000) as run:
        guard_smolagent(a, run).run("go")
    assert len(server.requests) == sent and run.result.stop_reason == sc.STOP_BUDGET_TOKENS
    assert not run.result.retryable


def test_a_tool_refusal_smolagents_hands_to_the_model_stops_the_run_at_the_next_call(server):
    from smolagents.utils import AgentGenerationError

    from budgetlens.guard.adapters.smolagents import guard_smolagent

    sent = len(server.requests)
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as run:
        guard_smolagent(agent(server), run).run("go")
    assert len(server.requests) - sent == 1  # the call asking for the tool; none after the refusal
    assert run.result.stop_reason == sc.STOP_BUDGET_TOOLS and run.result.tool_calls == 0


def test_managed_sub_agent_calls_are_charged_to_the_run(server):
    from smolagents import OpenAIServerModel, ToolCallingAgent

    from budgetlens.guard.adapters.smolagents import guard_smolagent

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
    from smolagents.utils import AgentGenerationError

    from budgetlens.guard.adapters.smolagents import guard_smolagent

    a = agent(server)
    a.model.client.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    a.model.client.max_retries = 0
    with pytest.raises(AgentGenerationError), RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(a, run).run("go")
    assert run.result.usage_status == sc.USAGE_UNKNOWN and run.result.used_tokens > 0


def test_streamed_steps_are_recorded_from_the_deltas_usage(server):
    from budgetlens.guard.adapters.smolagents import guard_smolagent

    with RunBudget(max_total_tokens=50_000) as run:
        guard_smolagent(agent(server, stream_outputs=True), run).run("Fix the failing test")
    assert server.requests[-1][1]["stream"] is True
    assert run.result.turns == 2 and run.result.usage_status == sc.USAGE_REPORTED
    assert run.result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS)


# --- the wrap-up slice (issue 21) -----------------------------------------------------------------
def _wrap_up_run():
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Prompts count 500
    # (count_tokens). Call 1 reserves 500 + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500,
    # asking for read_file; call 2 (1,500) does not fit the 500 left: it is the final call, capped
    # at 1,000 (the least of max_tokens and the 3,000 - 1,500 - 500 the slice leaves)
    return RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)


def _prompt_of_500(request):
    return 500


def _final_body(bodies):
    assert [b["max_tokens"] for b in bodies] == [1_000, 1_000]
    last = bodies[-1]["messages"][-1]
    assert last["role"] == "user" and FINAL_ANSWER_INSTRUCTION in str(last["content"])
    return bodies[-1]


def _wrapped_up(run):
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_WRAP_UP and result.turns == 2 and result.tool_calls == 1
    assert result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS) == 3_000


@pytest.mark.parametrize("stream_outputs", [False, True])
def test_a_tool_calling_agent_out_of_budget_answers_through_final_answer_alone(server, stream_outputs):
    # the final call offers final_answer alone; the server calls it with {"answer": "a.py"}
    from budgetlens.guard.adapters.smolagents import guard_smolagent

    run = _wrap_up_run()
    a = agent(server, stream_outputs=stream_outputs)
    a.model.kwargs["max_tokens"] = 1_000
    before = len(server.requests)
    answer = guard_smolagent(a, run, count_tokens=_prompt_of_500).run("Fix the failing test")
    bodies = [body for _, body in server.requests[before:]]
    assert answer == "a.py"
    assert [sorted(t["function"]["name"] for t in b["tools"]) for b in bodies] == [
        ["final_answer", "read_file"],
        ["final_answer"],
    ]
    _final_body(bodies)
    _wrapped_up(run)


def test_a_code_agent_out_of_budget_takes_the_final_text_as_its_answer(server):
    # a CodeAgent has no tool definitions in its request; the server answers the final call with
    # "Done." and no code block, which becomes final_answer("Done."): the run's answer
    from smolagents import CodeAgent, OpenAIServerModel

    from budgetlens.guard.adapters.smolagents import guard_smolagent

    model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=server.openai_url, api_key="test")
    model.kwargs["max_tokens"] = 1_000
    a = CodeAgent(tools=[read_file_tool()], model=model, max_steps=4, verbosity_level=0)
    run = _wrap_up_run()
    guard_smolagent(a, run, count_tokens=_prompt_of_500)
    # step 1 without a tool offered answers text too: read_file is called from code instead
    first = a.model.generate
    calls: list[str] = []

    def scripted(messages, **kwargs):
        message = first(messages, **kwargs)
        if not calls:
            message.content = "<code>\nprint(read_file('a.py'))\n</code>"
        calls.append(message.content)
        return message

    a.model.generate = scripted
    before = len(server.requests)
    assert a.run("Fix the failing test") == "Done."
    bodies = [body for _, body in server.requests[before:]]
    assert "tools" not in _final_body(bodies)
    assert "final_answer('Done.')" in calls[-1]
    _wrapped_up(run)
