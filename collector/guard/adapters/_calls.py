"""What every adapter does around one model call: reserve from the request, record the
response's usage (a stream's included), release or charge a failed call. SDK-free."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

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
    ``max_output_tokens``: the output cap (tokens) added to requests that set none."""

    def __init__(
        self,
        run: Any,
        provider: str,
        count_tokens: Callable[[dict[str, Any]], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
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
        self.run, self.provider = run, provider
        self._count, self._ceiling = count_tokens, max_output_tokens

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
        BudgetExceeded before the call when it does not fit."""
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

    def failed(self, res: Reservation, error: BaseException) -> None:
        """Settle the reservation of a call that raised: an error the API answered with a status
        (``status_code``: the request was refused, nothing generated) releases it; any other
        (timeout, lost connection: the model may have run) is recorded with unknown usage, charged
        its reservation."""
        if isinstance(getattr(error, "status_code", None), int):
            self.run.release(res)
        else:
            self.record(res, None, error=error)


class GuardedStream:
    """A streamed response that records its usage when it ends: exhausted, closed, or broken
    (then with the usage seen so far, or unknown). Iterate it as the SDK's stream; other
    attributes pass through."""

    def __init__(self, stream: Any, guard: CallGuard, res: Reservation) -> None:
        self._stream, self._guard, self._res = stream, guard, res
        self._usage = UsageAccumulator(guard.provider)
        self._model: str | None = None
        self._open = True

    def _take(self, chunk: Any) -> Any:
        if getattr(chunk, "usage", None) is not None or getattr(chunk, "type", None) in _USAGE_EVENTS:
            self._usage.add(chunk)
        if self._model is None:
            model = getattr(chunk, "model", None) or getattr(getattr(chunk, "message", None), "model", None)
            model = model or getattr(getattr(chunk, "response", None), "model", None)
            self._model = model if isinstance(model, str) else None
        return chunk

    def _end(self, error: BaseException | None = None) -> None:
        if self._open:
            self._open = False
            self._guard.record(self._res, self._usage.usage, self._model, error)

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
        except StopIteration:
            self._end()
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        return self._take(chunk)

    def close(self) -> None:
        """Close the SDK stream and record the usage seen (unknown when none arrived)."""
        try:
            self._stream.close()
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
        except StopAsyncIteration:
            self._end()
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        return self._take(chunk)

    async def aclose(self) -> None:
        """Close the SDK stream and record the usage seen."""
        try:
            await self._stream.close()
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

    def _end(self, error: BaseException | None, found: tuple[Any, Any] | None) -> None:
        usage, model = found or (None, None)
        if error is not None and usage is None and isinstance(getattr(error, "status_code", None), int):
            self._guard.run.release(self._res)
            return
        self._guard.record(self._res, usage, model, error)

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
            found = None
            with contextlib.suppress(Exception):  # nothing with usage arrived: unknown
                found = _final_usage(self._stream)
            self._end(exc, found)

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
            found = None
            with contextlib.suppress(Exception):  # nothing with usage arrived: unknown
                found = _final_usage(self._stream)
                if inspect.isawaitable(found):  # the async helpers' get_final_response
                    final = await found
                    found = (final.usage, final.model)
            self._end(exc, found)


def _final_usage(stream: Any) -> Any:
    """(usage, model) of a stream helper's result: Anthropic's message snapshot, OpenAI's chat
    completion snapshot, or OpenAI's final response (read to its end if the caller did not); for
    an async OpenAI helper, the awaitable of its final response instead."""
    for name in ("current_message_snapshot", "current_completion_snapshot"):
        if hasattr(type(stream), name):
            snapshot = getattr(stream, name)
            return snapshot.usage, snapshot.model
    final = stream.get_final_response()
    return final if inspect.isawaitable(final) else (final.usage, final.model)


#: Stream event types that carry usage (Anthropic ``message_start``/``message_delta``, Responses'
#: final events).
_USAGE_EVENTS = frozenset(
    {"message_start", "message_delta", "response.completed", "response.incomplete", "response.failed"}
)
