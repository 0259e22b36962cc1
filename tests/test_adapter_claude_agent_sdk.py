"""The Claude Agent SDK under a budget (issue 20): the real ``claude-agent-sdk`` package and the
Claude Code CLI it ships, pointed at the local server (``ANTHROPIC_BASE_URL``; no network)."""

from __future__ import annotations

import asyncio

import pytest
from _adapter_helpers import ANTHROPIC_CALL
from conftest import require

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_BUDGET_TOOLS, STOP_BUDGET_TURNS, USAGE_REPORTED

require("claude_agent_sdk")  # its tests import it; under CI=true a missing framework fails

pytestmark = pytest.mark.system  # each test starts an HTTP server and the Claude Code CLI


def options(server, tmp_path, **kwargs):
    from claude_agent_sdk import ClaudeAgentOptions

    (tmp_path / "a.py").write_text("def f(): ...\n")
    env = {
        "ANTHROPIC_BASE_URL": server.anthropic_url,
        "ANTHROPIC_API_KEY": "test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return ClaudeAgentOptions(
        model="claude-haiku-4-5", tools=["Read"], allowed_tools=["Read"], cwd=str(tmp_path), env=env, **kwargs
    )


def session(budget, opts, prompt="Read a.py and fix it"):
    async def main():
        return [m async for m in budget.query(prompt=prompt, options=opts)]  # the budget's two lines

    return asyncio.run(asyncio.wait_for(main(), 180))


def test_session_usage_cost_and_tool_calls_are_recorded(server, tmp_path):
    from claude_agent_sdk import ResultMessage

    from budgetlens.guard.adapters.claude_agent_sdk import ClaudeBudget

    with RunBudget(max_total_tokens=50_000) as run:
        budget = ClaudeBudget(run)
        messages = session(budget, options(server, tmp_path))
    result = next(m for m in messages if isinstance(m, ResultMessage))
    assert run.result.usage == ANTHROPIC_CALL + ANTHROPIC_CALL  # two model calls, one per turn
    assert run.result.tool_calls == 1 and run.result.usage_status == USAGE_REPORTED
    assert budget.num_turns == result.num_turns == 2 and budget.total_cost_usd == result.total_cost_usd > 0
    assert run.result.cost_usd == pytest.approx(result.total_cost_usd, rel=0.01)


def test_max_turns_is_mapped_and_its_stop_is_a_budget_stop(server, tmp_path):
    from budgetlens.guard.adapters.claude_agent_sdk import ClaudeBudget

    opts = options(server, tmp_path, max_turns=10)
    budget = ClaudeBudget(RunBudget(max_turns=1))
    assert budget.options(opts).max_turns == 1
    with pytest.raises(BudgetExceeded), RunBudget(max_turns=1) as run:
        session(ClaudeBudget(run), opts)
    assert run.result.stop_reason == STOP_BUDGET_TURNS


def test_a_tool_call_over_the_limit_is_denied_and_stops_the_session(server, tmp_path):
    from budgetlens.guard.adapters.claude_agent_sdk import ClaudeBudget

    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=50_000, max_tool_calls=0) as run:
        session(ClaudeBudget(run), options(server, tmp_path))
    assert run.result.stop_reason == STOP_BUDGET_TOOLS and run.result.tool_calls == 0


def test_a_spent_budget_starts_no_session(server, tmp_path):
    from budgetlens.guard.adapters.claude_agent_sdk import ClaudeBudget

    run = RunBudget(max_total_tokens=1_000)
    run.record(Usage(900, 200))
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded) as info:
        session(ClaudeBudget(run), options(server, tmp_path))
    assert info.value.reason == STOP_BUDGET_TOKENS and len(server.requests) == sent


def test_cost_left_is_mapped_to_max_budget_usd():
    from claude_agent_sdk import ClaudeAgentOptions

    from budgetlens.guard.adapters.claude_agent_sdk import ClaudeBudget

    run = RunBudget(max_cost_usd=0.5)
    run.record(Usage(100_000, 10_000), "claude-haiku-4-5")
    spent = run.stats().cost_usd
    assert ClaudeBudget(run).options().max_budget_usd == pytest.approx(0.5 - spent)
    assert ClaudeBudget(run).options(ClaudeAgentOptions(max_budget_usd=0.01)).max_budget_usd == 0.01
