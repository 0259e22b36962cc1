"""LangChain / LangGraph under a budget (issue 20): usage shapes that leave the cache out, the
response model pricing a call, stream usage, parallel tool calls and sub-agents, with the real
packages (langchain-core, langgraph, langchain-openai) against the local server (no network)."""

from __future__ import annotations

import asyncio

import pytest
from _adapter_helpers import CALL
from conftest import require
from llm_server import INPUT_TOKENS, OUTPUT_TOKENS

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.semconv import STOP_BUDGET_TOOLS, STOP_BUDGET_WRAP_UP, USAGE_REPORTED, USAGE_UNKNOWN

# langchain-openai and langgraph take seconds to import: the tests import them where they use them
require("langchain_openai", "langgraph")

pytestmark = pytest.mark.system  # most tests start a server

#: langchain-aws's usage_metadata for a Bedrock call that read 16,000 tokens from the cache.
BEDROCK_METADATA = {
    "input_tokens": 23,
    "output_tokens": 50,
    "total_tokens": 16_073,
    "input_token_details": {"cache_read": 16_000, "cache_creation": 0},
}


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def read_file_tool():
    """``read_file`` as a LangChain tool."""
    from langchain_core.tools import tool

    return tool(read_file)


def llm(server, model="gpt-4o-mini", **kwargs):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model, base_url=server.openai_url, api_key="test", max_retries=0, **kwargs)


# --- usage shapes and pricing (a real LangChain chat model, no provider) -------------------------
@pytest.mark.parametrize(
    "metadata, expected",
    [
        (BEDROCK_METADATA, Usage(16_023, 50, cache_read_tokens=16_000)),
        (
            {"input_tokens": 16_023, "output_tokens": 50, "input_token_details": {"cache_read": 16_000}},
            Usage(16_023, 50, cache_read_tokens=16_000),
        ),
        (
            {"input_tokens": 1_200, "output_tokens": 300, "output_token_details": {"reasoning": 64}},
            Usage(1_200, 300, reasoning_tokens=64),
        ),
    ],
)
def test_usage_metadata_with_or_without_the_cache_inside_input(metadata, expected):
    from budgetlens.guard.adapters.langchain import langchain_usage

    assert langchain_usage(metadata) == expected


def test_cache_left_out_of_input_is_recorded_not_raised_and_priced_by_the_response_model():
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from budgetlens.guard.adapters import BudgetCallbackHandler

    reply = AIMessage(
        "Done.", usage_metadata=BEDROCK_METADATA, response_metadata={"model_name": "gpt-4o-mini"}
    )
    model = GenericFakeChatModel(messages=iter([reply]))  # its invocation params name no model
    run = RunBudget(max_total_tokens=50_000)
    assert model.invoke("hi", config={"callbacks": [BudgetCallbackHandler(run)]}).content == "Done."
    result = run.finish()
    assert result.usage == Usage(16_023, 50, cache_read_tokens=16_000)
    assert result.cost_usd is not None and result.cost_usd > 0


# --- streams ask for usage -----------------------------------------------------------------------
@pytest.mark.system
def test_streaming_chat_openai_on_another_base_url_gets_stream_usage_when_guarded(server):
    from budgetlens.guard.adapters import guard_chat_model

    run = RunBudget(max_total_tokens=50_000)
    guarded = guard_chat_model(llm(server, streaming=True), run)
    assert guarded.invoke("hi").content == "Done."
    assert server.requests[-1][1]["stream_options"] == {"include_usage": True}
    assert "".join(c.content for c in guarded.stream("hi")) == "Done."
    result = run.finish()
    assert result.usage == CALL + CALL and result.usage_status == USAGE_REPORTED


@pytest.mark.system
def test_streaming_without_usage_through_the_handler_alone_is_unknown(server):
    from budgetlens.guard.adapters import BudgetCallbackHandler

    run = RunBudget(max_total_tokens=50_000)
    llm(server, streaming=True).invoke("hi", config={"callbacks": [BudgetCallbackHandler(run)]})
    assert "stream_options" not in server.requests[-1][1]
    assert run.finish().usage_status == USAGE_UNKNOWN


@pytest.mark.system
def test_guarded_model_refuses_before_sending_inside_a_graph(server):
    from langgraph.prebuilt import create_react_agent

    from budgetlens.guard.adapters import guard_chat_model

    run = RunBudget(max_total_tokens=1_000)
    graph = create_react_agent(guard_chat_model(llm(server, max_tokens=2_000), run), [read_file_tool()])
    sent = len(server.requests)
    with pytest.raises(BudgetExceeded):
        graph.invoke({"messages": [("user", "go")]})
    assert len(server.requests) == sent


def test_guard_chat_model_rejects_other_objects():
    from budgetlens.guard.adapters import guard_chat_model

    with pytest.raises(ValueError, match="chat model"):
        guard_chat_model(object(), RunBudget())


# --- tools and sub-agents ------------------------------------------------------------------------
@pytest.mark.system
def test_three_parallel_tool_calls_over_max_tool_calls_stop_the_graph(server):
    from langgraph.prebuilt import create_react_agent

    from budgetlens.guard.adapters import BudgetCallbackHandler

    graph = create_react_agent(llm(server, "parallel-gpt"), [read_file_tool()])
    with pytest.raises(BudgetExceeded) as info, RunBudget(max_total_tokens=50_000, max_tool_calls=2) as run:
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [BudgetCallbackHandler(run)]})
    assert info.value.reason == STOP_BUDGET_TOOLS and run.result.stop_reason == STOP_BUDGET_TOOLS


@pytest.mark.system
def test_a_sub_agent_run_inside_a_tool_is_charged_to_the_run(server):
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    from budgetlens.guard.adapters import BudgetCallbackHandler

    sub_agent = create_react_agent(llm(server), [read_file_tool()])

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the reading sub-agent."""
        return sub_agent.invoke({"messages": [("user", task)]})["messages"][-1].content

    graph = create_react_agent(llm(server), [delegate])
    sent = len(server.requests)
    with RunBudget(max_total_tokens=50_000) as run:
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [BudgetCallbackHandler(run)]})
    calls = len(server.requests) - sent  # lead: 2 calls, sub-agent: 2 calls
    assert calls == 4 and run.result.turns == 4 and run.result.tool_calls == 2
    assert run.result.usage == CALL + CALL + CALL + CALL


@pytest.mark.system
def test_a_status_error_is_released_and_a_lost_connection_is_unknown(server):
    import openai
    from langchain_openai import ChatOpenAI

    from budgetlens.guard.adapters import BudgetCallbackHandler

    run = RunBudget(max_total_tokens=50_000)
    handler = BudgetCallbackHandler(run)
    with pytest.raises(openai.InternalServerError):
        llm(server, "error-500").invoke("hi", config={"callbacks": [handler]})
    assert run.stats().reserved_tokens == 0 and run.stats().turns == 0
    lost = ChatOpenAI(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="t", max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        lost.invoke("hi", config={"callbacks": [handler]})
    result = run.finish()
    assert result.usage_status == USAGE_UNKNOWN and result.turns == 1 and result.used_tokens > 0


# --- the wrap-up slice (issue 21) -----------------------------------------------------------------
@pytest.mark.system
@pytest.mark.parametrize("mode", ["invoke", "stream", "ainvoke"])
def test_a_graph_out_of_budget_answers_from_the_wrap_up_slice(server, mode):
    # max_total_tokens 3,000 with a 1,000-token slice: ordinary room 2,000. Call 1 reserves its
    # prompt + 1,000 (max_tokens) and uses 1,200 + 300 = 1,500, asking for read_file; call 2
    # (prompt + 1,000) does not fit the 500 left: it is the final call, sent without tools, the
    # instruction last, capped at 1,000 (< the 1,500 - prompt the slice leaves); its "Done." is
    # the graph's last message and the run stops with budget_wrap_up at 3,000 tokens.
    from langgraph.prebuilt import create_react_agent

    from budgetlens.guard.adapters import guard_chat_model

    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    graph = create_react_agent(guard_chat_model(llm(server, max_tokens=1_000), run), [read_file_tool()])
    before = len(server.requests)
    task = {"messages": [("user", "go")]}
    if mode == "stream":
        messages = list(graph.stream(task, stream_mode="values"))[-1]["messages"]
    elif mode == "ainvoke":
        messages = asyncio.run(graph.ainvoke(task))["messages"]
    else:
        messages = graph.invoke(task)["messages"]
    bodies = [body for _, body in server.requests[before:]]
    assert messages[-1].content == "Done." and not messages[-1].tool_calls
    assert [b["max_completion_tokens"] for b in bodies] == [1_000, 1_000]
    assert [("tools" in b) for b in bodies] == [True, False]
    assert bodies[-1]["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and result.turns == 2
    assert result.used_tokens == 2 * (INPUT_TOKENS + OUTPUT_TOKENS) == 3_000


@pytest.mark.system
def test_a_streamed_model_call_out_of_budget_answers_from_the_wrap_up_slice(server):
    # .stream() does not hand its run manager to _stream: the pending final call is found all the same
    from budgetlens.guard.adapters import guard_chat_model

    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    model = guard_chat_model(llm(server, max_tokens=1_000), run).bind_tools([read_file_tool()])
    assert model.invoke("go").tool_calls  # 1,500 used: the next call is the final one
    text = "".join(str(c.content) for c in model.stream("go on"))
    body = server.requests[-1][1]
    assert text == "Done." and "tools" not in body and body["max_completion_tokens"] == 1_000
    assert body["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and result.used_tokens == 3_000


def anthropic_shaped():
    """A chat model of the Anthropic type (``_llm_type``) that keeps each call's messages and
    options and answers "Done." with 1,200 + 300 tokens (langchain-anthropic is not installed)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class _AnthropicShaped(BaseChatModel):
        seen: list = []

        @property
        def _llm_type(self) -> str:
            return "anthropic-chat"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            self.seen.append((list(messages), dict(kwargs)))
            usage = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "total_tokens": 1_500}
            return ChatResult(generations=[ChatGeneration(message=AIMessage("Done.", usage_metadata=usage))])

    return _AnthropicShaped(seen=[])


def test_an_anthropic_final_call_keeps_the_tool_definitions_its_tool_blocks_need():
    # Anthropic refuses tool_use/tool_result blocks without their tool definitions: the final call
    # keeps them with tool_choice none. Prompts count 500: call 1 (500 + 1,000) fits the 2,000
    # ordinary tokens and uses 1,500; call 2 (1,500) does not fit the 500 left: the final call,
    # capped at 1,000 (= 3,000 - 1,500 - 500), the instruction as the last human message.
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from budgetlens.guard.adapters import guard_chat_model

    run = RunBudget(max_total_tokens=3_000, wrap_up_tokens=1_000)
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    model = guard_chat_model(anthropic_shaped(), run, count_tokens=lambda messages: 500)
    model = model.bind(tools=tools, max_tokens=1_000)
    model.invoke("go")
    history = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[{"name": "read_file", "args": {}, "id": "toolu_1"}]),
        ToolMessage("def f(): ...", tool_call_id="toolu_1"),
    ]
    assert model.invoke(history).content == "Done."
    seen = model.bound.seen
    assert seen[0][1] == {"tools": tools, "max_tokens": 1_000}
    assert seen[1][1] == {"tools": tools, "tool_choice": {"type": "none"}, "max_tokens": 1_000}
    assert seen[1][0][:3] == history and seen[1][0][3].content == WRAP_UP_INSTRUCTION
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_WRAP_UP and result.used_tokens == 3_000
