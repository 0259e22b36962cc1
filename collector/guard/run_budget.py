"""RunBudget: the hard budget an agent loop calls (design §1).

Check before spending, record after::

    run = RunBudget(max_total_tokens=64_000, task_type="code_generation")
    run.before_turn()                      # raises BudgetExceeded (turns, time, cost, spent)
    res = run.reserve(4_000)               # raises BudgetExceeded if 4,000 tokens do not fit
    response = client.create(model=run.model, ...)
    action = run.record(response.usage, model=run.model, reservation=res)
    result = run.finish()                  # RunResult(stop_reason="completed", ...)

All state changes happen under one lock, so reservations are atomic across threads, and, as no
method awaits, across asyncio tasks too. ``BudgetExceeded`` is the only exception raised into the
loop on purpose; callbacks, telemetry and pricing failures are logged, never raised. Misuse is
raised at once: ``ValueError`` for a bad argument or a reservation settled twice or by another
run, ``RuntimeError`` for a step after ``finish()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from budgetlens import semconv as sc
from budgetlens.guard import limits as lim
from budgetlens.guard.closing import budget_cause, charge_unrecorded
from budgetlens.guard.compress import cheapest_model, client_summarizer, compress_messages
from budgetlens.guard.effects import EffectLog
from budgetlens.guard.events import EventDispatcher, OnEvent, as_callbacks
from budgetlens.guard.ledger import RunLedger
from budgetlens.guard.limits import DEFAULT_MAX_TOTAL_TOKENS, UNKNOWN_USAGE_POLICIES
from budgetlens.guard.pool import TokenPool
from budgetlens.guard.results import (
    EVENT_NAME_TOOL_CALL,
    Action,
    BudgetExceeded,
    BudgetStats,
    Effect,
    LimitChange,
    Reservation,
    RunResult,
)
from budgetlens.guard.telemetry import RunTelemetry
from budgetlens.pricing import check_prices_file, estimate_cost_usd, price_call, warm_prices
from budgetlens.usage import Usage, normalize_usage, usage_missing_parts

log = logging.getLogger(__name__)

# DEFAULT_MAX_TOTAL_TOKENS and UNKNOWN_USAGE_POLICIES live in budgetlens.guard.limits; re-exported here.
__all__ = ["RunBudget", "DEFAULT_MAX_TOTAL_TOKENS", "UNKNOWN_USAGE_POLICIES"]

_UNSET = object()  # a call not priced yet
_PROBE = Usage(0, 0)  # prices nothing: tells whether a model has a price (not None)


def _pool_stop(draw: Callable[[], None]) -> lim.Stop | None:
    """Run a :class:`TokenPool` check or draw; its refusal as a Stop (None: it allowed)."""
    try:
        draw()
    except BudgetExceeded as exc:
        return lim.Stop(exc.reason, exc.limit, exc.used, exc.requested, exc.detail)
    return None


def _paid_cost(model: str | None, usage: Usage, provider: str | None) -> float | None:
    """USD of a call already paid for, priced now through :func:`budgetlens.pricing.price_call`
    (every billed dimension: tokens by kind and modality, cache writes by duration, web searches,
    service tier). A price file that fails only now is logged and the call counts as unpriced,
    so it is never dropped."""
    try:
        return price_call(model, usage, provider).cost_usd
    except ValueError:
        log.exception("could not price model %r; the call counts as unpriced", model)
        return None


class RunBudget:
    """A hard budget for one agent run.

    Limits (any may be None; with none given, and no ``alert_limits``, ``max_total_tokens`` is 64,000): ``max_total_tokens``,
    ``max_input_tokens``, ``max_output_tokens`` (tokens), ``max_turns`` (model calls: a limit of
    n allows exactly n), ``max_tool_calls``, ``max_duration_s`` (seconds of wall time, from
    construction), ``max_cost_usd`` (USD, priced with :func:`budgetlens.cost_usd`; calls of a
    model without a price add no cost: the run goes on, with one WARNING log and one
    ``budgetlens.warning`` event (reason ``cost_unenforced``) per model, and ``stats().status``
    names the model).

    Thresholds are fractions of the most-used token or cost limit: ``warn_at`` (0.8, one
    ``WARN``), ``downgrade_at`` (0.6, one ``DOWNGRADE`` to the next model of ``model_chain``),
    ``summarize_at`` (0.85, ``SUMMARIZE`` while above); at 1.0 ``STOP``. Each is also a span event
    and an ``on_event`` callback (a callable or an iterable of callables taking a
    :class:`BudgetEvent`).

    ``unknown_usage``: policy after a call that ended without usage (see
    :data:`UNKNOWN_USAGE_POLICIES`, default ``block``); ``unknown_usage_residual_tokens`` (default
    10 % of ``max_total_tokens``) bounds the ``residual`` policy. ``clock``: a monotonic clock in
    seconds (injectable for tests). ``tracer``: an OTel tracer (default
    ``opentelemetry.trace.get_tracer("budgetlens")``). ``spend``: an optional
    :class:`budgetlens.guard.spend.SpendTracker` shared by runs of this process. ``pool``: an
    optional :class:`budgetlens.guard.pool.TokenPool` (tokens shared by runs: each reservation
    draws from it too). ``alert_limits``: alert-only limits by constructor name (e.g.
    ``{"max_total_tokens": 2_000_000}`` for a research agent): reaching one emits one
    ``budgetlens.alert`` event and a WARNING log, and never stops the run. ``retry_policy``: a
    callable taking the default :class:`RunResult` and returning ``retryable`` (see
    :meth:`finish`). ``provider``: the
    default ``gen_ai.provider.name``. ``model_chain``: model names (strings), best first.
    Raises ``ValueError`` naming a bad argument, and naming the user price file
    (``BUDGETLENS_PRICES_FILE``) when it is missing or invalid: it is read here, before any
    call is paid for, not at the first ``record``.

    Validation and stop/threshold decisions are in :mod:`budgetlens.guard.limits`, counters (and the
    refusal that would be the run's stop) in :class:`budgetlens.guard.ledger.RunLedger`, building and
    delivering events in :mod:`budgetlens.guard.events`; this class holds the lock, the model chain
    and the order of checks, records and events.
    """

    def __init__(
        self,
        max_total_tokens: int | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_turns: int | None = None,
        max_tool_calls: int | None = None,
        max_duration_s: float | None = None,
        max_cost_usd: float | None = None,
        *,
        task_type: str = "default",
        run_id: str | None = None,
        agent_name: str | None = None,
        provider: str | None = None,
        warn_at: float = 0.8,
        model_chain: Iterable[str] = (),
        downgrade_at: float = 0.6,
        summarize_at: float = 0.85,
        on_event: OnEvent = None,
        unknown_usage: str = "block",
        unknown_usage_residual_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        tracer: Any = None,
        spend: Any = None,
        pool: TokenPool | None = None,
        alert_limits: Mapping[str, float | None] | None = None,
        retry_policy: Callable[[RunResult], bool] | None = None,
    ) -> None:
        limits = lim.resolve_limits(
            {
                "max_total_tokens": max_total_tokens,
                "max_input_tokens": max_input_tokens,
                "max_output_tokens": max_output_tokens,
                "max_turns": max_turns,
                "max_tool_calls": max_tool_calls,
                "max_duration_s": max_duration_s,
                "max_cost_usd": max_cost_usd,
            },
            default=not alert_limits,
        )
        chain = lim.check_options(
            task_type=task_type,
            warn_at=warn_at,
            downgrade_at=downgrade_at,
            summarize_at=summarize_at,
            unknown_usage=unknown_usage,
            unknown_usage_residual_tokens=unknown_usage_residual_tokens,
            model_chain=model_chain,
        )
        callbacks = as_callbacks(on_event)
        self._alert_limits = lim.check_alert_limits(alert_limits)
        if pool is not None and not isinstance(pool, TokenPool):
            raise ValueError(f"pool must be a TokenPool or None, got {pool!r}")
        if retry_policy is not None and not callable(retry_policy):
            raise ValueError(
                f"retry_policy must be a callable taking a RunResult, or None; got {retry_policy!r}"
            )
        check_prices_file()
        self._limits = limits
        self.task_type = task_type
        self.run_id = run_id or uuid.uuid4().hex
        self.provider = provider
        self.warn_at, self.downgrade_at, self.summarize_at = warn_at, downgrade_at, summarize_at
        self.model_chain = chain
        self.unknown_usage = unknown_usage
        self._residual = unknown_usage_residual_tokens
        self._clock = clock
        self._spend = spend
        self._pool = pool
        self._retry_policy = retry_policy
        self._effects = EffectLog(self.run_id)
        self._limit_changes: list[LimitChange] = []
        self._last_actions: tuple[Action, ...] = ()
        self._lock = threading.RLock()  # callbacks may read stats()
        if self.model_chain or self._limits["max_cost_usd"] is not None or spend:
            warm_prices()  # genai-prices loads its data once per process: not on the run's clock
        self._started = clock()
        self._telemetry = RunTelemetry(tracer, self.run_id, task_type, agent_name, limits)
        self._dispatch = EventDispatcher(self._telemetry, callbacks, self.run_id)
        self._next_id = 0
        self._finished: RunResult | None = None
        self._clear_use()

    # --- state -----------------------------------------------------------------------------
    def _clear_use(self) -> None:
        old = getattr(self, "_use", None)
        if old is not None and getattr(self, "_finished", None) is None:
            self._settle_shared(old, charge=False)  # reset: open reservations are dropped
        self._use = RunLedger()
        self._dispatch.clear_thresholds()  # the model chain restarts too

    def _settle_shared(self, ledger: RunLedger, *, charge: bool) -> None:
        """Settle what ``ledger``'s open reservations hold in the shared token pool and spend
        windows: given back (``charge=False``), or, at ``finish()``, charged as spent. A call
        that was reserved but neither recorded nor released may have been paid for: its usage
        is unknown, so it counts as its reservation, never as 0 (design §1); the reservation is
        no longer held either way."""
        if self._pool is not None:
            for res in ledger.reservations.values():
                self._pool.settle(res.tokens, res.tokens if charge else 0)
        if self._spend is not None and ledger.reserved_cost_usd:
            self._spend.release(ledger.reserved_cost_usd)
            if charge:
                self._spend.add(ledger.reserved_cost_usd)

    @property
    def limits(self) -> dict[str, float | None]:
        """The current limits, keyed by constructor argument name."""
        return dict(self._limits)

    @property
    def model(self) -> str | None:
        """The model to call now: the chain's current entry (moves once on DOWNGRADE)."""
        return self.model_chain[self._dispatch.chain_position] if self.model_chain else None

    @property
    def last_actions(self) -> tuple[Action, ...]:
        """Every threshold action the last ``before_turn`` or ``record`` crossed, least severe
        first (e.g. ``(WARN, DOWNGRADE, SUMMARIZE)`` for one call from 0 to 90 %), plus a pending
        DOWNGRADE reported by ``before_turn``; () when it crossed none. The method itself returns
        only the most severe."""
        return self._last_actions

    @property
    def limit_changes(self) -> tuple[LimitChange, ...]:
        """Every limit change by :meth:`set_max`, oldest first."""
        with self._lock:
            return tuple(self._limit_changes)

    @property
    def alert_limits(self) -> dict[str, float]:
        """The alert-only limits (constructor names; they alert once and never stop)."""
        return dict(self._alert_limits)

    @property
    def used_tokens(self) -> int:
        """Tokens used: reported usage plus the charges of calls with unknown usage."""
        return self._use.used_tokens

    @property
    def span(self):
        """The run's OTel span (non-recording when no SDK is configured)."""
        return self._telemetry.span

    # --- checks (raise before spending) -----------------------------------------------------
    def _stop_on(self, stop: lim.Stop | None) -> None:
        """Raise ``stop`` (if any) as BudgetExceeded; the first refusal since the last recorded
        call is kept by the ledger (the run's stop unless it records a call later) and emitted."""
        if stop is None:
            return
        exc = stop.exception()
        if self._use.refuse(exc):
            self._dispatch.emit(Action.STOP, self._use, self._limits, reason=stop.reason)
        raise exc

    def _reserve_spend(self, cost: float) -> None:
        """Reserve ``cost`` (USD) in the shared spend windows; a refusal is this run's stop."""
        try:
            self._spend.reserve(cost)
        except BudgetExceeded as exc:
            self._stop_on(lim.Stop(exc.reason, exc.limit, exc.used, exc.requested, "spend window"))

    def _check_open(self) -> None:
        if self._finished is not None:
            raise RuntimeError(
                f"run {self.run_id} is finished: no turn, reservation, record or tool call after finish()"
            )

    def _check_time(self) -> None:
        limit = self._limits["max_duration_s"]
        if limit is not None:  # the clock is read only when there is a time limit
            self._stop_on(lim.time_stop(limit, self._clock() - self._started))

    def _check_turns(self) -> None:
        limit = self._limits["max_turns"]
        if limit is not None:  # turns: recorded calls plus open reservations
            use = self._use
            self._stop_on(lim.count_stop(sc.STOP_BUDGET_TURNS, limit, use.turns + use.open_calls))

    def _check_spent(self) -> None:
        if self._finished is not None:
            self._check_open()
        self._check_time()
        self._stop_on(lim.spent_stop(self._limits, self._use, self._spend))
        if self._pool is not None:
            self._stop_on(_pool_stop(self._pool.check))

    def before_turn(self) -> Action:
        """Check that one more model turn may start (a turn is held by ``reserve`` until the call
        is recorded or released, and counted by ``record``). Returns the advised :class:`Action`,
        the most severe of: SUMMARIZE while use is at or above ``summarize_at``; DOWNGRADE once at
        the first turn after the model moved along the chain (``run.model`` is the new one),
        whether or not ``record`` returned it; WARN when this check crossed ``warn_at`` (after
        ``set_max`` lowered a limit: thresholds are crossed here too); else CONTINUE. Every action
        crossed is in :attr:`last_actions`. Alert-only limits (wall time) are checked too.

        Raises BudgetExceeded when the turn limit, wall time, cost, a token limit, a spend
        window or the token pool is spent; RuntimeError after ``finish()``.
        """
        with self._lock:
            self._check_spent()
            self._check_turns()
            use, dispatch = self._use, self._dispatch
            advised, crossed = dispatch.thresholds(
                use, self._limits, self.model_chain, self.warn_at, self.downgrade_at, self.summarize_at
            )
            if dispatch.take_downgrade():
                advised = max(advised, Action.DOWNGRADE)
                if Action.DOWNGRADE not in crossed:
                    crossed = tuple(sorted((*crossed, Action.DOWNGRADE)))
            self._last_actions = crossed
            if self._alert_limits:
                dispatch.alerts(use, self._limits, self._alert_limits, self._clock() - self._started)
            return advised

    def reserve(
        self,
        estimated_tokens: int,
        model: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Reservation:
        """Reserve ``estimated_tokens`` (int >= 0, input + output) for one model call, atomically;
        it counts as a turn until released.

        It must fit every token limit and the cost limit next to use and open reservations.
        ``input_tokens`` / ``output_tokens`` split the estimate (give one, the other is the rest;
        e.g. ``output_tokens`` = the request's ``max_tokens``); unsplit, it counts as input, like
        an unknown-usage charge. Its cost is estimated at ``model``'s price (default
        :attr:`model`; see :func:`budgetlens.pricing.estimate_cost_usd`; 0 when unpriced, and
        under ``max_cost_usd`` the ``cost_unenforced`` warning is given).
        Raises BudgetExceeded before the call is sent when it does not fit, a limit is spent or
        the unknown-usage policy refuses; ValueError for a bad estimate or split; RuntimeError
        after ``finish()``.
        """
        if (
            input_tokens is None
            and output_tokens is None
            and estimated_tokens.__class__ is int
            and estimated_tokens >= 0
        ):
            output = None  # the common case, checked inline (hot path)
        else:
            output = lim.split_estimate(estimated_tokens, input_tokens, output_tokens)
        if model is not None and model.__class__ is not str:
            lim.check_model(model)
        model = model or self.model
        cost, priced = 0.0, True
        if (self._limits["max_cost_usd"] is not None or self._spend is not None) and model:
            # Without a model (here, on the reservation or from the chain) the cost cannot be
            # estimated before the call: it is counted when record() names the model (README).
            estimate = estimate_cost_usd(model, estimated_tokens, output, self.provider)
            cost, priced = (0.0, False) if estimate is None else (estimate, True)
        with self._lock:
            if not priced:
                self._dispatch.cost_unenforced(model, self._use, self._limits)
            self._check_spent()
            use, limits = self._use, self._limits
            self._stop_on(
                lim.unknown_usage_stop(self.unknown_usage, self._residual, limits, use, estimated_tokens)
                or lim.reserve_stop(limits, use, estimated_tokens, output or 0, cost)
            )
            self._check_turns()
            if self._spend is not None:
                self._reserve_spend(cost)
            if self._pool is not None:
                pool = self._pool
                stop = _pool_stop(lambda: pool.reserve(estimated_tokens))
                if stop is not None and self._spend is not None and cost:
                    self._spend.release(cost)  # the pool refused: the spend reservation goes back
                self._stop_on(stop)
            self._next_id += 1
            res = Reservation(
                self._next_id,
                estimated_tokens,
                use.turns + len(use.reservations) + 1,
                model,
                time.time_ns(),
                output or 0,
                cost,
                self.run_id,
            )
            use.reserve(res)
            return res

    def before_tool_call(self, name: str, *, external_effect: bool = False) -> Effect | None:
        """Count one tool call named ``name`` (a tool call span event; arguments never recorded).

        ``external_effect=True``: the tool writes somewhere (see :meth:`begin_effect`); returns its
        :class:`Effect`, to confirm with :meth:`confirm_effect` once the write is known to have
        happened; else returns None. Raises BudgetExceeded when ``max_tool_calls`` calls were made
        or wall time is spent (no effect is begun then); RuntimeError after ``finish()``.
        """
        with self._lock:
            self._check_open()
            self._check_time()
            self._stop_on(
                lim.count_stop(sc.STOP_BUDGET_TOOLS, self._limits["max_tool_calls"], self._use.tool_calls)
            )
            self._use.tool_calls += 1
            self._dispatch.emit(None, self._use, self._limits, name=EVENT_NAME_TOOL_CALL, tool_name=str(name))
            if self._alert_limits:
                self._dispatch.alerts(
                    self._use, self._limits, self._alert_limits, self._clock() - self._started
                )
        return self._effects.begin(str(name)) if external_effect else None

    # --- external effects -------------------------------------------------------------------
    def begin_effect(self, name: str) -> Effect:
        """Note that an external effect named ``name`` (a tool that sends, pushes, pays) starts.
        Until :meth:`confirm_effect`, a run that ends is not ``retryable`` and its result names
        it in ``unconfirmed_effects``. Raises ValueError for an empty name; RuntimeError after
        ``finish()``."""
        with self._lock:
            self._check_open()
        return self._effects.begin(name)

    def confirm_effect(self, effect: Effect) -> None:
        """Confirm an effect begun by :meth:`begin_effect` (its outcome is known). Raises
        ValueError for an effect that is not open or of another run; allowed after ``finish()``
        (the result keeps the names it ended with)."""
        self._effects.confirm(effect)

    @contextlib.contextmanager
    def external_effect(self, name: str) -> Iterator[Effect]:
        """``with run.external_effect("send_mail"):`` begins an effect and confirms it when the
        block ends without an exception; an exception leaves it unconfirmed (the write may or may
        not have happened) and propagates."""
        effect = self.begin_effect(name)
        yield effect
        self.confirm_effect(effect)

    # --- recording (never raises for budget reasons) ----------------------------------------
    def record(
        self,
        usage: Any,
        model: str | None = None,
        *,
        reservation: Reservation | None = None,
        provider: str | None = None,
        response_model: str | None = None,
        error_type: str | None = None,
    ) -> Action:
        """Record one model call (one turn); returns the advised :class:`Action`: the most
        severe threshold crossed now (WARN, DOWNGRADE, SUMMARIZE once each), SUMMARIZE while at or
        above ``summarize_at``, STOP from 100 %, else CONTINUE; every action crossed is in
        :attr:`last_actions` (one call from 0 to 90 % returns SUMMARIZE, and WARN is there).

        ``usage``: a :class:`Usage`, a raw provider payload or response (see
        :func:`normalize_usage`), or None when the call ended without usage: usage_status becomes
        ``unknown`` and the call is charged, never 0, as :meth:`RunLedger.add_call` (its
        reservation, else the run's largest call, else ``DEFAULT_UNKNOWN_CALL_TOKENS``). A usage
        that lacks a part (Anthropic's final ``message_delta`` alone: output, no input; see
        :func:`budgetlens.usage.usage_missing_parts`) is *partial*: the missing part is charged
        from the reservation (its input part; without one, as an unknown call) and the call's and
        run's usage_status become ``partial``.
        ``reservation``: the one settled (default: the oldest open one). ``model``/``provider``
        price the call (``response_model`` does when neither ``model`` nor the reservation names
        one); a pricing failure is logged and the call counts as unpriced (under
        ``max_cost_usd``, with the ``cost_unenforced`` warning once per model). Raises,
        before changing anything, ValueError for a malformed payload or model or a reservation
        that is not open (settled, dropped by ``reset()``, another run's); RuntimeError after
        ``finish()``.
        """
        provider = provider or self.provider
        if model is not None and model.__class__ is not str:
            lim.check_model(model)
        normalized = normalize_usage(usage, provider) if usage is not None else None
        missing = usage_missing_parts(usage, provider) if normalized is not None else ()
        # Price outside the lock when the model is known without settling (genai-prices' own
        # calculation takes far longer than the bookkeeping); else once the reservation is settled.
        # A partial usage is completed from the reservation first, so it is priced inside.
        early: Any = _UNSET
        if normalized is not None and not missing and (model or reservation or response_model):
            early = _paid_cost(
                model or getattr(reservation, "model", None) or response_model, normalized, provider
            )
        with self._lock:
            if self._finished is not None:
                self._check_open()
            use = self._use
            res = use.settle(reservation, self.run_id)
            model = model or (res.model if res else None)
            priced = model or response_model  # the response names the model when the request did not
            reserved = res.tokens if res else 0
            if missing and normalized is not None:  # partial usage: the missing part is charged
                normalized = use.complete_partial(normalized, missing, res)
            if early is not _UNSET:
                cost = early
            else:
                cost = None if normalized is None else _paid_cost(priced, normalized, provider)
            used_before = use.used_tokens
            first_unknown = use.add_call(normalized, cost, reserved)  # a turn; releases are not
            if self._pool is not None:
                self._pool.settle(reserved, use.used_tokens - used_before)
            if first_unknown:
                log.warning("run %s: call without usage; charged %d tokens", self.run_id, first_unknown)
            if self._spend is not None:
                if res is not None and res.cost_usd:
                    self._spend.release(res.cost_usd)
                charge = cost if cost is not None else (res.cost_usd if res and normalized is None else None)
                if charge is not None:
                    self._spend.add(charge)
            elif (
                cost is None
                and self._limits["max_cost_usd"] is not None
                and (normalized is not None or _paid_cost(priced, _PROBE, provider) is None)
            ):
                self._dispatch.cost_unenforced(priced, use, self._limits)  # no price for model
            action, self._last_actions = self._dispatch.thresholds(
                use, self._limits, self.model_chain, self.warn_at, self.downgrade_at, self.summarize_at
            )
            if self._alert_limits:
                self._dispatch.alerts(use, self._limits, self._alert_limits, self._clock() - self._started)
            used, turn = use.used_tokens, use.turns
            remaining = use.remaining(self._limits["max_total_tokens"])
        if self._telemetry.recording:
            self._telemetry.model_call(
                model=model,
                response_model=response_model,
                provider=provider,
                turn=turn,
                start_ns=res.start_ns if res else None,
                usage=normalized,
                usage_status=sc.USAGE_PARTIAL if missing else None,
                reserved_tokens=reserved,
                used_tokens=used,
                remaining_tokens=remaining,
                cost_usd=cost,
                error_type=error_type,
            )
        return action

    def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose call failed before spending anything (it is no turn).

        Raises ValueError as :meth:`record` for a reservation that is not open; after
        ``finish()`` it does nothing (so cleanup code never raises).
        """
        with self._lock:
            if self._finished is None:
                res = self._use.settle(reservation, self.run_id)
                if res is not None and res.cost_usd and self._spend is not None:
                    self._spend.release(res.cost_usd)
                if res is not None and self._pool is not None:
                    self._pool.settle(res.tokens, 0)

    # --- helpers for the next call -----------------------------------------------------------
    def output_budget(self, ceiling: int | None = None, prompt_tokens: int = 0) -> int | None:
        """The ``max_tokens`` to send with the next call (int, tokens >= 0): the least of the
        output limit left, the total limit left (open reservations counted) after the call's
        ``prompt_tokens``, and ``ceiling`` (e.g. the model's output maximum); None when none is
        set. Reserve it as output (``reserve(prompt_tokens + n, output_tokens=n)``) to make the
        token limits hard. Raises ValueError for a ``ceiling`` or ``prompt_tokens`` that is not
        an int >= 0."""
        with self._lock:
            return lim.output_budget(self._limits, self._use, ceiling, prompt_tokens)

    def cheapest_model(self) -> str | None:
        """The model of ``model_chain`` with the lowest price for 1,000 input + 1,000 output tokens
        (genai-prices or the user price file); the chain's last model when none is priced;
        :attr:`model` without a chain."""
        return cheapest_model(self.model_chain, self.provider) or self.model

    def compress(
        self,
        messages: Any,
        *,
        summarize: Callable[[str | None, list], str] | None = None,
        client: Any = None,
        keep_last: int = 4,
        max_summary_tokens: int = 1024,
    ) -> list:
        """Compress a conversation when ``SUMMARIZE`` is advised: keep the system prompt and the
        last ``keep_last`` messages (a tool result stays with its call), replace the middle with
        one summary message (see :func:`budgetlens.guard.compress.compress_messages`).

        The summary comes from ``summarize(model, middle_messages) -> str`` when given, else from
        ``client`` (an OpenAI or Anthropic client, plain or wrapped by ``budgetlens.adapters``),
        called with :meth:`cheapest_model` and ``max_summary_tokens`` through this budget
        (reserved and recorded like any call). Returns the new message list. Raises ValueError
        when neither or both are given; BudgetExceeded when the summary call does not fit.
        """
        if (summarize is None) == (client is None):
            raise ValueError("compress needs exactly one of summarize (a callable) or client")
        if summarize is None:
            summarize = client_summarizer(self, client, max_summary_tokens)
        return compress_messages(messages, summarize, keep_last=keep_last, model=self.cheapest_model())

    # --- limits and reset -------------------------------------------------------------------
    def set_max(self, *, changed_by: str | None = None, **limits: float | None) -> None:
        """Change limits by constructor name (``set_max(max_total_tokens=10_000,
        changed_by="alice: review needs more")``); None removes a limit.

        Each limit that changes value is kept in :attr:`limit_changes` and delivered as a
        ``budgetlens.limit_changed`` event (reason: the limit's name; previous and new value;
        ``changed_by``; the event's time) and an INFO log. A limit below current use stops the
        next check; thresholds already crossed stay fired. Raises ValueError naming an unknown
        or invalid limit, or a ``changed_by`` that is not a string.
        """
        lim.check_limits(limits)
        if changed_by is not None and not isinstance(changed_by, str):
            raise ValueError(
                f"changed_by must be a string (who changed the limit) or None, got {changed_by!r}"
            )
        with self._lock:
            now = datetime.now(UTC)
            for name, new in limits.items():
                previous = self._limits[name]
                if previous == new:
                    continue
                self._limits[name] = new
                self._limit_changes.append(LimitChange(name, previous, new, changed_by, now))
                self._dispatch.limit_changed(self._use, self._limits, name, previous, new, changed_by)
        self._telemetry.set_limits(self._limits)

    def reset(self) -> None:
        """Clear use (tokens, cost, turns, tool calls, reservations, a pending budget refusal)
        and the fired thresholds, so the warning can fire again; limits, run id and clock start
        stay (and so do ``cost_unenforced`` warnings: once per run and model)."""
        with self._lock:
            self._clear_use()

    # --- reading and finishing --------------------------------------------------------------
    def stats(self) -> BudgetStats:
        """A snapshot: used/max/remaining tokens, percent (one decimal), counters, status line
        (naming models whose cost the cost limit cannot enforce)."""
        with self._lock:
            return self._use.stats(
                self._limits, self._clock() - self._started, self._dispatch.cost_unenforced_models
            )

    @property
    def result(self) -> RunResult | None:
        """The RunResult once finished, else None."""
        return self._finished

    def finish(
        self,
        stop_reason: str | None = None,
        error: BaseException | None = None,
        *,
        retryable: bool | None = None,
    ) -> RunResult:
        """End the run once (later calls return the same result) and end its span; afterwards
        ``before_turn``, ``reserve``, ``record`` and ``before_tool_call`` raise RuntimeError.

        Reservations still open (reserved, never recorded nor released: the call may have been
        paid for) are recorded first as calls of unknown usage charged their reservation (see
        :func:`budgetlens.guard.closing.charge_unrecorded`).

        ``stop_reason`` defaults to: the reason of a BudgetExceeded ``error`` or of one in its
        cause chain (a framework's wrapper of a hook's refusal; see
        :func:`budgetlens.guard.closing.budget_cause`); ``failed`` for
        another ``error``; the budget refusal the run ended at (one after its last recorded call;
        a refusal the run recovered from, recording a call after it, is no stop: see
        :func:`budgetlens.guard.limits.final_stop_reason`); else ``completed``. The ``budgetlens.stop``
        event is still emitted at each refusal.

        ``retryable`` (bool) sets ``RunResult.retryable``; without it the constructor's
        ``retry_policy`` (a callable taking the default RunResult, returning bool) decides, else
        :func:`budgetlens.guard.limits.retryable`. The result also carries the limits the run ran
        under, the utilization, the number of downgrades and the unconfirmed external effects.
        Raises ValueError for a reason outside :data:`budgetlens.semconv.STOP_REASONS` or a
        ``retryable`` that is not a bool.
        """
        lim.check_stop_reason(stop_reason)
        if retryable is not None and not isinstance(retryable, bool):
            raise ValueError(f"retryable must be True, False or None, got {retryable!r}")
        with self._lock:
            if self._finished is not None:
                return self._finished
            error = budget_cause(error) or error  # a refusal a framework re-raised as its own
            charge_unrecorded(self._use, self.record, error)  # reserved, never recorded: unknown
            refusal = error if isinstance(error, BudgetExceeded) else self._use.refusal
            stop_reason = lim.final_stop_reason(stop_reason, error, self._use.refusal)
            result = self._use.result(
                self.run_id,
                self.task_type,
                stop_reason,
                self._clock() - self._started,
                error,
                limits=self._limits,
                stop=refusal,
                unconfirmed_effects=self._effects.unconfirmed,
                downgrades=self._dispatch.downgrades,
            )
            if retryable is None and self._retry_policy is not None:
                try:
                    retryable = bool(self._retry_policy(result))
                except Exception:
                    log.exception("run %s: retry_policy failed; the default rule decides", self.run_id)
            if retryable is not None:
                result = dataclasses.replace(result, retryable=retryable)
            # Reservations still open at the end (neither recorded nor released) stop being held
            # in the shared pool and windows; their unknown usage is charged as reserved.
            self._settle_shared(self._use, charge=True)
            self._finished = result
        try:
            self._telemetry.finish(result, self._limits, self._use.usage_known)
        except Exception:
            log.exception("run %s: could not end the run span", self.run_id)
        return result

    def __enter__(self) -> RunBudget:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(error=exc)

    async def __aenter__(self) -> RunBudget:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.finish(error=exc)

    @classmethod
    def from_preset(cls, task_type: str, path: str, **overrides: Any) -> RunBudget:
        """A guard with the limits of ``task_type`` in a preset file written by ``budgetlens
        presets`` (YAML/TOML/JSON by extension). ``overrides`` are constructor keywords and win
        over the preset (``max_total_tokens=10_000`` replaces its value, ``None`` removes it).

        Raises ValueError naming unknown keys or units, KeyError naming a missing task type.
        """
        from budgetlens.guard.preset_file import load_preset

        return cls(**{**load_preset(task_type, path), **overrides}, task_type=task_type)
