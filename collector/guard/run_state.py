"""One guarded run's state and the order of its checks, records and events (design §1).

:class:`RunState` is what :class:`budgetlens.guard.run_budget.RunBudget` holds: the limits, the
ledger (:class:`budgetlens.guard.ledger.RunLedger`), the shared steps
(:class:`budgetlens.guard.shared.SharedSteps`), the event dispatcher and the run's telemetry, all
changed under one lock. ``RunBudget`` checks arguments and prices calls outside the lock, calls
one method here per step, and documents the public behaviour; the decisions themselves are in
:mod:`budgetlens.guard.stops`. Methods named ``*_locked`` expect the caller to hold :attr:`lock`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from budgetlens import semconv as sc
from budgetlens.guard import calls, plain
from budgetlens.guard import options as opt
from budgetlens.guard import stops as lim
from budgetlens.guard.calls import PROBE_USAGE, PriceCall, RecordedCall, paid_cost
from budgetlens.guard.effects import EffectLog
from budgetlens.guard.events import EventDispatcher
from budgetlens.guard.ledger import RunLedger
from budgetlens.guard.limit_change import set_limits
from budgetlens.guard.options import RunOptions
from budgetlens.guard.results import (
    EVENT_NAME_TOOL_CALL,
    Action,
    BudgetStats,
    LimitChange,
    Reservation,
    RunResult,
)
from budgetlens.guard.shared import SharedSteps
from budgetlens.guard.telemetry import RunTelemetry
from budgetlens.guard.wrap_up import WrapUp
from budgetlens.limits import MAX_TOKENS
from budgetlens.pricing import estimate_cost_usd
from budgetlens.usage import Usage

__all__ = ["RunState"]

log = logging.getLogger(__name__)


class RunState:
    """The state of one run built from checked ``options``; ``price`` prices recorded calls.

    The clock starts here (after the caller warmed the prices). Raises only BudgetExceeded (a
    refusal, kept by the ledger and emitted as ``budgetlens.stop``), RuntimeError for a step after
    :meth:`finish_locked`, and ValueError as the ledger does for a reservation that is not open.
    """

    def __init__(self, options: RunOptions, price: PriceCall = paid_cost) -> None:
        self.options = options
        self.run_id = options.run_id or uuid.uuid4().hex
        self.limits: dict[str, float | None] = dict(options.limits)
        self.alert_limits: dict[str, float] = dict(options.alert_limits)
        self.shared = SharedSteps(*options.scoped(), self.run_id)
        self.effects = EffectLog(self.run_id)
        self.limit_changes: list[LimitChange] = []
        self.last_actions: tuple[Action, ...] = ()
        self.lock = threading.RLock()  # callbacks may read stats()
        self._price = price
        self._clock = options.clock
        self.started = self._clock()
        self.telemetry = RunTelemetry(
            options.tracer,
            self.run_id,
            options.task_type,
            options.agent_name,
            self.limits,
            options.attribution,
        )
        self.dispatch = EventDispatcher(self.telemetry, options.callbacks, self.run_id)
        self._next_id = 0
        self.finished: RunResult | None = None
        self.use = RunLedger()
        self.wrap_up = WrapUp(options.wrap_up_tokens, options.wrap_up_usd)
        self.countdown_fired: set[float] = set()  # countdown_at thresholds already shown
        # A share of the limits below this crosses no threshold and advises nothing (hot path).
        self._quiet_below = min(options.warn_at, options.downgrade_at, options.summarize_at, 1.0)
        self._plain = plain.plain_run(options, self.alert_limits, self.shared, price)  # fixed for the run
        self.children: list[Any] = []  # RunBudget.child's runs (budgetlens.guard.children)

    def elapsed_s(self) -> float:
        """Seconds since the run started (on the run's clock)."""
        return self._clock() - self.started

    @property
    def model(self) -> str | None:
        """The chain's current model (None without a chain)."""
        chain = self.options.model_chain
        return chain[self.dispatch.chain_position] if chain else None

    # --- checks (raise before spending) -----------------------------------------------------
    def stop_on(self, stop: lim.Stop | None) -> None:
        """Raise ``stop`` (if any) as BudgetExceeded; the first refusal since the last recorded call
        is kept by the ledger (the run's stop unless it records a call later) and emitted."""
        if stop is None:
            return
        exc = stop.exception()
        if self.use.refuse(exc):
            self.dispatch.emit(Action.STOP, self.use, self.limits, reason=stop.reason)
        raise exc

    def check_open(self) -> None:
        """Raise RuntimeError once the run is finished."""
        if self.finished is not None:
            raise RuntimeError(
                f"run {self.run_id} is finished: no turn, reservation, record or tool call after finish()"
            )

    def _check_time(self) -> None:
        limit = self.limits["max_duration_s"]
        if limit is not None:  # the clock is read only when there is a time limit
            self.stop_on(lim.time_stop(limit, self.elapsed_s()))

    def _check_turns(self) -> None:
        limit = self.limits["max_turns"]
        if limit is not None:  # turns: recorded calls plus open reservations
            self.stop_on(lim.count_stop(sc.STOP_BUDGET_TURNS, limit, self.use.turns + self.use.open_calls))

    def _check_spent(self) -> None:
        if self.finished is not None:
            self.check_open()
        self.stop_on(self.spent())

    def spent(self) -> lim.Stop | None:
        """The first spent budget, in the order ``before_turn`` checks them (time, the wrap-up's
        final call made, cost and spend windows, tokens, the shared pool or parent); None while
        each has room. Checks only: nothing is emitted or kept."""
        limit = self.limits["max_duration_s"]
        if limit is not None and (stop := lim.time_stop(limit, self.elapsed_s())) is not None:
            return stop
        if self.wrap_up.done:
            return self.wrap_up.stop()
        shared = self.shared
        stop = lim.spent_stop(self.limits, self.use, shared.spend_stop if shared.spend else None)
        if stop is None and (shared.pool is not None or shared.parent is not None):
            stop = shared.pool_stop()
        return stop

    def _thresholds(self) -> tuple[Action, tuple[Action, ...]]:
        o, use, limits, wrap = self.options, self.use, self.limits, self.wrap_up
        crossed: tuple[Action, ...]
        if use.share(limits) < self._quiet_below:  # below every threshold: none is crossed
            advised, crossed = Action.CONTINUE, ()
        else:
            advised, crossed = self.dispatch.thresholds(
                use, limits, o.model_chain, o.warn_at, o.downgrade_at, o.summarize_at
            )
        if wrap.tokens is None and wrap.usd is None:  # no wrap-up slice: nothing to advise
            return advised, crossed
        return wrap.advise(advised, crossed, limits, use)

    def _alerts(self) -> None:
        if self.alert_limits:
            self.dispatch.alerts(self.use, self.limits, self.alert_limits, self.elapsed_s())

    # --- steps (the caller holds the lock) ----------------------------------------------------
    def child_spent_locked(self) -> None:
        """A child run's call or paid tool fee was just counted in this run's ledger
        (:mod:`budgetlens.guard.children`): deliver the thresholds (warn, downgrade, summarize:
        events and callbacks) and alert-only limits it crossed, now, as a call of this run does;
        the advised action is this run's at its next step."""
        self._thresholds()
        self._alerts()

    def before_turn_locked(self) -> Action:
        """The checks and thresholds of ``RunBudget.before_turn``; returns the advised action."""
        self._check_spent()
        self._check_turns()
        advised, crossed = self._thresholds()
        if self.dispatch.take_downgrade():
            advised = max(advised, Action.DOWNGRADE)
            if Action.DOWNGRADE not in crossed:
                crossed = tuple(sorted((*crossed, Action.DOWNGRADE)))
        self.last_actions = crossed
        self._alerts()
        return advised

    def reserve(
        self,
        tokens: int,
        model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        final: bool = False,
    ) -> Reservation:
        """``RunBudget.reserve``: check the estimate and its split, estimate its cost outside the
        lock, then check and hold it under the lock."""
        if (
            input_tokens is None
            and output_tokens is None
            and tokens.__class__ is int
            and 0 <= tokens <= MAX_TOKENS
        ):
            output = None  # the common case, checked inline (hot path)
        else:
            output = opt.split_estimate(tokens, input_tokens, output_tokens)
        if model is not None:
            opt.check_model(model)
        if not model:
            model = self.model if self.options.model_chain else None
        cost, priced = 0.0, True
        if model and (self.limits["max_cost_usd"] is not None or self.shared.spend is not None):
            # Without a model (here, on the reservation or from the chain) the cost cannot be
            # estimated before the call: it is counted when record() names the model (README).
            estimate = estimate_cost_usd(model, tokens, output, self.options.provider)
            cost, priced = (0.0, False) if estimate is None else (estimate, True)
        with self.lock:
            if (
                self._plain
                and priced
                and not final
                and self.use.unknown_at is None
                and not self.shared.parent
            ):
                return plain.reserve(self, tokens, output, model, cost)
            return self._reserve_locked(tokens, output, model, cost, priced, final)

    def _reserve_locked(
        self,
        tokens: int,
        output_tokens: int | None,
        model: str | None,
        cost_usd: float,
        priced: bool,
        final: bool = False,
    ) -> Reservation:
        if final and not self.wrap_up.available:
            raise ValueError(
                f"run {self.run_id}: final=True needs an unused wrap-up slice (wrap_up_tokens/_usd)"
            )
        if not priced:
            self.dispatch.cost_unenforced(model, self.use, self.limits)
        self._check_spent()
        use, o, wrap, shared = self.use, self.options, self.wrap_up, self.shared
        unsliced = final or (wrap.tokens is None and wrap.usd is None)
        limits = self.limits if unsliced else wrap.ordinary(self.limits)
        if use.unknown_at is not None:  # a call without usage was recorded: the policy decides
            residual = o.unknown_usage_residual_tokens
            self.stop_on(lim.unknown_usage_stop(o.unknown_usage, residual, limits, use, tokens))
        stop = lim.reserve_stop(limits, use, tokens, output_tokens or 0, cost_usd)
        if stop is not None:
            self.stop_on(stop)
        if self.limits["max_turns"] is not None:
            self._check_turns()
        if shared.spend is not None or shared.pool is not None or shared.parent is not None:
            self.stop_on(
                shared.reserve(tokens, cost_usd, self._next_id + 1, output_tokens=output_tokens or 0)
            )
        self._next_id += 1
        turn = use.turns + len(use.reservations) + 1
        res = Reservation(
            self._next_id, tokens, turn, model, time.time_ns(), output_tokens or 0, cost_usd, self.run_id
        )
        use.reserve(res)
        if final:
            self.wrap_up.final_id = res.id
            self.dispatch.emit(Action.WRAP_UP, use, self.limits)
        return res

    def tool_call_locked(self, name: str, fee_usd: float = 0.0) -> None:
        """Check and count one tool call named ``name`` costing ``fee_usd`` (USD; emitted as a span
        event). A fee is checked against ``max_cost_usd`` and the spend windows, then counted as tool
        cost; it may cross the thresholds (their actions are in :attr:`last_actions`)."""
        self.check_open()
        self._check_time()
        use = self.use
        self.stop_on(lim.count_stop(sc.STOP_BUDGET_TOOLS, self.limits["max_tool_calls"], use.tool_calls))
        if fee_usd:
            self.stop_on(lim.tool_cost_stop(self.limits["max_cost_usd"], use, name, fee_usd))
            self.stop_on(self.shared.charge_tool(fee_usd, name))
            use.tool_cost_usd += fee_usd
        use.tool_calls += 1
        fee = fee_usd if fee_usd else None
        self.dispatch.emit(
            None, use, self.limits, name=EVENT_NAME_TOOL_CALL, tool_name=name, tool_cost_usd=fee
        )
        if fee_usd:
            self.last_actions = self._thresholds()[1]
        self._alerts()

    def record(
        self,
        usage: Any,
        model: str | None,
        reservation: Reservation | None,
        provider: str | None,
        response_model: str | None,
        error_type: str | None,
    ) -> Action:
        """``RunBudget.record``: normalize ``usage``, price it outside the lock when the model is
        known without settling, record it under the lock, then emit the model call span."""
        provider = provider or self.options.provider
        if usage.__class__ is Usage and self._plain and self.shared.parent is None:
            call = plain.record(self, usage, model, reservation, provider, response_model)
            if self.telemetry.recording:
                self.telemetry.model_call(call, response_model, provider, None, error_type)
            return call.action
        needs_cost = self.needs_cost
        normalized, missing, early = calls.prepare_call(
            usage, model, reservation, provider, response_model, self._price, needs_cost
        )
        with self.lock:
            call = self._record_locked(
                reservation, normalized, missing, model, provider, early, response_model, needs_cost
            )
        if self.telemetry.recording:
            status = sc.USAGE_PARTIAL if missing else None
            self.telemetry.model_call(call, response_model, provider, status, error_type)
        return call.action

    @property
    def needs_cost(self) -> bool:
        """Whether a call's price is needed before the next call: a cost limit, a spend window or a
        parent run (a child's cost is settled in its parent as it happens) checks it. Otherwise the
        usage is priced when the cost is read (results, stats, the run span), and by the collector."""
        limits, options, shared = self.limits, self.options, self.shared
        return (
            limits["max_cost_usd"] is not None
            or shared.spend is not None
            or shared.parent is not None
            or bool(options.wrap_up_usd)
        )

    def _record_locked(
        self,
        reservation: Reservation | None,
        usage: Usage | None,
        missing: tuple[str, ...],
        model: str | None,
        provider: str | None,
        early: tuple[bool, float | None],
        response_model: str | None = None,
        needs_cost: bool = True,
    ) -> RecordedCall:
        """Settle ``reservation``, complete a partial usage, price the call (unless ``early`` =
        (priced, cost) says it was), count it, settle the shared steps, warn about an unenforced
        cost limit, cross thresholds and alerts."""
        if self.finished is not None:
            self.check_open()
        use = self.use
        res = use.settle(reservation, self.run_id)
        if res is not None and res.id == self.wrap_up.final_id:
            self.wrap_up.done = True  # the final call: the run stops after it
        model = model or (res.model if res else None)
        priced = model or response_model  # what prices the call
        reserved = res.tokens if res else 0
        if missing and usage is not None:  # partial usage: the missing part is charged
            usage = use.complete_partial(usage, missing, res)
        cost, later = early[1], None
        if not early[0]:
            cost, later = calls.price_at_record(priced, usage, provider, self._price, needs_cost)
        shared = self.shared
        if shared.pool is None and shared.parent is None:
            first_unknown = use.add_call(usage, cost, reserved, later)  # a turn; releases are not
        else:
            used_before = use.used_tokens
            first_unknown = use.add_call(usage, cost, reserved, later)
            shared.settle_call(res, use.used_tokens - used_before, usage, cost)
        if first_unknown:
            log.warning("run %s: call without usage; charged %d tokens", self.run_id, first_unknown)
        if shared.spend is not None:
            shared.settle_spend(res, cost, usage_known=usage is not None)
        elif (
            cost is None
            and self.limits["max_cost_usd"] is not None
            and (usage is not None or self._price(priced, PROBE_USAGE, provider) is None)
        ):
            self.dispatch.cost_unenforced(priced, use, self.limits)  # no price for model
        action, self.last_actions = self._thresholds()
        if self.wrap_up.done:
            action = Action.STOP
        if self.alert_limits:
            self._alerts()
        remaining = use.remaining(self.limits["max_total_tokens"])
        start_ns = res.start_ns if res else None
        return RecordedCall(
            action, model, start_ns, usage, cost, reserved, use.used_tokens, use.turns, remaining
        )

    def release_locked(self, reservation: Reservation) -> None:
        """Give back ``reservation`` (no turn); nothing after the run finished."""
        if self.finished is None:
            res = self.use.settle(reservation, self.run_id)
            if res is not None:
                self.shared.release(res)
                if res.id == self.wrap_up.final_id:
                    self.wrap_up.final_id = None  # the final call failed unsent: it may be retried

    def set_max(self, limits: Mapping[str, float | None], changed_by: str | None) -> None:
        """``RunBudget.set_max``: see :func:`budgetlens.guard.limit_change.set_limits`."""
        set_limits(self, limits, changed_by)

    def reset_locked(self) -> None:
        """Clear use (open reservations given back) and the fired thresholds."""
        if self.finished is None:
            self.shared.settle_open(self.use, charge=False)  # open reservations are dropped
        self.use = RunLedger()
        self.wrap_up = WrapUp(self.options.wrap_up_tokens, self.options.wrap_up_usd)
        self.dispatch.clear_thresholds()  # the model chain restarts too

    def stats_locked(self) -> BudgetStats:
        """The ledger's snapshot under the current limits."""
        return self.use.stats(self.limits, self.elapsed_s(), self.dispatch.cost_unenforced_models)
