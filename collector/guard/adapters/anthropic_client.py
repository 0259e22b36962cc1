"""A hard budget for the official Anthropic Python client (extra ``anthropic``).

``client = wrap_anthropic(Anthropic(), run)``: every ``client.messages.create`` (sync with
``Anthropic``, async with ``AsyncAnthropic``, plain or ``stream=True``) and ``client.messages.
stream(...)`` first reserves the prompt estimate plus the request's ``max_tokens`` from ``run``
(raising ``BudgetExceeded`` before the request is sent when it does not fit), then records the
response's usage (for streams: ``message_start``'s input and cache counts and the last
``message_delta``'s output count). Errors: an API error with a status releases the
reservation; a timeout or broken connection is recorded with unknown usage (charged its
reservation). Everything else on the client passes through unguarded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

from budgetlens.guard.adapters._calls import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    CallGuard,
    GuardedAsyncStream,
    GuardedStream,
    GuardedStreamManager,
)
from budgetlens.guard.adapters._proxy import Proxy

__all__ = ["wrap_anthropic"]


def wrap_anthropic(
    client: Any,
    run: Any,
    *,
    count_tokens: Callable[[dict[str, Any]], int] | None = None,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
) -> Any:
    """``client`` (``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``) guarded by ``run``
    (a ``RunBudget``). ``count_tokens(request_kwargs) -> int`` replaces the prompt estimate (e.g.
    through ``client.messages.count_tokens``); ``max_output_tokens`` fills ``max_tokens`` when a
    request omits it. Raises ValueError for a client of another kind or a bad option."""
    if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        raise ValueError(
            f"wrap_anthropic takes an anthropic.Anthropic or anthropic.AsyncAnthropic client, got {client!r}"
        )
    guard = CallGuard(run, "anthropic", count_tokens, max_output_tokens)
    return GuardedAnthropic(client, guard, isinstance(client, anthropic.AsyncAnthropic))


class GuardedAnthropic(Proxy):
    """An Anthropic client whose Messages calls go through a budget (see :func:`wrap_anthropic`)."""

    def __init__(self, client: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(client)
        self.budgetlens_run = guard.run
        self.messages = _Messages(client.messages, guard, is_async)


def _prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("system"), kwargs.get("messages"), kwargs.get("tools"))


class _Messages(Proxy):
    def __init__(self, messages: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(messages)
        self._guard, self._is_async = guard, is_async
        self.create = self._acreate if is_async else self._create

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        kwargs = dict(kwargs)
        return kwargs, self._guard.reserve(kwargs, _prompt(kwargs), ("max_tokens",), "max_tokens")

    def _settle(self, kwargs: dict[str, Any], res: Any, response: Any) -> Any:
        if kwargs.get("stream") is True:
            return (GuardedAsyncStream if self._is_async else GuardedStream)(response, self._guard, res)
        self._guard.record(res, getattr(response, "usage", None), getattr(response, "model", None))
        return response

    def _create(self, **kwargs: Any) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = self._target.create(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response)

    async def _acreate(self, **kwargs: Any) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = await self._target.create(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response)

    def stream(self, **kwargs: Any) -> Any:
        """``client.messages.stream(...)``: the SDK's stream manager, guarded (reserved on
        entry, recorded with the final message's usage on exit)."""
        kwargs, res = self._prepare(kwargs)
        try:
            manager = self._target.stream(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return GuardedStreamManager(manager, self._guard, res)
