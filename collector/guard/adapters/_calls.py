"""What every adapter does around one model call: reserve from the request, record the
response's usage (a stream's included), release or charge a failed call. SDK-free."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

from budgetlens.guard.adapters._tools import StreamToolCalls, ToolCallCount, response_tool_calls
from budgetlens.guard.adapters._wrap_up import add_text, reserve_final
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.guard.results import Reservation
from budgetlens.usage import UsageAccumulator

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "CallGuard",
    "GuardedAsyncStream",
    "GuardedStream",
    "GuardedStreamManager",
]

#: ``max_tokens`` an adapter adds to a request that sets none (capped by the budget's output left).
DEFAULT_MAX_OUTPUT_TOKENS = 4096


def add_countdown(run: Any, kwargs: dict[str, Any], cap_key: str, prompt_parts: tuple[Any, ...]) -> tuple:
    """Add the run's countdown notice (``RunBudget.countdown_notice``, opt-in by ``countdown_at``), if
    one is due, to the request ``kwargs`` (see :func:`budgetlens.guard.adapters._wrap_up.add_text`);
    returns the prompt parts with the notice, so its tokens are reserved and counted."""
    notice = run.countdown_notice()
    if not notice:
        return prompt_parts
    add_text(kwargs, cap_key, notice)
    return (*prompt_parts, notice)


class CallGuard:
    """One adapter's link to a ``RunBudget``: ``run``; ``provider`` (``gen_ai.provider.name``);
    ``count_tokens``: a callable taking the request's keyword arguments and returning its prompt
    tokens (default :func:`budgetlens.guard.estimate.estimate_tokens` over its text);
    ``max_output_tokens``: the output cap (tokens) added to requests that set none;
    ``count_tool_calls``: count the tool calls responses ask for against ``max_tool_calls`` (see
    :mod:`budgetlens.guard.adapters._tools`)."""

    def __init__(
        self,
        run: Any,
        provider: str,
        count_tokens: Callable[[dict[str, Any]], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        count_tool_calls: bool = True,
    ) -> None:
        if count_tokens is not None and not callable(count_tokens):
            raise ValueError(
                f"count_tokens must be a callable taking the request's kwargs, got {count_tokens!r}"
            )
        if (
            isinstance(max_output_tokens, bool)
            or not isinstance(max_output_tokens, int)
            or max_output_tokens < 1
        ):
            raise ValueError(f"max_output_tokens must be an int >= 1 (tokens), got {max_output_tokens!r}")
        if not isinstance(count_tool_calls, bool):
            raise ValueError(f"count_tool_calls must be True or False, got {count_tool_calls!r}")
        self.run, self.provider = run, provider
        self._count, self._ceiling = count_tokens, max_output_tokens
        self.tools = ToolCallCount.of(run) if count_tool_calls else None
        self.task_budget = False  # send the provider's budget hint (wrap_anthropic(task_budget=True))

    def prompt_tokens(self, kwargs: dict[str, Any], prompt_parts: tuple[Any, ...]) -> int:
        """The request's prompt tokens: ``count_tokens(kwargs)``, else the estimate of its parts."""
        return self._count(kwargs) if self._count is not None else estimate_tokens(*prompt_parts)

    def output_cap(self, prompt: int, given: Any = None) -> int:
        """The output cap to reserve (tokens): ``given`` (the request's own cap) when it is an
        int, else the budget's output left after ``prompt`` (see ``RunBudget.output_budget``),
        at most ``max_output_tokens``; the ceiling when nothing is left (the reservation then
        raises BudgetExceeded)."""
        if isinstance(given, int) and not isinstance(given, bool):
            return given
        left = self.run.output_budget(self._ceiling, prompt)
        return self._ceiling if left is None or left < 1 else left

    def reserve(
        self,
        kwargs: dict[str, Any],
        prompt_parts: tuple[Any, ...],
        cap_keys: tuple[str, ...],
        set_key: str | None,
    ) -> Reservation:
        """Reserve the request's prompt tokens + output cap (the first of ``cap_keys`` it sets;
        else :meth:`output_cap`, written into ``kwargs[set_key]`` so the call cannot outgrow its
        reservation) for ``kwargs['model']``; a request that does not fit next to the run's wrap-up
        slice becomes its final call (see :mod:`budgetlens.guard.adapters._wrap_up`). Raises
        BudgetExceeded before the call when it does not fit (also for tool calls the last response
        asked for that no longer fit)."""
        if self.tools is not None:
            self.tools.settle()
        prompt_parts = add_countdown(self.run, kwargs, set_key or cap_keys[0], prompt_parts)
        prompt = self.prompt_tokens(kwargs, prompt_parts)
        given = next((kwargs[k] for k in cap_keys if kwargs.get(k) is not None), None)
        cap = self.output_cap(prompt, given)
        if self.run.wrap_up_due(prompt + cap, kwargs.get("model"), output_tokens=cap):
            return reserve_final(self, kwargs, prompt_parts, cap_keys, set_key or cap_keys[0])
        if given is None and set_key is not None:
            kwargs[set_key] = cap
        return self.run.reserve(prompt + cap, kwargs.get("model"), output_tokens=cap)

    def record(
        self,
        res: Reservation,
        usage: Any,
        response_model: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Record the call's usage (a response, a usage object, or None: unknown)."""
        self.run.record(
            usage,
            res.model,
            reservation=res,
            provider=self.provider,
            response_model=response_model if isinstance(response_model, str) else None,
            error_type=type(error).__name__ if error is not None else None,
        )

    def asked_tools(self, names: list[str]) -> None:
        """The response asked for tool calls ``names`` (see :class:`ToolCallCount`)."""
        if self.tools is not None:
            self.tools.asked(names)

    def responded(self, res: Reservation, response: Any) -> None:
        """Record a whole response (its usage and model) and the tool calls it asks for."""
        self.record(res, getattr(response, "usage", None), getattr(response, "model", None))
        self.asked_tools(response_tool_calls(response))

    def failed(self, res: Reservation, error: BaseException) -> None:
        """Settle the reservation of a call that raised: an error the API answered with a status
        (``status_code``: the request was refused, nothing generated) releases it; any other
        (timeout, lost connection: the model may have run) is recorded with unknown usage, charged
        its reservation."""
        if answered(error):
            self.run.release(res)
        else:
            self.record(res, None, error=error)


#: Error classes that carry a status but mean the request may have reached the model (LiteLLM
#: gives its connection errors and timeouts a status of 500 / 408).
_NOT_ANSWERED = frozenset({"APIConnectionError", "Timeout", "APITimeoutError", "MidStreamFallbackError"})


def answered(error: BaseException) -> bool:
    """Whether the API answered ``error`` with an HTTP status (``status_code`` or ``code``, 4xx or
    5xx): the request was refused and nothing was generated, so its reservation is released. A
    connection error or timeout (whatever status its SDK gives it) was not answered: the model
    may have run, so the call is unknown, charged its reservation. The cause chain is followed (a
    framework's own error raised from the SDK's)."""
    seen: set[int] = set()
    exc: BaseException | None = error
    while exc is not None and id(exc) not in seen:  # a framework's error wrapping the SDK's
        seen.add(id(exc))
        if any(cls.__name__ in _NOT_ANSWERED for cls in type(exc).__mro__):
            return False
        status = getattr(exc, "status_code", None)
        if not isinstance(status, int):
            status = getattr(exc, "code", None)
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
            return True
        exc = exc.__cause__ or getattr(exc, "inner_exception", None)
    return False


class GuardedStream:
    """A streamed response that records its usage when it ends: exhausted, closed, or broken
    (then with the usage seen so far, or unknown). Iterate it as the SDK's stream; other
    attributes pass through."""

    def __init__(self, stream: Any, guard: CallGuard, res: Reservation) -> None:
        self._stream, self._guard, self._res = stream, guard, res
        self._usage = UsageAccumulator(guard.provider)
        self._tools = StreamToolCalls()
        self._started: dict[str, Any] | None = None  # Anthropic message_start usage
        self._delta = False  # Anthropic message_delta (the final output count) seen
        self._model: str | None = None
        self._open = True

    def _take(self, chunk: Any) -> Any:
        kind = getattr(chunk, "type", None)
        if getattr(chunk, "usage", None) is not None or kind in _USAGE_EVENTS:
            self._usage.add(chunk)
            if kind == "message_start":
                usage = getattr(getattr(chunk, "message", None), "usage", None)
                self._started = _as_dict(usage)
            self._delta = self._delta or kind == "message_delta"
        self._tools.add(chunk)
        if self._model is None:
            model = getattr(chunk, "model", None) or getattr(getattr(chunk, "message", None), "model", None)
            model = model or getattr(getattr(chunk, "response", None), "model", None)
            self._model = model if isinstance(model, str) else None
        return chunk

    def _raised(self, exc: BaseException, end: type[BaseException]) -> None:
        """The SDK stream raised ``exc``: its ``end`` (StopIteration, StopAsyncIteration) records the
        usage seen, any other exception the call's error."""
        self._end(None if isinstance(exc, end) else exc)

    def _end(self, error: BaseException | None = None) -> None:
        if self._open:
            self._open = False
            usage: Any = self._usage.usage
            if self._started is not None and not self._delta:
                # cut before message_delta: message_start's output count (1) is no report
                usage = _without_output(self._started)
            self._guard.record(self._res, usage, self._model, error)
            if error is None:
                self._guard.asked_tools(self._tools.names)

    def __iter__(self) -> GuardedStream:
        return self

    def __del__(self) -> None:
        # a stream dropped unfinished must not hold its reservation forever: record what it saw
        if getattr(self, "_open", False):
            with contextlib.suppress(Exception):  # never raise from a finalizer
                self._end()

    def __next__(self) -> Any:
        try:
            chunk = next(self._stream)
        except BaseException as exc:
            self._raised(exc, StopIteration)
            raise
        return self._take(chunk)

    def close(self) -> None:
        """Close the SDK stream and record the usage seen (unknown when none arrived)."""
        try:
            closer = getattr(self._stream, "close", None)
            if callable(closer):
                closer()
        finally:
            self._end()

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class GuardedAsyncStream(GuardedStream):
    """:class:`GuardedStream` for ``async for`` (the SDKs' ``AsyncStream``)."""

    def __aiter__(self) -> GuardedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._stream.__anext__()
        except BaseException as exc:
            self._raised(exc, StopAsyncIteration)
            raise
        return self._take(chunk)

    async def aclose(self) -> None:
        """Close the SDK stream and record the usage seen."""
        try:
            closer = getattr(self._stream, "close", None) or getattr(self._stream, "aclose", None)
            result = closer() if callable(closer) else None
            if inspect.isawaitable(result):
                await result
        finally:
            self._end()

    async def __aenter__(self) -> GuardedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class GuardedStreamManager:
    """Wraps an SDK's stream helper (Anthropic ``messages.stream``, OpenAI
    ``chat.completions.stream`` / ``responses.stream``; sync or async): the reservation is made
    before, and recorded on exit with the usage of the stream's message, completion or response
    (unknown when none arrived; released when the API refused with a status)."""

    def __init__(self, manager: Any, guard: CallGuard, res: Any) -> None:
        self._manager, self._guard, self._res = manager, guard, res
        self._stream: Any = None

    def _end(self, error: BaseException | None, final: Any) -> None:
        usage, model = (_final_usage(final), final.model) if final is not None else (None, None)
        if error is not None and usage is None and answered(error):
            self._guard.run.release(self._res)
            return
        self._guard.record(self._res, usage, model, error)
        if error is None and final is not None:
            self._guard.asked_tools(response_tool_calls(final))

    def __enter__(self) -> Any:
        try:
            self._stream = self._manager.__enter__()
        except BaseException as exc:
            self._guard.failed(self._res, exc)
            raise
        return self._stream

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self._manager.__exit__(exc_type, exc, tb)
        finally:
            final = None
            with contextlib.suppress(Exception):  # nothing with usage arrived: unknown
                final = _final(self._stream)
            self._end(exc, final)

    async def __aenter__(self) -> Any:
        try:
            self._stream = await self._manager.__aenter__()
        except BaseException as exc:
            self._guard.failed(self._res, exc)
            raise
        return self._stream

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return await self._manager.__aexit__(exc_type, exc, tb)
        finally:
            final = None
            with contextlib.suppress(Exception):  # nothing with usage arrived: unknown
                final = _final(self._stream)
                if inspect.isawaitable(final):  # the async helpers' get_final_response
                    final = await final
            self._end(exc, final)


def _final(stream: Any) -> Any:
    """A stream helper's result: Anthropic's message snapshot, OpenAI's chat completion
    snapshot, or OpenAI's final response (read to its end if the caller did not); for an async
    OpenAI helper, the awaitable of its final response instead."""
    for name in ("current_message_snapshot", "current_completion_snapshot"):
        if hasattr(type(stream), name):
            return getattr(stream, name)
    return stream.get_final_response()


def _final_usage(final: Any) -> Any:
    """The usage of a stream helper's result; an Anthropic message snapshot that never got its
    ``message_delta`` (no ``stop_reason``: the stream was left early) has no output count, so its
    usage is partial (output charged from the reservation), never message_start's 1."""
    usage = getattr(final, "usage", None)
    if usage is not None and getattr(final, "type", None) == "message" and final.stop_reason is None:
        return _without_output(_as_dict(usage) or {})
    return usage


def _as_dict(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    dump = getattr(usage, "model_dump", None)
    return dict(dump()) if callable(dump) else dict(usage)


def _without_output(usage: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in usage.items() if k != "output_tokens" and v is not None}


#: Stream event types that carry usage (Anthropic ``message_start``/``message_delta``, Responses'
#: final events).
_USAGE_EVENTS = frozenset(
    {"message_start", "message_delta", "response.completed", "response.incomplete", "response.failed"}
)
