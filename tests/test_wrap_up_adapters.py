"""The wrap-up slice through the drop-in adapters (issue 21 item 1): an agent that runs out of
budget gets a final answer from the slice and a stop reason, against a local HTTP server."""

from __future__ import annotations

import pytest
from _adapter_helpers import ANTHROPIC_TOOLS, TOOLS
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS

from budgetlens import BudgetExceeded, RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION

# the SDKs take seconds to import: the tests import them where they use them
require("openai", "anthropic")

pytestmark = pytest.mark.system  # each test starts an HTTP server

PROMPT = 100  # count_tokens: every request's prompt counts 100 tokens


def _agent(create, answer_of, tools):
    """A tool loop: call, and while the model asks for a tool, go on; returns the final answer."""
    messages = [{"role": "user", "content": "Fix the failing test"}]
    for _ in range(10):
        try:
            reply = create(messages=messages, tools=tools)
        except BudgetExceeded:
            return None
        answer = answer_of(reply)
        if answer is not None:
            return answer
        messages.append({"role": "user", "content": "go on"})
    raise AssertionError("the agent never answered")


def _expected_calls():
    # max_total_tokens 4,000 with a 1,000-token slice: ordinary room 3,000. Each call uses
    # 1,200 + 300 = 1,500 tokens. Call 1 reserves 100 + 2,900 (the ordinary output left); call 2
    # 100 + 1,400 and fits exactly (1,500 + 1,500 = 3,000); call 3 has no ordinary room left: it is
    # the final call, capped at 4,000 - 3,000 - 100 = 900 output tokens.
    assert INPUT_TOKENS + OUTPUT_TOKENS == 1_500
    return [2_900, 1_400, 900]


def test_openai_agent_out_of_budget_answers_from_the_slice(server):
    import openai

    from budgetlens.guard.adapters import wrap_openai

    run = RunBudget(max_total_tokens=4_000, wrap_up_tokens=1_000)
    client = wrap_openai(
        openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0),
        run,
        count_tokens=lambda kwargs: PROMPT,
    )
    before = len(server.requests)
    answer = _agent(
        lambda **kw: client.chat.completions.create(model="gpt-4o-mini", **kw),
        lambda reply: None if reply.choices[0].message.tool_calls else reply.choices[0].message.content,
        TOOLS,
    )
    bodies = [body for _, body in server.requests[before:]]
    assert answer == "Done."
    assert [b["max_completion_tokens"] for b in bodies] == _expected_calls()
    assert [("tools" in b) for b in bodies] == [True, True, False]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_WRAP_UP and result.turns == 3


def test_anthropic_agent_out_of_budget_answers_from_the_slice(server):
    import anthropic

    from budgetlens.guard.adapters import wrap_anthropic

    run = RunBudget(max_total_tokens=4_000, wrap_up_tokens=1_000)
    client = wrap_anthropic(
        anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0),
        run,
        count_tokens=lambda kwargs: PROMPT,
    )
    before = len(server.requests)

    def answer_of(reply):
        if any(block.type == "tool_use" for block in reply.content):
            return None
        return "".join(block.text for block in reply.content if block.type == "text")

    answer = _agent(
        lambda **kw: client.messages.create(model="claude-haiku-4-5", **kw), answer_of, ANTHROPIC_TOOLS
    )
    bodies = [body for _, body in server.requests[before:]]
    assert answer == "Done."
    assert [b["max_tokens"] for b in bodies] == _expected_calls()
    assert [("tools" in b) for b in bodies] == [True, True, False]
    last = bodies[-1]["messages"][-1]
    assert last["role"] == "user" and last["content"][-1] == {"type": "text", "text": WRAP_UP_INSTRUCTION}
    assert run.finish().stop_reason == sc.STOP_BUDGET_WRAP_UP


def test_litellm_agent_out_of_budget_answers_from_the_slice(server):
    require("litellm")
    from budgetlens.guard.adapters.litellm_sdk import GuardedLiteLLM

    run = RunBudget(max_total_tokens=4_000, wrap_up_tokens=1_000)
    llm = GuardedLiteLLM(run, count_tokens=lambda kwargs: PROMPT)
    before = len(server.requests)
    answer = _agent(
        lambda **kw: llm.completion(
            model="openai/gpt-4o-mini",
            api_base=server.openai_url,
            api_key="test",
            parallel_tool_calls=False,
            **kw,
        ),
        lambda reply: None if reply.choices[0].message.tool_calls else reply.choices[0].message.content,
        TOOLS,
    )
    bodies = [body for _, body in server.requests[before:]]
    assert answer == "Done."
    assert [b["max_tokens"] for b in bodies] == _expected_calls()
    assert [("tools" in b) for b in bodies] == [True, True, False]
    assert "parallel_tool_calls" not in bodies[-1]  # not allowed without tools
    last = bodies[-1]["messages"][-1]
    assert last["role"] == "user" and WRAP_UP_INSTRUCTION in str(last["content"])
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_WRAP_UP and result.turns == 3


def test_the_countdown_notice_reaches_the_next_request(server):
    # 1,500 tokens per call under 3,000: after call 1, 50 % left, 1,500 // 1,500 = 1 turn
    import anthropic

    from budgetlens.guard.adapters import wrap_anthropic

    run = RunBudget(max_total_tokens=3_000, countdown_at=(0.5,))
    client = wrap_anthropic(
        anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0), run
    )
    messages = [{"role": "user", "content": "Fix the failing test"}]
    client.messages.create(model="claude-haiku-4-5", messages=messages, max_tokens=100)
    client.messages.create(model="claude-haiku-4-5", messages=messages, max_tokens=100)
    first, second = (body for _, body in server.requests[-2:])
    assert first["messages"] == messages
    assert second["messages"][-1]["content"] == [
        {"type": "text", "text": "Fix the failing test"},
        {"type": "text", "text": "budget: 50 % left, about 1 turn"},
    ]
