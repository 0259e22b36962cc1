"""The guarded ``create`` / ``parse`` / ``stream`` of one SDK resource, shared by the client
wrappers (:mod:`budgetlens.guard.adapters.openai_client`, ``anthropic_client``): they differ only
in how a request is prepared (its prompt parts, output cap and provider options). SDK-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from budgetlens.guard.adapters._calls import (
    CallGuard,
    GuardedAsyncStream,
    GuardedStream,
    GuardedStreamManager,
)
from budgetlens.guard.results import Reservation

__all__ = ["GuardedCalls", "Prepare"]

#: ``prepare(kwargs) -> (kwargs to send, reservation)``: copies the request, adds what the provider
#: needs and reserves from the run (raising BudgetExceeded before the call when it does not fit).
Prepare = Callable[[dict[str, Any]], tuple[dict[str, Any], Reservation]]


class GuardedCalls:
    """The call methods of the SDK resource ``target``: ``create`` and ``parse`` (sync or async as
    ``is_async``) send the request that ``prepare`` returns, record the response's usage (a
    ``stream=True`` request returns a guarded stream that records it when it ends) and settle the
    reservation of a call that raised (``CallGuard.failed``) before re-raising."""

    def __init__(self, target: Any, guard: CallGuard, is_async: bool, prepare: Prepare) -> None:
        self._target, self._guard, self._is_async, self._prepare = target, guard, is_async, prepare
        self.create: Callable[..., Any] = self._acreate if is_async else self._create
        self.parse: Callable[..., Any] = self._aparse if is_async else self._parse

    def _settle(self, kwargs: dict[str, Any], res: Reservation, response: Any) -> Any:
        if kwargs.get("stream") is True:
            return (GuardedAsyncStream if self._is_async else GuardedStream)(response, self._guard, res)
        self._guard.responded(res, response)
        return response

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = getattr(self._target, method)(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response)

    async def _acall(self, method: str, kwargs: dict[str, Any]) -> Any:
        kwargs, res = self._prepare(kwargs)
        try:
            response = await getattr(self._target, method)(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return self._settle(kwargs, res, response)

    def _create(self, **kwargs: Any) -> Any:
        return self._call("create", kwargs)

    def _parse(self, **kwargs: Any) -> Any:
        return self._call("parse", kwargs)

    async def _acreate(self, **kwargs: Any) -> Any:
        return await self._acall("create", kwargs)

    async def _aparse(self, **kwargs: Any) -> Any:
        return await self._acall("parse", kwargs)

    def stream(self, kwargs: dict[str, Any], res: Reservation) -> GuardedStreamManager:
        """The SDK's ``stream(**kwargs)`` helper for a request already prepared (``res`` its
        reservation), guarded: recorded on exit of its ``with`` / ``async with`` block with the
        final usage."""
        try:
            manager = self._target.stream(**kwargs)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        return GuardedStreamManager(manager, self._guard, res)
