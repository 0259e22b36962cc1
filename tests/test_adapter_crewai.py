"""CrewAI under a budget (issue 20): the real ``crewai`` package (its native OpenAI LLM pointed at
the local server; no network) with ``CrewBudget``. CrewAI pins openai<3, so this file runs in a
venv of its own (``.venv-crewai``, built by ``.ci/test``); elsewhere it is skipped, but never
under CI."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # offline: no telemetry upload
try:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
except ImportError:
    if os.environ.get("CI") == "true":
        raise  # .ci/test runs this file in .venv-crewai: crewai must import there
    pytest.skip(
        "crewai not importable (it pins openai<3, beside the test env's openai 3): "
        ".ci/test runs this file in .venv-crewai",
        allow_module_level=True,
    )

from _adapter_helpers import CALL
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.guard.adapters.crewai import BudgetHookAborted, CrewBudget, crew_usage
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, USAGE_REPORTED, USAGE_UNKNOWN

pytestmark = pytest.mark.system  # each test starts an HTTP server

PER_CALL = INPUT_TOKENS + OUTPUT_TOKENS


@tool("read_file")
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def llm(server, name="gpt-4o-mini", **extra):
    return LLM(model=f"openai/{name}", base_url=server.openai_url, api_key="test", max_retries=0, **extra)


def crew(server, *, tools=(), agents=1, **llm_extra):
    members = [
        Agent(
            role=f"fixer {i}",
            goal="Fix bugs",
            backstory="A developer.",
            llm=llm(server, **llm_extra),
            tools=list(tools),
        )
        for i in range(agents)
    ]
    tasks = [Task(description="Fix the failing test", expected_output="a fix", agent=a) for a in members]
    return Crew(agents=members, tasks=tasks)


def test_crew_calls_are_reserved_capped_recorded_and_tools_counted(server):
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run, CrewBudget(run):  # the budget's two lines
        assert str(crew(server, tools=[read_file]).kickoff()) == "Done."
    assert len(server.requests) - sent == 2
    assert all(body["max_tokens"] == 4096 for _, body in server.requests[sent:])  # the cap was sent
    assert (run.result.turns, run.result.tool_calls) == (2, 1)
    assert run.result.usage == CALL + CALL and run.result.used_tokens == 2 * PER_CALL
    assert run.result.usage_status == USAGE_REPORTED and run.result.cost_usd > 0


def test_call_that_does_not_fit_is_refused_before_it_is_sent(server):
    sent = len(server.requests)
    with pytest.raises(BudgetHookAborted) as info, RunBudget(max_total_tokens=1_000) as run, CrewBudget(run):
        crew(server, max_tokens=2_000).kickoff()
    assert isinstance(info.value.__cause__, BudgetExceeded)  # CrewAI lets only HookAborted through
    assert len(server.requests) == sent and run.result.stop_reason == STOP_BUDGET_TOKENS


def test_tool_call_over_max_tool_calls_is_a_budget_stop(server):
    sent = len(server.requests)
    with (
        pytest.raises(BudgetHookAborted),
        RunBudget(max_total_tokens=50_000, max_tool_calls=0) as run,
        CrewBudget(run),
    ):
        crew(server, tools=[read_file]).kickoff()
    assert run.result.stop_reason == STOP_BUDGET_TOOLS and run.result.tool_calls == 0
    assert len(server.requests) - sent == 1 and run.result.usage_status == USAGE_REPORTED


def test_direct_llm_calls_and_streams_are_guarded(server):
    with RunBudget(max_total_tokens=50_000) as run, CrewBudget(run):
        assert llm(server).call("Fix the failing test") == "Done."
        assert llm(server, stream=True).call("Fix the failing test") == "Done."
        assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert run.result.turns == 2 and run.result.usage == CALL + CALL
    assert run.result.usage_status == USAGE_REPORTED


def test_every_agent_of_the_crew_is_charged_to_the_run(server):
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run, CrewBudget(run):
        crew(server, agents=2, tools=[read_file]).kickoff()
    calls = len(server.requests) - sent
    assert calls == 4 and run.result.turns == 4 and run.result.tool_calls == 2
    assert run.result.used_tokens == 4 * PER_CALL


def test_status_error_is_released_and_a_cut_stream_is_unknown_and_charged(server):
    sent = len(server.requests)
    with (
        pytest.raises(Exception, match="429"),  # the SDK's RateLimitError, through CrewAI
        RunBudget(max_total_tokens=50_000) as run,
        CrewBudget(run),
    ):
        llm(server, "error-429").call("Fix the failing test")
    assert len(server.requests) > sent  # CrewAI's own retries, each reserved and released
    assert run.result.turns == 0 and run.result.used_tokens == 0 and run.stats().reserved_tokens == 0
    with RunBudget(max_total_tokens=50_000) as cut, CrewBudget(cut):
        llm(server, "drop-stream", stream=True, max_tokens=500).call("Fix the failing test")
    assert cut.result.turns == 1 and cut.result.usage_status == USAGE_UNKNOWN
    assert cut.result.used_tokens > 500  # charged its reservation (prompt + cap), never 0


def test_hooks_are_removed_when_the_budget_exits(server):
    run = RunBudget(max_total_tokens=1_000)
    with CrewBudget(run):
        pass
    assert llm(server, max_tokens=2_000).call("Fix the failing test") == "Done."  # unguarded now
    assert run.finish().turns == 0


def test_crew_usage_shapes():
    assert crew_usage({"total_tokens": 0}) is None  # CrewAI's report of a response without usage
    assert crew_usage(None) is None
    usage = crew_usage({"prompt_tokens": 10, "completion_tokens": 5, "cached_prompt_tokens": 4})
    assert usage == Usage(10, 5, cache_read_tokens=4)
    with pytest.raises(ValueError, match="prompt_tokens"):
        crew_usage({"prompt_tokens": -1, "completion_tokens": 5})


# --- the wrap-up slice (issue 21) -----------------------------------------------------------------
def test_a_crew_out_of_budget_answers_from_the_wrap_up_slice(server):
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Prompts count 500
    # (count_tokens). Call 1 reserves 500 + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500,
    # asking for read_file; call 2 (1,500) does not fit the 500 left: it is the final call, sent
    # without tools, the instruction last, capped at 1,000; its "Done." is the crew's answer.
    from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
    from budgetlens.semconv import STOP_BUDGET_WRAP_UP

    before = len(server.requests)
    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    with CrewBudget(run, count_tokens=lambda messages: 500):
        answer = str(crew(server, tools=[read_file], max_tokens=1_000).kickoff())
    bodies = [body for _, body in server.requests[before:]]
    assert answer == "Done."
    assert [b["max_tokens"] for b in bodies] == [1_000, 1_000]
    assert [bool(b.get("tools")) for b in bodies] == [True, False]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and result.turns == 2 and result.tool_calls == 1
    assert result.used_tokens == 2 * PER_CALL == 3_000
