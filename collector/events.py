"""Delivery of a guarded run's budget events: a span event on the run span, then ``on_event``.

What each event means is in :mod:`collector.actions` (:class:`BudgetEvent`); when the guard emits
one is :class:`collector.guard.RunBudget`'s concern. Delivery never raises into the agent: a
failing exporter or callback is logged and the others still run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from collector.actions import BudgetEvent

log = logging.getLogger(__name__)

__all__ = ["EventDispatcher", "OnEvent", "as_callbacks"]

#: ``on_event``: a callable or an iterable of callables taking a :class:`BudgetEvent`, or None.
OnEvent = Callable[[BudgetEvent], Any] | Iterable[Callable[[BudgetEvent], Any]] | None


def as_callbacks(on_event: OnEvent) -> tuple[Callable[[BudgetEvent], Any], ...]:
    """``on_event`` as a tuple of callables. Raises ValueError when it is neither None, a
    callable nor an iterable of callables."""
    if on_event is None:
        return ()
    if callable(on_event):
        return (on_event,)
    callbacks = None
    if isinstance(on_event, Iterable) and not isinstance(on_event, (str, bytes)):
        callbacks = tuple(on_event)
    if callbacks is None or not all(callable(c) for c in callbacks):
        raise ValueError("on_event must be a callable taking a BudgetEvent, an iterable of such "
                         f"callables, or None; got {on_event!r}")
    return callbacks


class EventDispatcher:
    """Delivers one run's :class:`BudgetEvent` objects, in order: ``telemetry.event(event)`` (a
    :class:`collector.telemetry.RunTelemetry`), then each ``on_event`` callback.

    Exceptions from either are logged with the run id and the event name, never raised.
    Raises ValueError when ``on_event`` is neither None, a callable nor an iterable of callables.
    """

    __slots__ = ("_telemetry", "_callbacks", "_run_id")

    def __init__(self, telemetry: Any, on_event: OnEvent, run_id: str) -> None:
        self._telemetry = telemetry
        self._callbacks = as_callbacks(on_event)
        self._run_id = run_id

    def __call__(self, event: BudgetEvent) -> None:
        try:
            self._telemetry.event(event)
        except Exception:  # telemetry never breaks the agent
            log.exception("run %s: could not emit %s", self._run_id, event.name)
        for callback in self._callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("run %s: on_event callback failed for %s", self._run_id, event.name)
