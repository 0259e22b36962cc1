"""A hard budget for the LiteLLM Python SDK (extra ``litellm``): the call is wrapped, not the
logger (a ``BudgetExceeded`` raised in a LiteLLM logger hook is swallowed and the request sent).

``llm = GuardedLiteLLM(run)``; ``llm.completion(model=..., messages=...)`` (and ``await
llm.acompletion(...)``; the same keyword arguments as ``litellm.completion``) first reserves the
prompt estimate plus the request's ``max_tokens`` / ``max_completion_tokens`` (else the budget's
output left, at most ``max_output_tokens``, written into ``max_tokens``) and raises
``BudgetExceeded`` before the request is sent when it does not fit; then records the response's
usage, priced by the model the response names. Streams (``stream=True``) are sent with
``stream_options={"include_usage": True}`` and recorded when they end (unknown, charged the
reservation, when no usage arrived). Tool calls a response asks for count against
``max_tool_calls`` (as :mod:`budgetlens.guard.adapters._tools`). Errors: an API error with a
status (LiteLLM's ``RateLimitError``, ``BadRequestError``, ...) releases the reservation; a
timeout or lost connection (``Timeout``, ``APIConnectionError``: the model may have run) is
recorded with unknown usage, charged its reservation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import litellm

from budgetlens.guard.adapters._calls import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    CallGuard,
    GuardedAsyncStream,
    GuardedStream,
)

__all__ = ["GuardedLiteLLM"]

_CAPS = ("max_completion_tokens", "max_tokens")


def _provider(model: Any) -> str:
    """``gen_ai.provider.name`` of a LiteLLM model string (``"anthropic/claude-..."``)."""
    try:
        return str(litellm.get_llm_provider(str(model))[1])
    except Exception:  # an unknown provider prefix: LiteLLM raises when the call is made
        return "litellm"


class GuardedLiteLLM:
    """``completion`` / ``acompletion`` of LiteLLM under ``run`` (a ``RunBudget``), see the
    module doc. ``count_tokens(request_kwargs) -> int`` replaces the prompt estimate;
    ``max_output_tokens`` caps requests that set no cap; ``count_tool_calls`` counts the tool
    calls responses ask for. Raises ValueError for a bad option."""

    def __init__(
        self,
        run: Any,
        *,
        count_tokens: Callable[[dict[str, Any]], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        count_tool_calls: bool = True,
    ) -> None:
        self.run = run
        self._options = (count_tokens, max_output_tokens, count_tool_calls)
        CallGuard(run, "litellm", count_tokens, max_output_tokens, count_tool_calls)  # validates

    def _guard(self, kwargs: dict[str, Any]) -> CallGuard:
        count, ceiling, tools = self._options
        return CallGuard(self.run, _provider(kwargs.get("model")), count, ceiling, tools)

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], CallGuard, Any]:
        kwargs = dict(kwargs)
        if kwargs.get("stream") is True:
            options = dict(kwargs.get("stream_options") or {})
            options.setdefault("include_usage", True)  # else the stream carries no usage
            kwargs["stream_options"] = options
        guard = self._guard(kwargs)
        parts = (kwargs.get("messages"), kwargs.get("tools"), kwargs.get("response_format"))
        return kwargs, guard, guard.reserve(kwargs, parts, _CAPS, "max_tokens")

    @staticmethod
    def _failed(guard: CallGuard, res: Any, exc: BaseException) -> None:
        guard.failed(res, exc)  # Timeout / APIConnectionError count as not answered (see answered)

    def _settle(
        self, kwargs: dict[str, Any], guard: CallGuard, res: Any, response: Any, is_async: bool
    ) -> Any:
        if kwargs.get("stream") is True:
            return (GuardedAsyncStream if is_async else GuardedStream)(response, guard, res)
        guard.responded(res, response)
        return response

    def completion(self, **kwargs: Any) -> Any:
        """``litellm.completion(**kwargs)``, guarded (a stream when ``stream=True``). Raises
        BudgetExceeded before sending a call that does not fit."""
        kwargs, guard, res = self._prepare(kwargs)
        try:
            response = litellm.completion(**kwargs)
        except BaseException as exc:
            self._failed(guard, res, exc)
            raise
        return self._settle(kwargs, guard, res, response, False)

    async def acompletion(self, **kwargs: Any) -> Any:
        """``await litellm.acompletion(**kwargs)``, guarded (an async stream when
        ``stream=True``)."""
        kwargs, guard, res = self._prepare(kwargs)
        try:
            response = await litellm.acompletion(**kwargs)
        except BaseException as exc:
            self._failed(guard, res, exc)
            raise
        return self._settle(kwargs, guard, res, response, True)
