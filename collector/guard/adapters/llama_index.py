"""A hard budget for LlamaIndex LLMs and agents (extra ``llama-index``): the call is wrapped
(LlamaIndex's instrumentation swallows an event handler's exception, so a handler cannot refuse).

``llm = guard_llm(llm, run)`` (any LlamaIndex ``LLM``; a guarded copy of it), or
``guard_llama_agent(agent, run)`` for a workflow agent (``FunctionAgent``, ``ReActAgent``: its
LLM and tools, in place):

- ``chat`` / ``achat`` / ``stream_chat`` / ``astream_chat`` (and so ``*_with_tools`` and the
  agents built on them; ``complete`` and its stream and async forms go through them for a chat
  model, since some LLMs, LiteLLM's among them, complete through their private ``_chat``) reserve the prompt estimate (messages) plus the LLM's
  ``max_tokens`` (else the budget's output left, at most ``max_output_tokens``, passed as
  ``max_tokens``) and raise ``BudgetExceeded`` before the call when it does not fit; then record
  the usage of the raw provider response (``ChatResponse.raw``; streams: the last chunk that
  carries usage, and ``stream_options={"include_usage": True}`` is asked for); a call without
  usage is *unknown*, charged its reservation; a failed call is released when the API answered
  with a status, else charged; with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), a call
  that does not fit next to it becomes the run's final call: tools removed, the instruction to
  answer now added as a last user message, ``max_tokens`` capped to the slice (after it the run
  stops with ``budget_wrap_up``);
- each tool call of a guarded agent (``FunctionTool.call`` / ``acall``) counts against
  ``max_tool_calls`` before it runs; the agent hands a tool's exception to the model, so a refusal
  is raised again by the agent's next LLM call (the run stops there).

LiteLLM's LLM (``llama-index-llms-litellm`` 0.8) reads ``choices[0]`` of every streamed chunk, and
LiteLLM passes the usage-only last chunk (``choices == []``) that ``include_usage`` asks for: the
guarded copy's streams hand that chunk to the parser with one empty choice (delta ``""``, its
usage untouched), so the parser does not fail and the usage is recorded as the server sent it.
"""

from __future__ import annotations

import functools
import types
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import OPENAI_TOOL_KEYS, WRAP_UP_INSTRUCTION
from budgetlens.guard.results import BudgetExceeded
from budgetlens.usage import normalize_usage

__all__ = ["guard_llama_agent", "guard_llm"]


def _usage(response: Any) -> Any:
    raw = getattr(response, "raw", None)
    if raw is None:
        return None
    try:
        return normalize_usage(raw)
    except ValueError:
        return None


def _model(response: Any) -> str | None:
    model = getattr(getattr(response, "raw", None), "model", None)
    return model if isinstance(model, str) else None


def _with_a_choice(chunk: Any) -> Any:
    """A usage-only stream chunk (``choices == []``, usage set) with one empty choice; any other
    chunk as it is."""
    if getattr(chunk, "choices", None) != [] or getattr(chunk, "usage", None) is None:
        return chunk
    from litellm.types.utils import Delta, StreamingChoices

    return chunk.model_copy(update={"choices": [StreamingChoices(index=0, delta=Delta())]})


def _litellm_streams(base: type) -> dict[str, Any]:
    """``_stream_chat`` / ``_astream_chat`` of LiteLLM's LLM class ``base`` whose LiteLLM streams
    pass through :func:`_with_a_choice` (the same code, bound to the module's globals with its two
    completion functions wrapped); ``{}`` for any other LLM class."""
    sync, asyn = getattr(base, "_stream_chat", None), getattr(base, "_astream_chat", None)
    names = getattr(sync, "__globals__", {})
    if not isinstance(sync, types.FunctionType) or not isinstance(asyn, types.FunctionType):
        return {}
    if asyn.__globals__ is not names or not {"completion_with_retry", "acompletion_with_retry"} <= set(names):
        return {}
    completion, acompletion = names["completion_with_retry"], names["acompletion_with_retry"]

    def completion_with_retry(**kwargs: Any) -> Any:
        response = completion(**kwargs)
        return (_with_a_choice(c) for c in response) if kwargs.get("stream") else response

    async def acompletion_with_retry(**kwargs: Any) -> Any:
        response = await acompletion(**kwargs)
        if not kwargs.get("stream"):
            return response

        async def chunks() -> AsyncIterator[Any]:
            async for chunk in response:
                yield _with_a_choice(chunk)

        return chunks()

    bound = dict(
        names, completion_with_retry=completion_with_retry, acompletion_with_retry=acompletion_with_retry
    )
    methods: dict[str, Any] = {}
    for method in (sync, asyn):
        copy = types.FunctionType(
            method.__code__, bound, method.__name__, method.__defaults__, method.__closure__
        )
        copy.__kwdefaults__ = method.__kwdefaults__
        methods[method.__name__] = functools.update_wrapper(copy, method)
    return methods


def _final_call(
    run: Any,
    guard: CallGuard,
    messages: Any,
    kwargs: dict[str, Any],
    model: str | None,
    given: Any,
    ceiling: int,
) -> tuple[list[Any], Any]:
    """The run's final call from its wrap-up slice (see :mod:`budgetlens.guard.adapters._wrap_up`):
    ``messages`` with :data:`WRAP_UP_INSTRUCTION` as a last user message, the tool keys removed from
    ``kwargs`` (changed in place), ``max_tokens`` the least of ``given``, the final call's output
    budget and ``ceiling`` (at least 1); reserved with ``final=True``. Returns (messages, the
    reservation); raises BudgetExceeded when even the final call does not fit."""
    from llama_index.core.llms import ChatMessage

    messages = [*messages, ChatMessage(role="user", content=WRAP_UP_INSTRUCTION)]
    for key in OPENAI_TOOL_KEYS:
        kwargs.pop(key, None)
    prompt = guard.prompt_tokens({"messages": messages}, ([getattr(m, "content", m) for m in messages],))
    left = run.output_budget(ceiling, prompt, final=True)
    cap = max(1, min(c for c in (given, left, ceiling) if isinstance(c, int) and not isinstance(c, bool)))
    kwargs["max_tokens"] = cap
    return messages, run.reserve(prompt + cap, model, output_tokens=cap, final=True)


def guard_llm(
    llm: Any,
    run: Any,
    *,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    provider: str = "llama_index",
    stream_usage: bool = True,
    _pending: list[Any] | None = None,
) -> Any:
    """A copy of the LlamaIndex ``llm`` whose chat calls go through ``run`` (a ``RunBudget``);
    see the module doc. ``stream_usage``: ask streams for usage (an OpenAI-compatible option).
    Raises ValueError for an object that is not a LlamaIndex LLM."""
    from llama_index.core.base.llms import generic_utils

    if not all(hasattr(llm, name) for name in ("chat", "achat", "stream_chat", "astream_chat", "metadata")):
        raise ValueError(f"guard_llm takes a LlamaIndex LLM, got {llm!r}")
    guard = CallGuard(run, provider, None, max_output_tokens)
    base = type(llm)
    model_name = getattr(llm, "model", None)

    def prepare(self: Any, messages: Any, kwargs: dict[str, Any], stream: bool) -> tuple[Any, Any]:
        if _pending:  # a tool refusal the agent handed to the model: the run stops here
            raise _pending.pop()
        model = model_name if isinstance(model_name, str) else None
        given = kwargs.get("max_tokens", getattr(self, "max_tokens", None))
        prompt = guard.prompt_tokens({"messages": messages}, ([getattr(m, "content", m) for m in messages],))
        cap = guard.output_cap(prompt, given)
        if stream and stream_usage:
            kwargs.setdefault("stream_options", {"include_usage": True})
        if run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            return _final_call(run, guard, messages, kwargs, model, given, max_output_tokens)
        kwargs.setdefault("max_tokens", cap)
        return messages, run.reserve(prompt + cap, model, output_tokens=cap)

    def chat(self: Any, messages: Any, **kwargs: Any) -> Any:
        messages, res = prepare(self, messages, kwargs, False)
        try:
            response = base.chat(self, messages, **kwargs)
        except BaseException as exc:
            guard.failed(res, exc)
            raise
        guard.record(res, _usage(response), _model(response))
        return response

    async def achat(self: Any, messages: Any, **kwargs: Any) -> Any:
        messages, res = prepare(self, messages, kwargs, False)
        try:
            response = await base.achat(self, messages, **kwargs)
        except BaseException as exc:
            guard.failed(res, exc)
            raise
        guard.record(res, _usage(response), _model(response))
        return response

    def stream_chat(self: Any, messages: Any, **kwargs: Any) -> Iterator[Any]:
        messages, res = prepare(self, messages, kwargs, True)
        last: list[Any] = [None, None]  # usage, model

        def gen() -> Iterator[Any]:
            try:
                for chunk in base.stream_chat(self, messages, **kwargs):
                    last[0] = _usage(chunk) or last[0]
                    last[1] = last[1] or _model(chunk)
                    yield chunk
            except BaseException as exc:
                guard.record(res, last[0], last[1], exc) if last[0] else guard.failed(res, exc)
                raise
            guard.record(res, last[0], last[1])

        return gen()

    async def astream_chat(self: Any, messages: Any, **kwargs: Any) -> AsyncIterator[Any]:
        messages, res = prepare(self, messages, kwargs, True)
        try:
            inner = await base.astream_chat(self, messages, **kwargs)
        except BaseException as exc:
            guard.failed(res, exc)
            raise

        async def gen() -> AsyncIterator[Any]:
            usage, model = None, None
            try:
                async for chunk in inner:
                    usage, model = _usage(chunk) or usage, model or _model(chunk)
                    yield chunk
            except BaseException as exc:
                guard.record(res, usage, model, exc) if usage else guard.failed(res, exc)
                raise
            guard.record(res, usage, model)

        return gen()

    def complete(self: Any, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        if not self.metadata.is_chat_model:
            return base.complete(self, prompt, formatted, **kwargs)
        return generic_utils.chat_to_completion_decorator(self.chat)(prompt, **kwargs)

    def stream_complete(self: Any, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        if not self.metadata.is_chat_model:
            return base.stream_complete(self, prompt, formatted, **kwargs)
        return generic_utils.stream_chat_to_completion_decorator(self.stream_chat)(prompt, **kwargs)

    async def acomplete(self: Any, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        if not self.metadata.is_chat_model:
            return await base.acomplete(self, prompt, formatted, **kwargs)
        return await generic_utils.achat_to_completion_decorator(self.achat)(prompt, **kwargs)

    async def astream_complete(self: Any, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        if not self.metadata.is_chat_model:
            return await base.astream_complete(self, prompt, formatted, **kwargs)
        return await generic_utils.astream_chat_to_completion_decorator(self.astream_chat)(prompt, **kwargs)

    guarded = type(
        f"Budget{base.__name__}",
        (base,),
        {
            "chat": chat,
            "achat": achat,
            "stream_chat": stream_chat,
            "astream_chat": astream_chat,
            "complete": complete,
            "stream_complete": stream_complete,
            "acomplete": acomplete,
            "astream_complete": astream_complete,
            "__module__": __name__,
            **_litellm_streams(base),
        },
    )
    copy = llm.model_copy() if hasattr(llm, "model_copy") else llm
    copy.__class__ = guarded
    return copy


def _counted(
    call: Callable[..., Any], name: str, run: Any, is_async: bool, pending: list
) -> Callable[..., Any]:
    def count() -> None:
        try:
            run.before_tool_call(name)
        except BudgetExceeded as exc:
            pending[:] = [exc]  # the agent hands tool errors to the model: raised at its next call
            raise

    if is_async:

        @functools.wraps(call)
        async def acounted(*args: Any, **kwargs: Any) -> Any:
            count()
            return await call(*args, **kwargs)

        return acounted

    @functools.wraps(call)
    def counted(*args: Any, **kwargs: Any) -> Any:
        count()
        return call(*args, **kwargs)

    return counted


def guard_llama_agent(agent: Any, run: Any, **options: Any) -> Any:
    """Guard a LlamaIndex workflow agent in place (its ``llm`` through :func:`guard_llm` with
    ``options``; each of its tools counted); returns ``agent``."""
    pending: list[Any] = []
    agent.llm = guard_llm(agent.llm, run, _pending=pending, **options)
    for tool in getattr(agent, "tools", None) or ():
        name = str(getattr(getattr(tool, "metadata", None), "name", None) or "tool")
        original_call = getattr(tool, "_budgetlens_call", None) or tool.call
        original_acall = getattr(tool, "_budgetlens_acall", None) or tool.acall
        tool._budgetlens_call, tool._budgetlens_acall = original_call, original_acall
        tool.call = _counted(original_call, name, run, False, pending)
        tool.acall = _counted(original_acall, name, run, True, pending)
    return agent
