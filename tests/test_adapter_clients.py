"""The client wrappers miss no model call and record the truth (issue 20): the real OpenAI and
Anthropic SDKs against the local server of tests/examples/llm_server.py (no network)."""

from __future__ import annotations

import asyncio

import pytest
from _adapter_helpers import (
    ANTHROPIC_CALL,
    ANTHROPIC_TOOLS,
    CALL,
    MESSAGES,
    TOOLS,
    anthropic_client,
    openai_client,
)
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS
from pydantic import BaseModel

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.guard.adapters import UnguardedCallError
from budgetlens.semconv import STOP_BUDGET_TOOLS, USAGE_PARTIAL, USAGE_REPORTED

# the SDKs take seconds to import: the tests import them where they use them (_adapter_helpers)
require("openai", "anthropic")

pytestmark = pytest.mark.system  # each test starts an HTTP server


class Answer(BaseModel):
    answer: str


# --- Anthropic stream closed before message_delta: partial, charged the output reservation ------
def test_anthropic_stream_cut_before_message_delta_is_partial_and_charged_its_output(server):
    run = RunBudget(max_total_tokens=50_000)
    stream = anthropic_client(server, run).messages.create(
        model="cut-stream", max_tokens=1_024, messages=MESSAGES, stream=True
    )
    assert [e.type for e in stream][-1] == "content_block_delta"  # the connection closed there
    result = run.finish()
    assert result.usage_status == USAGE_PARTIAL
    assert result.usage.input_tokens == INPUT_TOKENS and result.usage.output_tokens >= 1_024
    assert result.used_tokens >= INPUT_TOKENS + 1_024


def test_anthropic_stream_left_early_is_partial_plain_and_helper(server):
    run = RunBudget(max_total_tokens=50_000)
    client = anthropic_client(server, run)
    stream = client.messages.create(
        model="claude-haiku-4-5", max_tokens=1_024, messages=MESSAGES, stream=True
    )
    for event in stream:
        if event.type == "content_block_delta":
            stream.close()  # the agent stops reading before message_delta
            break
    with client.messages.stream(model="claude-haiku-4-5", max_tokens=1_024, messages=MESSAGES) as s:
        for event in s:
            if event.type == "content_block_delta":
                break
    result = run.finish()
    assert result.usage_status == USAGE_PARTIAL and result.turns == 2
    assert result.usage.output_tokens >= 2 * 1_024 and result.used_tokens >= 2 * (INPUT_TOKENS + 1_024)


def test_anthropic_stream_read_to_its_end_is_still_reported_exactly(server):
    run = RunBudget(max_total_tokens=50_000)
    for _ in anthropic_client(server, run).messages.create(
        model="claude-haiku-4-5", max_tokens=1_024, messages=MESSAGES, stream=True
    ):
        pass
    result = run.finish()
    assert result.usage == ANTHROPIC_CALL and result.usage_status == USAGE_REPORTED


# --- with_options / copy return guarded clients --------------------------------------------------
def test_with_options_and_copy_stay_guarded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = openai_client(server, run)
    client.with_options(timeout=30).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    client.copy(max_retries=1).responses.create(model="gpt-4o-mini", input="hi")
    aclient = anthropic_client(server, run)
    aclient.with_options(timeout=30).messages.create(
        model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES
    )
    aclient.copy().messages.create(model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES)
    assert run.stats().turns == 4 and run.stats().usage == CALL + CALL + ANTHROPIC_CALL + ANTHROPIC_CALL
    small = RunBudget(max_total_tokens=500)
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded):
        openai_client(server, small).with_options(timeout=30).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, max_completion_tokens=1_000
        )
    assert len(server.requests) == sent


# --- the other model-calling methods: guarded ----------------------------------------------------
def test_beta_parse_embeddings_and_legacy_completions_are_guarded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = openai_client(server, run)
    parsed = client.beta.chat.completions.parse(
        model="gpt-4o-mini", messages=MESSAGES, response_format=Answer
    )
    assert parsed.choices[0].message.parsed == Answer(answer="Done.")
    assert client.chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES, response_format=Answer)
    assert client.responses.parse(model="gpt-4o-mini", input="hi", text_format=Answer).output_parsed.answer
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(vectors.data) == 2
    assert client.completions.create(model="gpt-3.5-turbo-instruct", prompt="hi").choices[0].text == "Done."
    for _ in client.completions.create(model="gpt-3.5-turbo-instruct", prompt="hi", stream=True):
        pass
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert server.requests[-2][1]["max_tokens"] == 4096  # legacy completions get a cap too
    legacy = Usage(INPUT_TOKENS, OUTPUT_TOKENS)
    stats = run.stats()
    assert stats.turns == 6 and stats.reserved_tokens == 0
    assert stats.usage == CALL + CALL + CALL + Usage(INPUT_TOKENS, 0) + legacy + legacy
    assert run.finish().cost_usd > 0  # embeddings and completions priced too


def test_anthropic_parse_and_beta_messages_are_guarded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = anthropic_client(server, run)
    parsed = client.messages.parse(
        model="claude-haiku-4-5", max_tokens=200, messages=MESSAGES, output_format=Answer
    )
    assert parsed.parsed_output == Answer(answer="Done.")
    client.beta.messages.create(model="claude-haiku-4-5", max_tokens=200, messages=MESSAGES)
    with client.beta.messages.stream(model="claude-haiku-4-5", max_tokens=200, messages=MESSAGES) as s:
        assert s.get_final_text() == "Done."
    assert run.stats().turns == 3 and run.stats().usage == ANTHROPIC_CALL + ANTHROPIC_CALL + ANTHROPIC_CALL


def test_anthropic_async_parse_and_beta_are_guarded(server):
    run = RunBudget(max_total_tokens=50_000)
    client = anthropic_client(server, run, is_async=True)

    async def agent():
        await client.messages.parse(
            model="claude-haiku-4-5", max_tokens=200, messages=MESSAGES, output_format=Answer
        )
        await client.beta.messages.create(model="claude-haiku-4-5", max_tokens=200, messages=MESSAGES)

    asyncio.run(agent())
    assert run.stats().turns == 2 and run.stats().reserved_tokens == 0


# --- what cannot be guarded is refused by name, and not sent -------------------------------------
REFUSED_OPENAI = [
    ("chat.completions.with_raw_response.create", lambda c: c.chat.completions.with_raw_response.create),
    (
        "chat.completions.with_streaming_response.create",
        lambda c: c.chat.completions.with_streaming_response.create,
    ),
    ("responses.with_raw_response.create", lambda c: c.responses.with_raw_response.create),
    ("with_raw_response.chat.completions.create", lambda c: c.with_raw_response.chat.completions.create),
    ("batches.create", lambda c: c.batches.create),
    ("beta.threads.runs.create", lambda c: c.beta.threads.runs.create),
    ("images.generate", lambda c: c.images.generate),
    ("audio.speech.create", lambda c: c.audio.speech.create),
    ("responses.compact", lambda c: c.responses.compact),
]
REFUSED_ANTHROPIC = [
    ("messages.batches.create", lambda c: c.messages.batches.create),
    ("beta.messages.batches.create", lambda c: c.beta.messages.batches.create),
    ("messages.with_raw_response.create", lambda c: c.messages.with_raw_response.create),
    ("beta.messages.tool_runner", lambda c: c.beta.messages.tool_runner),
    ("with_streaming_response.messages.create", lambda c: c.with_streaming_response.messages.create),
]


@pytest.mark.parametrize(
    "path, method", REFUSED_OPENAI + REFUSED_ANTHROPIC, ids=lambda v: v if isinstance(v, str) else ""
)
def test_unguardable_methods_are_refused_by_name_and_never_sent(server, path, method):
    run = RunBudget(max_total_tokens=50_000)
    client = (openai_client if path in dict(REFUSED_OPENAI) else anthropic_client)(server, run)
    sent = len(server.requests)
    with pytest.raises(UnguardedCallError, match=path.replace(".", r"\.")) as info:
        method(client)(model="gpt-4o-mini", messages=MESSAGES, max_tokens=10)
    assert info.value.method == path and info.value.hint in str(info.value) and "guard" in info.value.hint
    assert len(server.requests) == sent and run.stats().turns == 0


def test_free_and_non_model_resources_pass_through(server):
    client = openai_client(server, RunBudget())
    assert client.models is client._target.models and client.files is client._target.files
    assert hasattr(client.batches, "create")  # introspection works; only calling is refused


# --- tool calls in a response are counted ---------------------------------------------------------
def test_three_parallel_tool_calls_over_max_tool_calls_are_refused_before_they_run(server):
    run = RunBudget(max_total_tokens=50_000, max_tool_calls=2)
    with pytest.raises(BudgetExceeded) as info:
        openai_client(server, run).chat.completions.create(
            model="parallel-gpt", messages=MESSAGES, tools=TOOLS
        )
    assert info.value.reason == STOP_BUDGET_TOOLS
    assert run.finish().stop_reason == STOP_BUDGET_TOOLS


@pytest.mark.parametrize(
    "api",
    [
        "chat",
        "chat-stream",
        "responses",
        "responses-stream",
        "anthropic",
        "anthropic-stream",
        "anthropic-helper",
    ],
)
def test_tool_calls_of_a_response_are_counted_once_at_the_next_call(server, api):
    run = RunBudget(max_total_tokens=50_000, max_tool_calls=10)
    client, aclient = openai_client(server, run), anthropic_client(server, run)
    if api == "chat":
        client.chat.completions.create(model="parallel-gpt", messages=MESSAGES, tools=TOOLS)
    elif api == "chat-stream":
        for _ in client.chat.completions.create(
            model="parallel-gpt", messages=MESSAGES, tools=TOOLS, stream=True
        ):
            pass
    elif api == "responses":
        client.responses.create(
            model="parallel-gpt",
            input="hi",
            tools=[{"type": "function", "name": "read_file", "parameters": {"type": "object"}}],
        )
    elif api == "responses-stream":
        tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
        for _ in client.responses.create(model="parallel-gpt", input="hi", tools=tools, stream=True):
            pass
    elif api == "anthropic":
        aclient.messages.create(
            model="parallel-claude", max_tokens=100, messages=MESSAGES, tools=ANTHROPIC_TOOLS
        )
    elif api == "anthropic-stream":
        for _ in aclient.messages.create(
            model="parallel-claude", max_tokens=100, messages=MESSAGES, tools=ANTHROPIC_TOOLS, stream=True
        ):
            pass
    else:
        with aclient.messages.stream(
            model="parallel-claude", max_tokens=100, messages=MESSAGES, tools=ANTHROPIC_TOOLS
        ) as s:
            s.get_final_message()
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # the agent's next call
    assert run.finish().tool_calls == 3


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_over_the_limit_are_refused_in_streams_and_anthropic(server, stream):
    run = RunBudget(max_total_tokens=50_000, max_tool_calls=2)
    with pytest.raises(BudgetExceeded) as info:
        if stream:
            for _ in openai_client(server, run).chat.completions.create(
                model="parallel-gpt", messages=MESSAGES, tools=TOOLS, stream=True
            ):
                pass
        else:
            anthropic_client(server, run).messages.create(
                model="parallel-claude", max_tokens=100, messages=MESSAGES, tools=ANTHROPIC_TOOLS
            )
    assert info.value.reason == STOP_BUDGET_TOOLS and run.finish().stop_reason == STOP_BUDGET_TOOLS


def test_tool_calls_the_agent_counts_itself_are_not_counted_twice(server):
    run = RunBudget(max_total_tokens=50_000, max_tool_calls=10)
    client = openai_client(server, run)
    reply = client.chat.completions.create(model="parallel-gpt", messages=MESSAGES, tools=TOOLS)
    for call in reply.choices[0].message.tool_calls:
        run.before_tool_call(call.function.name)  # the README's loop counts them itself
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert run.finish().tool_calls == 3


def test_count_tool_calls_false_leaves_counting_to_the_agent(server):
    import openai

    from budgetlens.guard.adapters import wrap_openai

    run = RunBudget(max_total_tokens=50_000, max_tool_calls=1)
    client = wrap_openai(
        openai.OpenAI(base_url=server.openai_url, api_key="t", max_retries=0), run, count_tool_calls=False
    )
    client.chat.completions.create(model="parallel-gpt", messages=MESSAGES, tools=TOOLS)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert run.finish().tool_calls == 0
