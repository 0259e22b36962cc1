"""A guarded run's budget events: built from the run's ledger, delivered as a span event on the
run span, then to ``on_event``; and the once-per-model notice that a cost limit cannot be enforced.

What each event means is in :mod:`budgetlens.guard.results` (:class:`BudgetEvent`); when the guard emits
one is :class:`budgetlens.guard.run_budget.RunBudget`'s concern. Delivery never raises into the agent: a
failing exporter or callback is logged and the others still run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from budgetlens import semconv as sc
from budgetlens.config import ENV_PRICES_FILE
from budgetlens.guard.results import (
    EVENT_FOR_ACTION,
    EVENT_NAME_ALERT,
    EVENT_NAME_LIMIT_CHANGED,
    Action,
    BudgetEvent,
)
from budgetlens.guard.stops import alerts_reached, cross_thresholds

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
        raise ValueError(
            "on_event must be a callable taking a BudgetEvent, an iterable of such "
            f"callables, or None; got {on_event!r}"
        )
    return callbacks


class EventDispatcher:
    """Builds one run's :class:`BudgetEvent` objects (:meth:`emit`, :meth:`thresholds`,
    :meth:`cost_unenforced`) and delivers each, in order: ``telemetry.event(event)`` (a
    :class:`budgetlens.guard.telemetry.RunTelemetry`), then each ``on_event`` callback.

    Exceptions from either are logged with the run id and the event name, never raised.
    Raises ValueError when ``on_event`` is neither None, a callable nor an iterable of callables.
    ``cost_unenforced_models``: the models :meth:`cost_unenforced` warned about, in order;
    ``chain_position``: the index of the model to call in the run's model chain (moved by a
    DOWNGRADE, see :meth:`thresholds`); ``downgrades``: how many times it moved (kept across
    :meth:`clear_thresholds`); ``downgrade_pending``: the chain moved and no ``before_turn`` has
    reported it yet (see :meth:`take_downgrade`).
    """

    __slots__ = (
        "_telemetry",
        "_callbacks",
        "_run_id",
        "_fired",
        "chain_position",
        "cost_unenforced_models",
        "downgrades",
        "downgrade_pending",
        "alerts_fired",
    )

    def __init__(self, telemetry: Any, on_event: OnEvent, run_id: str) -> None:
        self._telemetry = telemetry
        self._callbacks = as_callbacks(on_event)
        self._run_id = run_id
        self.cost_unenforced_models: tuple[str, ...] = ()
        self.downgrades = 0
        self.clear_thresholds()

    def clear_thresholds(self) -> None:
        """Forget the fired thresholds and alerts (they may fire again) and go back to the
        chain's first model."""
        self._fired: set[Action] = set()
        self.alerts_fired: set[str] = set()
        self.chain_position = 0
        self.downgrade_pending = False

    def take_downgrade(self) -> bool:
        """True once after each move along the chain (then False until the next move)."""
        pending, self.downgrade_pending = self.downgrade_pending, False
        return pending

    def emit(
        self,
        action: Action | None,
        use: Any,
        limits: Mapping[str, float | None],
        *,
        name: str | None = None,
        **fields: Any,
    ) -> None:
        """Build and deliver one event: ``action``'s event (or ``name``, for events without an
        action), with the run's used and remaining tokens and percent taken from ``use`` (a
        :class:`budgetlens.guard.ledger.RunLedger`) against ``limits``; ``fields``: the other
        :class:`BudgetEvent` fields (reason, models, tool name)."""
        self(
            BudgetEvent(
                name=name or EVENT_FOR_ACTION[action],  # type: ignore[index]
                action=action,
                run_id=self._run_id,
                used_tokens=use.used_tokens,
                remaining_tokens=use.remaining(limits["max_total_tokens"]),
                percent=round(100 * use.share(limits), 1),
                **fields,
            )
        )

    def thresholds(
        self,
        use: Any,
        limits: Mapping[str, float | None],
        chain: tuple[str, ...],
        warn_at: float,
        downgrade_at: float,
        summarize_at: float,
    ) -> tuple[Action, tuple[Action, ...]]:
        """Emit the thresholds (fractions) crossed after a recorded call, each once until
        :meth:`clear_thresholds` (see :func:`budgetlens.guard.stops.cross_thresholds`); a DOWNGRADE
        moves :attr:`chain_position` to the next model of ``chain``. Returns the advised
        :class:`Action` and the actions crossed now (least severe first)."""
        position = self.chain_position
        advised, crossed = cross_thresholds(
            use.share(limits), self._fired, warn_at, downgrade_at, summarize_at, position + 1 < len(chain)
        )
        for action in crossed:
            if action is Action.DOWNGRADE:
                self.chain_position = position = position + 1
                self.downgrades += 1
                self.downgrade_pending = True
                self.emit(action, use, limits, from_model=chain[position - 1], to_model=chain[position])
            else:
                self.emit(action, use, limits)
        return advised, tuple(crossed)

    def limit_changed(
        self,
        use: Any,
        limits: Mapping[str, float | None],
        name: str,
        previous: float | None,
        new: float | None,
        changed_by: str | None,
    ) -> None:
        """Deliver a ``budgetlens.limit_changed`` event (reason: the limit's name) and log it."""
        log.info(
            "run %s: %s changed from %s to %s by %s", self._run_id, name, previous, new, changed_by or "?"
        )
        self.emit(
            None,
            use,
            limits,
            name=EVENT_NAME_LIMIT_CHANGED,
            reason=name,
            previous_limit=previous,
            new_limit=new,
            changed_by=changed_by,
        )

    def alerts(
        self,
        use: Any,
        limits: Mapping[str, float | None],
        alert_limits: Mapping[str, float],
        elapsed_s: float,
    ) -> None:
        """Deliver a ``budgetlens.alert`` event and a WARNING log for each alert-only limit reached
        now (once each until :meth:`clear_thresholds`); the run goes on."""
        if not alert_limits:
            return
        for name, limit in alerts_reached(alert_limits, self.alerts_fired, use, elapsed_s):
            log.warning("run %s: alert-only limit %s=%s reached", self._run_id, name, limit)
            self.emit(None, use, limits, name=EVENT_NAME_ALERT, reason=name, new_limit=limit)

    def cost_unenforced(self, model: str | None, use: Any, limits: Mapping[str, float | None]) -> None:
        """Warn, once per run and model, that ``limits["max_cost_usd"]`` is not enforced for
        ``model`` (it has no price, so its calls add no cost): a log WARNING naming the model and
        how to add a price, and a ``budgetlens.warning`` event with reason ``cost_unenforced``.
        The run is not stopped: blocking on an unknown price would stop every agent on a
        private model."""
        label = model or "(no model name)"
        if label in self.cost_unenforced_models:
            return
        self.cost_unenforced_models += (label,)
        log.warning(
            "run %s: max_cost_usd=%s is not enforced for model %s: it has no price; add "
            "one in a price file named by %s",
            self._run_id,
            limits["max_cost_usd"],
            label,
            ENV_PRICES_FILE,
        )
        self.emit(Action.WARN, use, limits, reason=sc.REASON_COST_UNENFORCED, model=model)

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
