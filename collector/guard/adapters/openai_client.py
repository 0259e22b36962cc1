"""A hard budget for the official OpenAI Python client (extra ``openai``).

``client = wrap_openai(OpenAI(), run)``: every ``client.chat.completions.create`` / ``.parse``
and ``client.responses.create`` / ``.parse``, and the ``.stream(...)`` helpers of both (sync with ``OpenAI``, async with ``AsyncOpenAI``,
plain or ``stream=True``) first reserves the prompt estimate plus the request's output cap from
``run`` (raising ``BudgetExceeded`` before the request is sent when it does not fit), then
records the response's usage. A request without an output cap gets one: the budget's output
left, at most ``max_output_tokens`` (``max_completion_tokens`` for Chat Completions,
``max_output_tokens`` for Responses). Chat Completions streams are sent with
``stream_options={"include_usage": True}`` so the last chunk carries usage. Errors: an API error
with a status releases the reservation; a timeout or broken connection is recorded with unknown
usage (charged its reservation). Everything else on the client passes through unguarded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from budgetlens.guard.adapters._calls import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    CallGuard,
    GuardedAsyncStream,
    GuardedStream,
    GuardedStreamManager,
)
from budgetlens.guard.adapters._proxy import Proxy

__all__ = ["wrap_openai"]

_CHAT_CAPS = ("max_completion_tokens", "max_tokens")
_RESPONSES_CAPS = ("max_output_tokens",)


def wrap_openai(
    client: Any,
    run: Any,
    *,
    count_tokens: Callable[[dict[str, Any]], int] | None = None,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    provider: str = "openai",
) -> Any:
    """``client`` (``openai.OpenAI`` or ``openai.AsyncOpenAI``, Azure's included) guarded by
    ``run`` (a ``RunBudget``). ``count_tokens(request_kwargs) -> int`` replaces the prompt
    estimate; ``max_output_tokens`` caps requests that set no cap; ``provider`` names the
    ``gen_ai.provider.name`` (an OpenAI-compatible server: its own name). Raises ValueError for
    a client of another kind or a bad option."""
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise ValueError(f"wrap_openai takes an openai.OpenAI or openai.AsyncOpenAI client, got {client!r}")
    guard = CallGuard(run, provider, count_tokens, max_output_tokens)
    return GuardedOpenAI(client, guard, isinstance(client, openai.AsyncOpenAI))


class GuardedOpenAI(Proxy):
    """An OpenAI client whose model calls go through a budget (see :func:`wrap_openai`)."""

    def __init__(self, client: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(client)
        self.budgetlens_run = guard.run
        self.chat = _Chat(client.chat, guard, is_async)
        self.responses = _Endpoint(client.responses, guard, is_async, _RESPONSES_CAPS, _responses_prompt)


class _Chat(Proxy):
    def __init__(self, chat: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(chat)
        self.completions = _Endpoint(chat.completions, guard, is_async, _CHAT_CAPS, _chat_prompt)


def _chat_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("messages"), kwargs.get("tools"), kwargs.get("response_format"))


def _responses_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("instructions"), kwargs.get("input"), kwargs.get("tools"), kwargs.get("text"))


class _Endpoint(Proxy):
    """``create`` and ``parse`` of Chat Completions or Responses, guarded."""

    def __init__(
        self,
        target: Any,
        guard: CallGuard,
        is_async: bool,
        caps: tuple[str, ...],
        prompt: Callable[[dict[str, Any]], tuple[Any, ...]],
    ) -> None:
        super().__init__(target)
        self._guard, self._caps, self._prompt = guard, caps, prompt
        if is_async:
            self.create = self._acreate
            self.parse = self._aparse
        else:
            self.create = self._create
            self.parse = self._parse

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        kwargs = dict(kwargs)
        if kwargs.get("stream") is True and self._caps is _CHAT_CAPS:
            options = dict(kwargs.get("stream_options") or {})
            options.setdefault("include_usage", True)  # else the stream carries no usage
            kwargs["stream_options"] = options
        return kwargs, self._guard.reserve(kwargs, self._prompt(kwargs), self._caps, self._caps[0])

    def _settle(self, kwargs: dict[str, Any], res: Any, response: Any, is_async: bool) -> Any:
        if kwargs.get("stream") is True:
            return (GuardedAsyncStream if is_async else GuardedStream)(response, self._guard, res)
        self._guard.record(res, getattr(response, "usage", None), getattr(response, "model", None))
        return response

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = getattr(self._target, method)(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response, False)

    async def _acall(self, method: str, kwargs: dict[str, Any]) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = await getattr(self._target, method)(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response, True)

    def _create(self, **kwargs: Any) -> Any:
        return self._call("create", kwargs)

    def _parse(self, **kwargs: Any) -> Any:
        return self._call("parse", kwargs)

    async def _acreate(self, **kwargs: Any) -> Any:
        return await self._acall("create", kwargs)

    async def _aparse(self, **kwargs: Any) -> Any:
        return await self._acall("parse", kwargs)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``stream(...)`` helper, guarded: reserved before, recorded on exit of its
        ``with`` / ``async with`` block with the final usage."""
        kwargs, res = self._prepare({**kwargs, "stream": True})
        kwargs.pop("stream")
        try:
            manager = self._target.stream(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return GuardedStreamManager(manager, self._guard, res)
