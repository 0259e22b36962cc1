"""A hard budget for the official OpenAI Python client (extra ``openai``).

``client = wrap_openai(OpenAI(), run)``: every model call of the client first reserves the
prompt estimate plus the request's output cap from ``run`` (raising ``BudgetExceeded`` before the
request is sent when it does not fit), then records the response's usage:

- ``chat.completions.create`` / ``.parse`` / ``.stream`` (also under ``beta.chat``),
  ``responses.create`` / ``.parse`` / ``.stream`` (sync with ``OpenAI``, async with
  ``AsyncOpenAI``; plain or ``stream=True``), legacy ``completions.create`` and
  ``embeddings.create`` (output 0).
- A request without an output cap gets one: the budget's output left, at most
  ``max_output_tokens`` (``max_completion_tokens`` for Chat Completions, ``max_output_tokens``
  for Responses, ``max_tokens`` for legacy completions). Chat and legacy completion streams are
  sent with ``stream_options={"include_usage": True}`` so the last chunk carries usage.
- Tool calls a response asks for count against ``max_tool_calls`` (see
  :mod:`budgetlens.guard.adapters._tools`; ``count_tool_calls=False`` turns it off).
- ``with_options(...)`` and ``copy(...)`` return a guarded client on the same budget.
- Model calls the wrapper cannot guard raise :class:`UnguardedCallError` naming the method, and
  are not sent: ``with_raw_response`` / ``with_streaming_response``, ``batches``, ``realtime``,
  ``audio``, ``images``, ``videos``, ``beta.assistants`` / ``beta.threads`` / ``beta.realtime``,
  ``responses.compact`` / ``responses.connect``. Other resources (files, models, moderations,
  vector stores, ...) make no model call and pass through, as do the raw HTTP verbs
  (``client.post``), which the budget cannot see.

Errors: an API error with a status releases the reservation; a timeout or broken connection is
recorded with unknown usage (charged its reservation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._endpoint import GuardedCalls
from budgetlens.guard.adapters._proxy import Proxy
from budgetlens.guard.adapters._refuse import BY_HAND_HINT, RAW_HINT, Refused

__all__ = ["wrap_openai"]

_CHAT_CAPS = ("max_completion_tokens", "max_tokens")
_RESPONSES_CAPS = ("max_output_tokens",)
_COMPLETIONS_CAPS = ("max_tokens",)

#: Client resources that call a model the wrapper cannot guard (name -> how to guard it).
_REFUSED = {
    "batches": BY_HAND_HINT,
    "realtime": BY_HAND_HINT,
    "audio": BY_HAND_HINT,
    "images": BY_HAND_HINT,
    "videos": BY_HAND_HINT,
    "live": BY_HAND_HINT,
    "with_raw_response": RAW_HINT,
    "with_streaming_response": RAW_HINT,
}
_BETA_REFUSED = ("assistants", "threads", "realtime", "chatkit", "agents")


def wrap_openai(
    client: Any,
    run: Any,
    *,
    count_tokens: Callable[[dict[str, Any]], int] | None = None,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    provider: str = "openai",
    count_tool_calls: bool = True,
) -> Any:
    """``client`` (``openai.OpenAI`` or ``openai.AsyncOpenAI``, Azure's included) guarded by
    ``run`` (a ``RunBudget``). ``count_tokens(request_kwargs) -> int`` replaces the prompt
    estimate; ``max_output_tokens`` caps requests that set no cap; ``provider`` names the
    ``gen_ai.provider.name`` (an OpenAI-compatible server: its own name); ``count_tool_calls``
    counts the tool calls responses ask for. Raises ValueError for a client of another kind or a
    bad option."""
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise ValueError(f"wrap_openai takes an openai.OpenAI or openai.AsyncOpenAI client, got {client!r}")
    guard = CallGuard(run, provider, count_tokens, max_output_tokens, count_tool_calls)
    return GuardedOpenAI(client, guard, isinstance(client, openai.AsyncOpenAI))


class GuardedOpenAI(Proxy):
    """An OpenAI client whose model calls go through a budget (see :func:`wrap_openai`)."""

    def __init__(self, client: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(client)
        self.budgetlens_run = guard.run
        self._guard, self._is_async = guard, is_async
        self.chat = _Chat(client.chat, guard, is_async, "chat")
        self.responses = _Endpoint(client.responses, guard, is_async, _RESPONSES_CAPS, _responses_prompt)
        self.completions = _Endpoint(
            client.completions, guard, is_async, _COMPLETIONS_CAPS, _completions_prompt, "completions"
        )
        self.embeddings = _Endpoint(client.embeddings, guard, is_async, (), _embeddings_prompt, "embeddings")
        self.beta = _Beta(client.beta, guard, is_async)
        for name, hint in _REFUSED.items():
            setattr(self, name, Refused(name, hint))

    def with_options(self, **options: Any) -> GuardedOpenAI:
        """The SDK's ``with_options``, guarded by the same budget."""
        return GuardedOpenAI(self._target.with_options(**options), self._guard, self._is_async)

    def copy(self, **options: Any) -> GuardedOpenAI:
        """The SDK's ``copy``, guarded by the same budget."""
        return GuardedOpenAI(self._target.copy(**options), self._guard, self._is_async)


class _Beta(Proxy):
    def __init__(self, beta: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(beta)
        if hasattr(beta, "chat"):
            self.chat = _Chat(beta.chat, guard, is_async, "beta.chat")
        if hasattr(beta, "responses"):
            self.responses = _Endpoint(beta.responses, guard, is_async, _RESPONSES_CAPS, _responses_prompt)
        for name in _BETA_REFUSED:
            setattr(self, name, Refused(f"beta.{name}", BY_HAND_HINT))
        for name in ("with_raw_response", "with_streaming_response"):
            setattr(self, name, Refused(f"beta.{name}", RAW_HINT))


class _Chat(Proxy):
    def __init__(self, chat: Any, guard: CallGuard, is_async: bool, path: str) -> None:
        super().__init__(chat)
        self.completions = _Endpoint(
            chat.completions, guard, is_async, _CHAT_CAPS, _chat_prompt, f"{path}.completions"
        )
        for name in ("with_raw_response", "with_streaming_response"):
            setattr(self, name, Refused(f"{path}.{name}", RAW_HINT))


def _chat_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("messages"), kwargs.get("tools"), kwargs.get("response_format"))


def _responses_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (
        kwargs.get("instructions"),
        kwargs.get("input"),
        kwargs.get("tools"),
        kwargs.get("text"),
        kwargs.get("text_format"),
    )


def _completions_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("prompt"), kwargs.get("suffix"))


def _embeddings_prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("input"),)


class _Endpoint(Proxy):
    """``create`` and ``parse`` (and ``stream``) of one resource, guarded. ``caps``: the
    request keys of its output cap, the first set when missing (none: an embedding, output 0)."""

    def __init__(
        self,
        target: Any,
        guard: CallGuard,
        is_async: bool,
        caps: tuple[str, ...],
        prompt: Callable[[dict[str, Any]], tuple[Any, ...]],
        path: str = "responses",
    ) -> None:
        super().__init__(target)
        self._guard, self._caps, self._prompt = guard, caps, prompt
        self._calls = GuardedCalls(target, guard, is_async, self._prepare)
        self.create, self.parse = self._calls.create, self._calls.parse
        for name in ("with_raw_response", "with_streaming_response"):
            setattr(self, name, Refused(f"{path}.{name}", RAW_HINT))
        if caps is _RESPONSES_CAPS:
            for name in ("compact", "connect"):
                setattr(self, name, Refused(f"{path}.{name}", BY_HAND_HINT))

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        kwargs = dict(kwargs)
        if kwargs.get("stream") is True and self._caps in (_CHAT_CAPS, _COMPLETIONS_CAPS):
            options = dict(kwargs.get("stream_options") or {})
            options.setdefault("include_usage", True)  # else the stream carries no usage
            kwargs["stream_options"] = options
        if not self._caps:  # an embedding: input only
            prompt = self._guard.prompt_tokens(kwargs, self._prompt(kwargs))
            if self._guard.tools is not None:
                self._guard.tools.settle()
            return kwargs, self._guard.run.reserve(prompt, kwargs.get("model"), output_tokens=0)
        return kwargs, self._guard.reserve(kwargs, self._prompt(kwargs), self._caps, self._caps[0])

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's ``stream(...)`` helper, guarded: reserved before, recorded on exit of its
        ``with`` / ``async with`` block with the final usage."""
        kwargs, res = self._prepare({**kwargs, "stream": True})
        kwargs.pop("stream")
        return self._calls.stream(kwargs, res)
