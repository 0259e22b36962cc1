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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, answered
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
        cap = next((params[k] for k in _CAP_KEYS if isinstance(params.get(k), int)), None)
        if cap is None:
            left = self.run.output_budget(self._ceiling, prompt)
            cap = self._ceiling if left is None or left < 1 else left
        res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        with self._lock:
            self._open[run_id] = res
            self._providers[run_id] = self.provider or metadata.get("ls_provider")

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            res = self._open.pop(run_id, None)
            provider = self._providers.pop(run_id, None)
        if res is None:
            return  # not a chat model call this handler reserved
        usage, model = _usage_of(response)
        self.run.record(usage, res.model, reservation=res, provider=provider, response_model=model)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
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
    (``stream_usage=True``, e.g. ``ChatOpenAI`` on any base URL) unless that is set already.
    Raises ValueError for an object that is not a chat model."""
    fields = getattr(type(model), "model_fields", None)
    if fields is None or "callbacks" not in fields:
        raise ValueError(f"guard_chat_model takes a LangChain chat model, got {model!r}")
    callbacks = getattr(model, "callbacks", None)
    if callbacks is not None and not isinstance(callbacks, list):
        raise ValueError("guard_chat_model: the model's callbacks must be a list (or None), not a manager")
    update: dict[str, Any] = {"callbacks": [*(callbacks or []), BudgetCallbackHandler(run, **options)]}
    if "stream_usage" in fields and not getattr(model, "stream_usage", None):
        update["stream_usage"] = True
    return model.model_copy(update=update)
