"""Drop-in adapters (issue 13): the real OpenAI, Anthropic, Agents SDK and LangChain/LangGraph
packages against a local HTTP server that answers with recorded-shape responses (no network)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from _adapter_helpers import ANTHROPIC_CALL, CALL, MESSAGES, anthropic_client, openai_client
from conftest import require

from budgetlens import BudgetExceeded, RunBudget
from budgetlens.semconv import STOP_BUDGET_TOKENS, STOP_COMPLETED, USAGE_REPORTED, USAGE_UNKNOWN

# the SDKs take seconds to import: the tests import them where they use them
require("openai", "anthropic")

pytestmark = pytest.mark.system  # each test starts an HTTP server


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --- OpenAI ------------------------------------------------------------------------------------
def test_chat_completion_is_reserved_with_an_output_cap_and_recorded(server):
    run = RunBudget(max_total_tokens=50_000)
    reply = openai_client(server, run).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert reply.choices[0].message.content == "Done."
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["max_completion_tokens"] == 4096
    stats = run.stats()
    assert (stats.usage, stats.turns, stats.reserved_tokens) == (CALL, 1, 0)


def test_chat_stream_asks_for_usage_and_records_it_when_exhausted(server):
    run = RunBudget(max_total_tokens=50_000)
    stream = openai_client(server, run).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, max_completion_tokens=500
    )
    assert run.stats().reserved_tokens > 500  # held while the stream runs
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Done."
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert run.stats().usage == CALL and run.stats().reserved_tokens == 0


def test_stream_cut_before_usage_is_unknown_and_charged_its_reservation(server):
    run = RunBudget(max_total_tokens=50_000)
    stream = openai_client(server, run).chat.completions.create(
        model="drop-stream", messages=MESSAGES, stream=True, max_completion_tokens=500
    )
    for _ in stream:
        pass
    result = run.finish()
    assert result.usage_status == USAGE_UNKNOWN and result.used_tokens > 500


def test_responses_plain_and_streamed_are_recorded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = openai_client(server, run)
    assert client.responses.create(model="gpt-4o-mini", input="hi").output_text == "Done."
    assert server.requests[-1][1]["max_output_tokens"] == 4096
    events = [e.type for e in client.responses.create(model="gpt-4o-mini", input="hi", stream=True)]
    assert events[-1] == "response.completed"
    assert run.stats().usage == CALL + CALL and run.stats().turns == 2


def test_async_chat_and_responses_streams_are_recorded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = openai_client(server, run, is_async=True)

    async def agent():
        await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        stream = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        async for _ in stream:
            pass
        stream = await client.responses.create(model="gpt-4o-mini", input="hi", stream=True)
        async for _ in stream:
            pass

    asyncio.run(agent())
    assert run.stats().usage == CALL + CALL + CALL and run.stats().reserved_tokens == 0


def test_call_that_does_not_fit_raises_before_it_is_sent(server):
    run = RunBudget(max_total_tokens=1_000)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded) as info:
        openai_client(server, run).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, max_completion_tokens=2_000
        )
    assert info.value.reason == STOP_BUDGET_TOKENS and info.value.requested > 2_000
    assert len(server.requests) == sent  # nothing reached the API
    assert run.finish().stop_reason == STOP_BUDGET_TOKENS


def test_request_without_a_cap_gets_the_output_left_after_its_prompt(server):
    run = RunBudget(max_total_tokens=2_000)
    openai_client(server, run).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    cap = server.requests[-1][1]["max_completion_tokens"]
    assert 1_900 < cap < 2_000  # 2,000 minus the prompt estimate, not the 4,096 default


def test_api_error_releases_the_reservation(server):
    import openai

    run = RunBudget(max_total_tokens=50_000)
    with pytest.raises(openai.InternalServerError):
        openai_client(server, run).chat.completions.create(model="error-500", messages=MESSAGES)
    stats = run.stats()
    assert (stats.used_tokens, stats.reserved_tokens, stats.turns) == (0, 0, 0)


def test_lost_connection_is_recorded_as_unknown_usage(server):
    import openai

    from budgetlens.guard.adapters import wrap_openai

    run = RunBudget(max_total_tokens=50_000)
    client = wrap_openai(openai.OpenAI(base_url=closed_port_url(), api_key="test", max_retries=0), run)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_completion_tokens=500)
    result = run.finish()
    assert result.usage_status == USAGE_UNKNOWN and result.used_tokens > 500 and result.turns == 1


def test_wrap_openai_rejects_another_client():
    from budgetlens.guard.adapters import wrap_openai

    with pytest.raises(ValueError, match="openai.OpenAI"):
        wrap_openai(object(), RunBudget())


# --- Anthropic ---------------------------------------------------------------------------------
def test_anthropic_messages_plain_streamed_and_stream_helper(server):
    run = RunBudget(max_total_tokens=50_000)
    client = anthropic_client(server, run)
    reply = client.messages.create(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES)
    assert reply.content[0].text == "Done."
    for _ in client.messages.create(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES, stream=True):
        pass
    with client.messages.stream(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES) as stream:
        assert stream.get_final_text() == "Done."
    stats = run.stats()
    assert stats.usage == ANTHROPIC_CALL + ANTHROPIC_CALL + ANTHROPIC_CALL and stats.reserved_tokens == 0


def test_anthropic_async_create_and_stream(server):
    run = RunBudget(max_total_tokens=50_000)
    client = anthropic_client(server, run, is_async=True)

    async def agent():
        await client.messages.create(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES)
        stream = await client.messages.create(
            model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES, stream=True
        )
        async for _ in stream:
            pass
        async with client.messages.stream(model="claude-haiku-4-5", max_tokens=512, messages=MESSAGES) as s:
            await s.get_final_text()

    asyncio.run(agent())
    assert run.stats().usage == ANTHROPIC_CALL + ANTHROPIC_CALL + ANTHROPIC_CALL


def test_anthropic_max_tokens_over_budget_raises_before_the_call_and_429_releases(server):
    import anthropic

    run = RunBudget(max_output_tokens=1_000)
    client = anthropic_client(server, run)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded):
        client.messages.create(model="claude-haiku-4-5", max_tokens=2_000, messages=MESSAGES)
    assert len(server.requests) == sent
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(model="error-429", max_tokens=100, messages=MESSAGES)
    assert run.stats().reserved_tokens == 0 and run.stats().turns == 0


# --- the examples (two added lines each) ---------------------------------------------------------
def load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"example_{name}", Path(__file__).parent / "examples" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openai_sdk_agent_example(server):
    result = load("openai_sdk_agent").run_agent(server.openai_url, "Fix the failing test")
    assert (result.stop_reason, result.turns, result.tool_calls) == (STOP_COMPLETED, 2, 1)
    assert result.usage == CALL + CALL and result.usage_status == USAGE_REPORTED


def test_anthropic_sdk_agent_example_is_stopped_before_the_call_that_does_not_fit(server):
    result = load("anthropic_sdk_agent").run_agent(server.anthropic_url, "Summarize", max_total_tokens=4_000)
    # each call uses 1,500 tokens and reserves ~1,100: the third would pass 4,000
    assert (result.stop_reason, result.turns, result.used_tokens) == (STOP_BUDGET_TOKENS, 2, 3_000)


def test_agents_sdk_hooks_reserve_record_and_count_tools(server):
    require("agents")
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    example = load("agents_sdk_agent")
    result = asyncio.run(example.run_agent(server.openai_url, "Fix the failing test"))
    assert (result.stop_reason, result.turns, result.tool_calls) == (STOP_COMPLETED, 2, 1)
    assert result.usage == CALL + CALL


def test_agents_sdk_budget_exceeded_propagates_out_of_the_runner(server):
    import openai

    require("agents")
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

    from budgetlens.guard.adapters import BudgetRunHooks

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    agent = Agent(name="a", instructions="x", model=OpenAIResponsesModel("gpt-4o-mini", client))
    agent.model_settings.max_tokens = 2_000
    run = RunBudget(max_total_tokens=1_000)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded):
        asyncio.run(Runner.run(agent, "hi", hooks=BudgetRunHooks(run)))
    assert len(server.requests) == sent


def test_langgraph_callback_handler_reserves_records_and_counts_tools(server):
    require("langgraph")
    require("langchain_openai")
    result = load("langgraph_agent").run_agent(server.openai_url, "Fix the failing test")
    assert (result.stop_reason, result.turns, result.tool_calls) == (STOP_COMPLETED, 2, 1)
    assert result.usage == CALL + CALL


def test_langchain_budget_exceeded_reaches_the_caller_before_the_call(server):
    require("langchain_openai")
    from langchain_openai import ChatOpenAI

    from budgetlens.guard.adapters import BudgetCallbackHandler

    run = RunBudget(max_total_tokens=1_000)
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_tokens=2_000)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded):
        llm.invoke("hi", config={"callbacks": [BudgetCallbackHandler(run)]})
    assert len(server.requests) == sent


@pytest.mark.parametrize(
    "name, last_line",
    [
        ("openai_sdk_agent", "completed 2 1 3000"),
        ("anthropic_sdk_agent", "budget_tokens 2 3000"),
        ("agents_sdk_agent", "completed 2 1 3000"),
        ("langgraph_agent", "completed 2 1 3000"),
    ],
)
def test_adapter_example_runs_as_a_script(python, name, last_line):
    import subprocess

    examples = Path(__file__).parent / "examples"
    proc = subprocess.run(
        [python, "-W", "ignore", str(examples / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=examples,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == last_line


def test_stream_dropped_unfinished_gives_up_its_reservation(server):
    import gc

    run = RunBudget(max_total_tokens=50_000)
    stream = openai_client(server, run).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, max_completion_tokens=500
    )
    next(iter(stream))
    del stream
    gc.collect()
    stats = run.stats()
    assert stats.reserved_tokens == 0 and stats.turns == 1


CONVERSATION = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "Reading the file."},
    {"role": "user", "content": "ok"},
    {"role": "assistant", "content": "Found it."},
    {"role": "user", "content": "Now fix it."},
]


@pytest.mark.parametrize("wrapped", [False, True])
def test_compress_with_a_client_is_budgeted_and_uses_the_cheapest_model(server, wrapped):
    import openai

    from budgetlens.guard.adapters import wrap_openai

    run = RunBudget(max_total_tokens=50_000, model_chain=["gpt-4o", "gpt-4o-mini"], provider="openai")
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    if wrapped:
        client = wrap_openai(client, run)
    out = run.compress(CONVERSATION, client=client, keep_last=2)
    assert out[:2] == CONVERSATION[:2] and out[3:] == CONVERSATION[-2:]  # system prompt and task kept
    assert out[2]["content"].endswith("Done.")
    path, body = server.requests[-1]
    assert body["model"] == "gpt-4o-mini" and body["max_tokens"] == 1024
    assert run.stats().usage == CALL and run.stats().turns == 1


def test_langchain_async_invoke_is_budgeted(server):
    require("langchain_openai")
    from langchain_openai import ChatOpenAI

    from budgetlens.guard.adapters import BudgetCallbackHandler

    run = RunBudget(max_total_tokens=50_000)
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0)
    reply = asyncio.run(llm.ainvoke("hi", config={"callbacks": [BudgetCallbackHandler(run)]}))
    assert reply.content == "Done."
    assert run.stats().usage == CALL and run.stats().reserved_tokens == 0


def test_agents_sdk_effect_tools_are_confirmed_when_the_tool_returns(server):
    import openai

    require("agents")
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    from budgetlens.guard.adapters import BudgetRunHooks

    @function_tool
    def send_mail(to: str) -> str:
        """Send a mail."""
        return "sent"

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    agent = Agent(
        name="a", instructions="x", tools=[send_mail], model=OpenAIResponsesModel("gpt-4o-mini", client)
    )
    with RunBudget(max_total_tokens=50_000) as run:
        asyncio.run(Runner.run(agent, "mail bob", hooks=BudgetRunHooks(run, effect_tools=("send_mail",))))
    assert run.result.tool_calls == 1 and run.result.unconfirmed_effects == ()


def test_openai_stream_helpers_are_recorded_sync_and_async(server):
    run = RunBudget(max_total_tokens=50_000)
    client = openai_client(server, run)
    with client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream:
        assert stream.get_final_completion().choices[0].message.content == "Done."
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    with client.responses.stream(model="gpt-4o-mini", input="hi") as stream:
        assert stream.get_final_response().output_text == "Done."
    aclient = openai_client(server, run, is_async=True)

    async def agent():
        async with aclient.responses.stream(model="gpt-4o-mini", input="hi") as stream:
            async for _ in stream:
                pass

    asyncio.run(agent())
    stats = run.stats()
    assert stats.usage == CALL + CALL + CALL and stats.reserved_tokens == 0 and stats.turns == 3
