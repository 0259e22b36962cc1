"""Anthropic task budgets (issue 21 item 5): the run's total and remaining tokens as the provider's
own budget hint, sent by the real Anthropic SDK to the local test server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _adapter_helpers import MESSAGES
from conftest import require

from budgetlens import RunBudget, Usage
from budgetlens.guard.task_budget import (
    ANTHROPIC_TASK_BUDGETS_BETA,
    add_anthropic_task_budget,
    anthropic_task_budget,
)


def test_the_task_budget_is_the_total_limit_and_what_is_left_of_it():
    run = RunBudget(max_total_tokens=64_000)
    assert anthropic_task_budget(run) == {"type": "tokens", "total": 64_000, "remaining": 64_000}
    res = run.reserve(10_000)
    run.record(Usage(8_000, 2_000), reservation=res)
    run.reserve(4_000)  # open: counted as taken
    assert anthropic_task_budget(run) == {"type": "tokens", "total": 64_000, "remaining": 50_000}
    assert anthropic_task_budget(RunBudget(max_cost_usd=1.0)) is None  # no token limit: no hint


def test_a_request_keeps_its_own_task_budget_and_other_betas():
    run = RunBudget(max_total_tokens=10_000)
    own = {"output_config": {"task_budget": {"type": "tokens", "total": 5}}}
    add_anthropic_task_budget(own, run, beta=True)
    assert own == {"output_config": {"task_budget": {"type": "tokens", "total": 5}}}
    kwargs = {"betas": ["other-beta"], "output_config": {"effort": "high"}}
    add_anthropic_task_budget(kwargs, run, beta=True)
    assert kwargs["betas"] == ["other-beta", ANTHROPIC_TASK_BUDGETS_BETA]
    assert kwargs["output_config"]["effort"] == "high"
    plain = {"extra_headers": {"anthropic-beta": "other-beta"}}
    add_anthropic_task_budget(plain, run, beta=False)
    assert plain["extra_headers"]["anthropic-beta"] == f"other-beta,{ANTHROPIC_TASK_BUDGETS_BETA}"


@pytest.mark.system
def test_wrap_anthropic_sends_the_task_budget_through_the_real_sdk():
    require("anthropic")
    import anthropic

    from budgetlens.guard.adapters import wrap_anthropic

    sys.path.insert(0, str(Path(__file__).parent / "examples"))
    from llm_server import INPUT_TOKENS, OUTPUT_TOKENS, LLMServer

    run = RunBudget(max_total_tokens=50_000)
    with LLMServer() as server:
        raw = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0)
        client = wrap_anthropic(raw, run, task_budget=True)
        client.beta.messages.create(model="claude-opus-4-7", max_tokens=200, messages=MESSAGES)
        first = server.requests[-1][1]["output_config"]["task_budget"]
        assert server.beta_headers[-1] is not None and ANTHROPIC_TASK_BUDGETS_BETA in server.beta_headers[-1]
        client.messages.create(model="claude-opus-4-7", max_tokens=200, messages=MESSAGES)
        second = server.requests[-1][1]["output_config"]["task_budget"]
        assert ANTHROPIC_TASK_BUDGETS_BETA in (server.beta_headers[-1] or "")
        plain = wrap_anthropic(raw, RunBudget(max_total_tokens=50_000))
        plain.messages.create(model="claude-opus-4-7", max_tokens=200, messages=MESSAGES)
        assert "output_config" not in server.requests[-1][1]  # opt-in
    assert first == {"type": "tokens", "total": 50_000, "remaining": 50_000}
    assert second == {"type": "tokens", "total": 50_000, "remaining": 50_000 - INPUT_TOKENS - OUTPUT_TOKENS}
