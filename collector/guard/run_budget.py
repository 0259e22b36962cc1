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

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from budgetlens import semconv as sc
from budgetlens.guard import limits as lim
from budgetlens.guard.events import EventDispatcher, OnEvent, as_callbacks
from budgetlens.guard.ledger import RunLedger
from budgetlens.guard.limits import DEFAULT_MAX_TOTAL_TOKENS, UNKNOWN_USAGE_POLICIES
from budgetlens.guard.results import (
    EVENT_NAME_TOOL_CALL,
    Action,
    BudgetStats,
    Reservation,
    RunResult,
)
from budgetlens.guard.telemetry import RunTelemetry
from budgetlens.pricing import check_prices_file, estimate_cost_usd, price_call
from budgetlens.usage import Usage, normalize_usage

log = logging.getLogger(__name__)

# DEFAULT_MAX_TOTAL_TOKENS and UNKNOWN_USAGE_POLICIES live in budgetlens.guard.limits; re-exported here.
__all__ = ["RunBudget", "DEFAULT_MAX_TOTAL_TOKENS", "UNKNOWN_USAGE_POLICIES"]

_UNSET = object()  # a call not priced yet
_PROBE = Usage(0, 0)  # prices nothing: tells whether a model has a price (not None)


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

    Limits (any may be None; with none given ``max_total_tokens`` is 64,000): ``max_total_tokens``,
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
    :class:`budgetlens.guard.spend.SpendTracker` shared by runs of this process. ``provider``: the
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
            }
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
        self._lock = threading.RLock()  # callbacks may read stats()
        self._started = clock()
        self._telemetry = RunTelemetry(tracer, self.run_id, task_type, agent_name, limits)
        self._dispatch = EventDispatcher(self._telemetry, callbacks, self.run_id)
        self._next_id = 0
        self._finished: RunResult | None = None
        self._clear_use()

    # --- state -----------------------------------------------------------------------------
    def _clear_use(self) -> None:
        self._use = RunLedger()
        self._dispatch.clear_thresholds()  # the model chain restarts too

    @property
    def limits(self) -> dict[str, float | None]:
        """The current limits, keyed by constructor argument name."""
        return dict(self._limits)

    @property
    def model(self) -> str | None:
        """The model to call now: the chain's current entry (moves once on DOWNGRADE)."""
        return self.model_chain[self._dispatch.chain_position] if self.model_chain else None

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

    def before_turn(self) -> Action:
        """Check that one more model turn may start (a turn is held by ``reserve`` until the call
        is recorded or released, and counted by ``record``). Returns the advised :class:`Action`
        (CONTINUE, DOWNGRADE once pending, SUMMARIZE while above ``summarize_at``).

        Raises BudgetExceeded when the turn limit, wall time, cost or a token limit is spent;
        RuntimeError after ``finish()``.
        """
        with self._lock:
            self._check_spent()
            self._check_turns()
            return lim.advice(self._use.share(self._limits), self.summarize_at)

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
        if self._limits["max_cost_usd"] is not None and model:
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

    def before_tool_call(self, name: str) -> None:
        """Count one tool call named ``name`` (a tool call span event; arguments never recorded).

        Raises BudgetExceeded when ``max_tool_calls`` calls were made or wall time is spent;
        RuntimeError after ``finish()``.
        """
        with self._lock:
            self._check_open()
            self._check_time()
            self._stop_on(
                lim.count_stop(sc.STOP_BUDGET_TOOLS, self._limits["max_tool_calls"], self._use.tool_calls)
            )
            self._use.tool_calls += 1
            self._dispatch.emit(None, self._use, self._limits, name=EVENT_NAME_TOOL_CALL, tool_name=str(name))

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
        """Record one model call (one turn); returns the advised :class:`Action`.

        ``usage``: a :class:`Usage`, a raw provider payload or response (see
        :func:`normalize_usage`), or None when the call ended without usage: usage_status becomes
        ``unknown`` and the call is charged, never 0, as :meth:`RunLedger.add_call` (its
        reservation, else the run's largest call, else ``DEFAULT_UNKNOWN_CALL_TOKENS``).
        ``reservation``: the one settled (default: the oldest open one). ``model``/``provider``
        price the call; a pricing failure is logged and the call counts as unpriced (under
        ``max_cost_usd``, with the ``cost_unenforced`` warning once per model). Raises,
        before changing anything, ValueError for a malformed payload or model or a reservation
        that is not open (settled, dropped by ``reset()``, another run's); RuntimeError after
        ``finish()``.
        """
        provider = provider or self.provider
        if model is not None and model.__class__ is not str:
            lim.check_model(model)
        normalized = normalize_usage(usage, provider) if usage is not None else None
        # Price outside the lock when the model is known without settling (genai-prices' own
        # calculation takes far longer than the bookkeeping); else once the reservation is settled.
        early: Any = _UNSET
        if normalized is not None and (model is not None or reservation is not None):
            early = _paid_cost(model or getattr(reservation, "model", None), normalized, provider)
        with self._lock:
            if self._finished is not None:
                self._check_open()
            use = self._use
            res = use.settle(reservation, self.run_id)
            model = model or (res.model if res else None)
            reserved = res.tokens if res else 0
            if early is not _UNSET:
                cost = early
            else:
                cost = None if normalized is None else _paid_cost(model, normalized, provider)
            first_unknown = use.add_call(normalized, cost, reserved)  # a turn; releases are not
            if first_unknown:
                log.warning("run %s: call without usage; charged %d tokens", self.run_id, first_unknown)
            if cost is not None and self._spend is not None:
                self._spend.add(cost)
            elif (
                cost is None
                and self._limits["max_cost_usd"] is not None
                and (normalized is not None or _paid_cost(model, _PROBE, provider) is None)
            ):
                self._dispatch.cost_unenforced(model, use, self._limits)  # no price for model
            action = self._dispatch.thresholds(
                use, self._limits, self.model_chain, self.warn_at, self.downgrade_at, self.summarize_at
            )
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
                self._use.settle(reservation, self.run_id)

    # --- limits and reset -------------------------------------------------------------------
    def set_max(self, **limits: float | None) -> None:
        """Change limits by constructor name (``set_max(max_total_tokens=10_000)``).

        A limit below current use stops the next check. Raises ValueError naming an unknown
        or invalid limit.
        """
        lim.check_limits(limits)
        with self._lock:
            self._limits.update(limits)
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

    def finish(self, stop_reason: str | None = None, error: BaseException | None = None) -> RunResult:
        """End the run once (later calls return the same result) and end its span; afterwards
        ``before_turn``, ``reserve``, ``record`` and ``before_tool_call`` raise RuntimeError.

        ``stop_reason`` defaults to: the reason of a BudgetExceeded ``error``; ``failed`` for
        another ``error``; the budget refusal the run ended at (one after its last recorded call;
        a refusal the run recovered from, recording a call after it, is no stop: see
        :func:`budgetlens.guard.limits.final_stop_reason`); else ``completed``. The ``budgetlens.stop``
        event is still emitted at each refusal. Raises ValueError for a reason outside
        :data:`budgetlens.semconv.STOP_REASONS`.
        """
        lim.check_stop_reason(stop_reason)
        with self._lock:
            if self._finished is not None:
                return self._finished
            stop_reason = lim.final_stop_reason(stop_reason, error, self._use.refusal)
            result = self._use.result(
                self.run_id, self.task_type, stop_reason, self._clock() - self._started, error
            )
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
