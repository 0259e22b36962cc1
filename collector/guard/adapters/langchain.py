"""A hard budget for LangChain and LangGraph agents (extra ``langchain``): a callback handler.

``config={"callbacks": [BudgetCallbackHandler(run)]}`` on ``invoke`` / ``stream`` of a chat model,
chain or LangGraph graph: before each chat model call (``on_chat_model_start``) the handler
reserves the prompt estimate plus the call's ``max_tokens`` (else the budget's output left, at
most ``max_output_tokens``) and raises ``BudgetExceeded`` before the call when it does not fit
(``raise_error`` is set, so LangChain lets it through); after it (``on_llm_end``) it records
the response's ``usage_metadata`` (streamed usage included when the model reports it; unknown,
charged its reservation, when it does not); a failed call (``on_llm_error``) is released when the
API answered with a status, else charged; each tool call counts against ``max_tool_calls``.

A callback handler cannot change the request: a ``ChatOpenAI(streaming=True)`` on another base URL
streams without usage (unknown, so the default policy blocks the run after its first call).
``guard_chat_model(llm, run)`` returns a copy of the chat model that carries the handler itself
(so every call of the model is guarded, inside any chain or graph) and asks for stream usage
(``stream_usage=True``) where the model has that option.

With a wrap-up slice (``RunBudget(wrap_up_tokens=...)``) a guarded model turns the call that does
not fit next to the slice into the run's final call (see :mod:`budgetlens.guard.adapters._wrap_up`):
the tools bound to it are left out of the request (an Anthropic conversation holding tool blocks
keeps them, with ``tool_choice`` ``none``), the instruction to answer now is added as a last human
message, ``max_tokens`` is capped to the slice, and the answer comes back as the model's message
(an ``AIMessage`` without tool calls, so a LangGraph agent ends on it); the run then stops with
``budget_wrap_up``. The handler alone cannot change a request: there that call is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard, answered
from budgetlens.guard.adapters._wrap_up import OPENAI_TOOL_KEYS, WRAP_UP_INSTRUCTION, reserve_final
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.usage import Usage, normalize_usage

__all__ = ["BudgetCallbackHandler", "guard_chat_model", "langchain_usage"]

_CAP_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_MODEL_KEYS = ("model", "model_name", "model_id")


def langchain_usage(usage_metadata: Any) -> Usage | None:
    """LangChain's ``usage_metadata`` as a :class:`budgetlens.Usage`; None without.

    ``input_tokens`` should hold all input, ``output_tokens`` all output, with
    ``input_token_details.cache_read`` / ``cache_creation`` and ``output_token_details.reasoning``
    as parts; some integrations leave the cache out of ``input_tokens`` (langchain-aws on Bedrock:
    input 23, cache read 16,000). The counts go through :func:`budgetlens.usage.normalize_usage`
    in its Chat Completions shape, whose rule covers both: cache parts larger than the input
    total cannot be inside it, so they are added (16,023 input)."""
    if not usage_metadata:
        return None
    inp = usage_metadata.get("input_token_details") or {}
    out = usage_metadata.get("output_token_details") or {}
    return normalize_usage(
        {
            "prompt_tokens": usage_metadata.get("input_tokens"),
            "completion_tokens": usage_metadata.get("output_tokens"),
            "cache_read_input_tokens": inp.get("cache_read"),
            "cache_creation_input_tokens": inp.get("cache_creation"),
            "completion_tokens_details": {"reasoning_tokens": out.get("reasoning")},
        }
    )


def _usage_of(response: Any) -> tuple[Usage | None, str | None]:
    """The usage and response model of an ``LLMResult`` (summed over its generations)."""
    total, model = None, None
    for generations in getattr(response, "generations", None) or []:
        for generation in generations:
            message = getattr(generation, "message", None)
            usage = langchain_usage(getattr(message, "usage_metadata", None))
            if usage is not None:
                total = usage if total is None else total + usage
            metadata = getattr(message, "response_metadata", None) or {}
            model = model or metadata.get("model_name") or metadata.get("model")
    return total, model


class BudgetCallbackHandler(BaseCallbackHandler):
    """Puts ``run`` (a ``RunBudget``) around every chat model and tool call LangChain or
    LangGraph reports to it. ``count_tokens(messages) -> int`` replaces the prompt estimate;
    ``max_output_tokens`` is reserved for calls that set no cap; ``provider`` names the
    ``gen_ai.provider.name`` (default: LangChain's ``ls_provider`` metadata)."""

    raise_error = True  # BudgetExceeded must reach the agent, not be logged and dropped
    run_inline = True  # reserve before the call, in the caller's thread

    def __init__(
        self,
        run: Any,
        *,
        count_tokens: Callable[[list], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str | None = None,
    ) -> None:
        super().__init__()
        self.run, self.provider = run, provider
        self._count, self._ceiling = count_tokens, max_output_tokens
        self._open: dict[UUID, Any] = {}
        self._providers: dict[UUID, str | None] = {}
        self._final: dict[UUID, int] = {}  # run_id -> output cap of a final call to rewrite
        self._rewrites = False  # set by guard_chat_model: its model rewrites final calls
        self._lock = threading.Lock()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        params = invocation_params or kwargs.get("invocation_params") or {}
        metadata = metadata or {}
        model = next((params[k] for k in _MODEL_KEYS if isinstance(params.get(k), str)), None)
        model = model or metadata.get("ls_model_name")
        flat = [m for batch in messages for m in batch]
        if self._count is not None:
            prompt = self._count(flat)
        else:
            prompt = estimate_tokens([getattr(m, "content", m) for m in flat], params.get("tools"))
        given = next((params[k] for k in _CAP_KEYS if isinstance(params.get(k), int)), None)
        cap = given
        if cap is None:
            left = self.run.output_budget(self._ceiling, prompt)
            cap = self._ceiling if left is None or left < 1 else left
        if self._rewrites and self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            res = self._reserve_final(flat, model, given, metadata)
            with self._lock:
                self._final[run_id] = res.output_tokens
        else:
            res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        with self._lock:
            self._open[run_id] = res
            self._providers[run_id] = self.provider or metadata.get("ls_provider")

    def _reserve_final(self, flat: list[Any], model: Any, given: Any, metadata: dict[str, Any]) -> Any:
        """Reserve the run's final call with the shared step (:func:`reserve_final`): the prompt
        with the instruction and without tools, the output capped to the slice."""
        count = self._count
        guard = CallGuard(
            self.run,
            self.provider or str(metadata.get("ls_provider") or "langchain"),
            (lambda _kw: count([*flat, _human(WRAP_UP_INSTRUCTION)])) if count is not None else None,
            self._ceiling,
            count_tool_calls=False,
        )
        kwargs = {"messages": [getattr(m, "content", m) for m in flat], "model": model, "max_tokens": given}
        return reserve_final(guard, kwargs, (kwargs["messages"],), ("max_tokens",), "max_tokens")

    def final_cap(self, run_id: UUID | None) -> int | None:
        """The output cap (tokens) when the call ``run_id`` is the run's final call (taken once),
        else None. ``None``: the call's id is not known (LangChain's ``stream`` does not pass its
        run manager on); a run has one final call, so the one pending, if any."""
        with self._lock:
            if run_id is None:
                return self._final.pop(next(iter(self._final)), None) if self._final else None
            return self._final.pop(run_id, None)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._final.pop(run_id, None)
            res = self._open.pop(run_id, None)
            provider = self._providers.pop(run_id, None)
        if res is None:
            return  # not a chat model call this handler reserved
        usage, model = _usage_of(response)
        self.run.record(usage, res.model, reservation=res, provider=provider, response_model=model)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._final.pop(run_id, None)
            res = self._open.pop(run_id, None)
            provider = self._providers.pop(run_id, None)
        if res is None:
            return
        if answered(error):
            self.run.release(res)
        else:
            self.run.record(
                None, res.model, reservation=res, provider=provider, error_type=type(error).__name__
            )

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.run.before_tool_call(str((serialized or {}).get("name") or kwargs.get("name") or "tool"))


def guard_chat_model(model: Any, run: Any, **options: Any) -> Any:
    """A copy of the LangChain chat model ``model`` guarded by ``run`` (a ``RunBudget``): it
    carries a :class:`BudgetCallbackHandler` (built with ``options``) among its own callbacks, so
    every call of it is reserved and recorded wherever it runs, and it asks for stream usage
    (``stream_usage=True``, e.g. ``ChatOpenAI`` on any base URL) unless that is set already. The
    copy is of a subclass of the model's class (same name and fields; ``isinstance`` holds) whose
    generate and stream methods send the run's final call from its wrap-up slice (see the module
    doc). Raises ValueError for an object that is not a chat model."""
    fields = getattr(type(model), "model_fields", None)
    if fields is None or "callbacks" not in fields:
        raise ValueError(f"guard_chat_model takes a LangChain chat model, got {model!r}")
    callbacks = getattr(model, "callbacks", None)
    if callbacks is not None and not isinstance(callbacks, list):
        raise ValueError("guard_chat_model: the model's callbacks must be a list (or None), not a manager")
    handler = BudgetCallbackHandler(run, **options)
    handler._rewrites = True
    update: dict[str, Any] = {"callbacks": [*(callbacks or []), handler]}
    if "stream_usage" in fields and not getattr(model, "stream_usage", None):
        update["stream_usage"] = True
    guarded = model.model_copy(update=update)
    object.__setattr__(guarded, "__class__", _final_call_class(type(model)))
    return guarded


def _human(text: str) -> Any:
    from langchain_core.messages import HumanMessage

    return HumanMessage(content=text)


def _final_call(model: Any, messages: list[Any], run_manager: Any, kwargs: dict[str, Any]) -> list[Any]:
    """Rewrite a call the guard reserved as the run's final call (see the module doc): returns the
    messages to send; ``kwargs`` (the call's options, with the bound tools) is changed in place."""
    run_id = getattr(run_manager, "run_id", None)
    handlers = [h for h in model.callbacks or () if isinstance(h, BudgetCallbackHandler) and h._rewrites]
    cap = next((c for c in (h.final_cap(run_id) for h in handlers) if c is not None), None)
    if cap is None:
        return messages
    tool_blocks = any(getattr(m, "type", "") == "tool" or getattr(m, "tool_calls", None) for m in messages)
    if "anthropic" in str(getattr(model, "_llm_type", "")) and tool_blocks and kwargs.get("tools"):
        kwargs["tool_choice"] = {"type": "none"}  # Anthropic's tool blocks need their definitions
    else:
        for key in OPENAI_TOOL_KEYS:
            kwargs.pop(key, None)
    for key in _CAP_KEYS:
        kwargs.pop(key, None)
    kwargs["max_tokens"] = cap
    return [*messages, _human(WRAP_UP_INSTRUCTION)]


_FINAL_CLASSES: dict[type, type] = {}


def _final_call_class(cls: Any) -> type:
    """A subclass of the chat model class ``cls`` (same name, no new fields) whose generate and
    stream methods rewrite the run's final call (:func:`_final_call`) before the model's own run."""
    if cls in _FINAL_CLASSES.values():  # a guarded model guarded again
        return cls
    if cls in _FINAL_CLASSES:
        return _FINAL_CLASSES[cls]
    from langchain_core.language_models import BaseChatModel

    # run_manager named: LangChain passes it only to methods whose signature has it
    def _generate(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        messages = _final_call(self, messages, run_manager, kw)
        return cls._generate(self, messages, stop, run_manager=run_manager, **kw)

    async def _agenerate(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        messages = _final_call(self, messages, run_manager, kw)
        return await cls._agenerate(self, messages, stop, run_manager=run_manager, **kw)

    def _stream(self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        messages = _final_call(self, messages, run_manager, kw)
        return cls._stream(self, messages, stop, run_manager=run_manager, **kw)

    def _astream(self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        messages = _final_call(self, messages, run_manager, kw)
        return cls._astream(self, messages, stop, run_manager=run_manager, **kw)

    methods = {"_generate": _generate, "_agenerate": _agenerate, "_stream": _stream, "_astream": _astream}
    # only the methods the class has itself: LangChain reads an inherited _stream as "no streaming"
    namespace: dict[str, Any] = {
        name: fn for name, fn in methods.items() if getattr(cls, name) is not getattr(BaseChatModel, name)
    }
    namespace.update({"__slots__": (), "__module__": cls.__module__})
    _FINAL_CLASSES[cls] = type(cls.__name__, (cls,), namespace)
    return _FINAL_CLASSES[cls]
