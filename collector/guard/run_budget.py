"""RunBudget: the hard budget an agent loop calls (design §1).

Check before spending, record after: ``before_turn()``, ``reserve(n)``, the call,
``record(usage, reservation=res)``, ``finish()`` (the loop in docs/guard-and-adapters.md). All state
changes happen under one lock (atomic across threads and, as no method awaits, asyncio tasks).
``BudgetExceeded`` is the only exception raised into the loop on purpose; callbacks, telemetry and
pricing failures are logged. Misuse raises at once: ``ValueError`` for a bad argument or a
reservation settled twice or by another run, ``RuntimeError`` for a step after ``finish()``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from budgetlens import semconv as sc
from budgetlens.guard import children as sub_agents
from budgetlens.guard import effects
from budgetlens.guard import snapshot as pause
from budgetlens.guard import stops as lim
from budgetlens.guard.closing import finish_run
from budgetlens.guard.compress import cheapest_model, compress_run
from budgetlens.guard.countdown import run_notice
from budgetlens.guard.events import OnEvent
from budgetlens.guard.options import UNKNOWN_USAGE_POLICIES, RunOptions
from budgetlens.guard.pool import TokenPool
from budgetlens.guard.results import Action, BudgetStats, Effect, LimitChange, Reservation, RunResult
from budgetlens.guard.run_state import RunState
from budgetlens.guard.spend import SpendTracker
from budgetlens.guard.tool_prices import tool_fee
from budgetlens.guard.wrap_up import wrap_up_due
from budgetlens.limits import DEFAULT_MAX_TOTAL_TOKENS, LIMIT_KEYS
from budgetlens.pricing import check_prices_file, warm_prices

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from budgetlens.guard.snapshot import Authorization, RunSnapshot

log = logging.getLogger(__name__)

# DEFAULT_MAX_TOTAL_TOKENS (budgetlens.limits) and UNKNOWN_USAGE_POLICIES (budgetlens.guard.options)
# are re-exported here.
__all__ = ["RunBudget", "DEFAULT_MAX_TOTAL_TOKENS", "UNKNOWN_USAGE_POLICIES"]


#: The constructor's arguments other than the limits, passed on to :meth:`RunOptions.build`.
_OPTION_ARGS = (
    "task_type", "run_id", "agent_name", "provider", "warn_at", "model_chain", "downgrade_at",
    "summarize_at", "on_event", "unknown_usage", "unknown_usage_residual_tokens", "clock", "tracer",
    "spend", "pool", "alert_limits", "retry_policy", "tool_prices", "wrap_up_tokens", "wrap_up_usd",
    "countdown_at", "service", "team", "tenant", "user", "session_id", "tags",
)  # fmt: skip


class RunBudget:
    """A hard budget for one agent run.

    Limits (any may be None; with none given, and no ``alert_limits``, ``max_total_tokens`` is 64,000):
    ``max_total_tokens``, ``max_input_tokens``, ``max_output_tokens`` (tokens), ``max_turns`` (model calls:
    a limit of n allows exactly n), ``max_tool_calls``, ``max_duration_s`` (seconds of wall time, from
    construction), ``max_cost_usd`` (USD, priced with :func:`budgetlens.cost_usd`; calls of a model without
    a price add no cost: the run goes on, with one WARNING log and one ``budgetlens.warning`` event (reason
    ``cost_unenforced``) per model, and ``stats().status`` names the model).

    The other options (thresholds ``warn_at``, ``downgrade_at``, ``summarize_at``; ``model_chain``,
    ``on_event``, ``unknown_usage``, ``unknown_usage_residual_tokens``, ``clock``, ``tracer``, ``spend``,
    ``pool``, ``alert_limits``, ``retry_policy``, ``provider``, ``tool_prices``, the wrap-up slice
    ``wrap_up_tokens`` / ``wrap_up_usd``: see :mod:`budgetlens.guard.wrap_up`; ``countdown_at``) are documented on
    :class:`budgetlens.guard.options.RunOptions`, which holds them checked (:attr:`options`). Raises
    ``ValueError`` naming a bad argument, and naming the user price file (``BUDGETLENS_PRICES_FILE``) when
    it is missing or invalid: it is read here, before any call is paid for, not at the first ``record``.

    Attribution (who the run belongs to; :mod:`budgetlens.attribution`): ``service``, ``team`` (``tenant``
    is its other name), ``user``, ``session_id`` (strings of at most 200 characters) and ``tags`` (a
    mapping str -> str of at most 16 entries), emitted on the run span under ``budgetlens.*`` and stored by
    the collector; a ``spend`` tracker or ``pool`` with a ``scope`` the attribution does not match does
    not apply to this run.

    This class checks arguments and holds the documented interface (methods of a concern of their own
    are defined with it); the lock and the order of checks, records and events are in
    :class:`budgetlens.guard.run_state.RunState`, limit validation in
    :mod:`budgetlens.limits`, decisions in :mod:`budgetlens.guard.stops`, the pool and spend-window steps in
    :mod:`budgetlens.guard.shared`, counters in :class:`budgetlens.guard.ledger.RunLedger`.
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
        tracer: Tracer | None = None,
        spend: SpendTracker | None = None,
        pool: TokenPool | None = None,
        alert_limits: Mapping[str, float | None] | None = None,
        retry_policy: Callable[[RunResult], bool] | None = None,
        service: str | None = None,
        team: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
        session_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        tool_prices: Mapping[str, Any] | str | os.PathLike | None = None,
        wrap_up_tokens: int | None = None,
        wrap_up_usd: float | None = None,
        countdown_at: Iterable[float] = (),
    ) -> None:
        given = dict(locals())  # the arguments by name: limits and options, checked by RunOptions
        limits = {key: given[key] for key in LIMIT_KEYS}
        options = RunOptions.build(limits, **{name: given[name] for name in _OPTION_ARGS})
        check_prices_file()
        self._start(options)

    def _start(self, options: RunOptions) -> None:
        """Set up the run from checked options (the clock starts after the prices are warm)."""
        self.options = options
        self.task_type, self.provider = options.task_type, options.provider
        self.warn_at, self.downgrade_at = options.warn_at, options.downgrade_at
        self.summarize_at, self.model_chain = options.summarize_at, options.model_chain
        self.unknown_usage = options.unknown_usage
        if self.model_chain or options.limits["max_cost_usd"] is not None or options.spend is not None:
            warm_prices()  # genai-prices loads its data once per process: not on the run's clock
        self._state = RunState(options)
        self.run_id = self._state.run_id
        self.parent_run_id: str | None = None  # set on a child run (see child)
        self.authorizations: tuple[dict[str, Any], ...] = ()  # raises of a resumed run (see resume)

    def __repr__(self) -> str:
        """``RunBudget(run_id='…', task_type='code_generation', limits={'max_total_tokens': 60000},
        used_tokens=1234, turns=2, tool_calls=1, cost_usd=0.0123, stop_reason=None)``: the limits
        set (unset ones left out) and the use so far; ``stop_reason`` once finished."""
        stats = self.stats()
        limits = {name: value for name, value in self.limits.items() if value is not None}
        finished = self.result
        return (
            f"RunBudget(run_id={self.run_id!r}, task_type={self._state.options.task_type!r}, "
            f"limits={limits!r}, used_tokens={stats.used_tokens}, turns={stats.turns}, "
            f"tool_calls={stats.tool_calls}, cost_usd={stats.cost_usd!r}, "
            f"stop_reason={finished.stop_reason if finished else None!r})"
        )

    @property
    def limits(self) -> dict[str, float | None]:
        """The current limits, keyed by constructor argument name."""
        return dict(self._state.limits)

    @property
    def model(self) -> str | None:
        """The model to call now: the chain's current entry (moves once on DOWNGRADE)."""
        return self._state.model

    @property
    def last_actions(self) -> tuple[Action, ...]:
        """Every threshold action the last ``before_turn`` or ``record`` crossed, least severe first (e.g.
        ``(WARN, DOWNGRADE, SUMMARIZE)`` for one call from 0 to 90 %), plus a pending DOWNGRADE reported by
        ``before_turn``; () when it crossed none. The method itself returns only the most severe."""
        return self._state.last_actions

    @property
    def stop_reason(self) -> str | None:
        """The stop reason the next ``before_turn`` would raise: ``budget_time``,
        ``budget_wrap_up``, ``budget_cost``, ``budget_tokens`` (spend windows, pools and parents
        included) or ``budget_turns``, in that order; None while the run may go on; after
        :meth:`finish`, the run's own. A loop that ends because ``record`` returned STOP passes it:
        ``run.finish(stop_reason=run.stop_reason)``. It only reads: nothing is emitted."""
        state = self._state
        with state.lock:
            if state.finished is not None:
                return state.finished.stop_reason
            stop = state.spent()
            if stop is None:
                turns = state.use.turns + state.use.open_calls
                stop = lim.count_stop(sc.STOP_BUDGET_TURNS, state.limits["max_turns"], turns)
        return stop.reason if stop is not None else None

    @property
    def limit_changes(self) -> tuple[LimitChange, ...]:
        """Every limit change by :meth:`set_max`, oldest first."""
        with self._state.lock:
            return tuple(self._state.limit_changes)

    @property
    def alert_limits(self) -> dict[str, float]:
        """The alert-only limits (constructor names; they alert once and never stop)."""
        return dict(self._state.alert_limits)

    @property
    def used_tokens(self) -> int:
        """Tokens used: reported usage plus the charges of calls with unknown usage."""
        return self._state.use.used_tokens

    @property
    def span(self) -> Span:
        """The run's OTel span (non-recording when no SDK is configured)."""
        return self._state.telemetry.span

    def before_turn(self) -> Action:
        """Check that one more model turn may start (a turn is held by ``reserve`` until the call is
        recorded or released, and counted by ``record``). Returns the advised :class:`Action`, the most
        severe of: SUMMARIZE while use is at or above ``summarize_at``; DOWNGRADE once at the first turn
        after the model moved along the chain (``run.model`` is the new one), whether or not ``record``
        returned it; WARN when this check crossed ``warn_at`` (after ``set_max`` lowered a limit: thresholds
        are crossed here too); else CONTINUE. Every action crossed is in :attr:`last_actions`. Alert-only
        limits (wall time) are checked too. Raises BudgetExceeded when the turn limit, wall time, cost, a
        token limit, a spend window or the token pool is spent; RuntimeError after ``finish()``.
        """
        with self._state.lock:
            return self._state.before_turn_locked()

    def reserve(
        self,
        estimated_tokens: int,
        model: str | None = None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        final: bool = False,
    ) -> Reservation:
        """Reserve ``estimated_tokens`` (int >= 0, input + output) for one model call, atomically; it counts
        as a turn until released. It must fit every token limit and the cost limit next to use and open
        reservations. ``input_tokens`` / ``output_tokens`` split the estimate (give one, the other is the
        rest; e.g. ``output_tokens`` = the request's ``max_tokens``); unsplit, it counts as input, like an
        unknown-usage charge. Its cost is estimated at ``model``'s price (default :attr:`model`; see
        :func:`budgetlens.pricing.estimate_cost_usd`; 0 when unpriced, and under ``max_cost_usd`` the
        ``cost_unenforced`` warning is given). With a wrap-up slice an ordinary call must fit the limits
        minus the slice; ``final=True`` reserves the run's final call, which may use the slice (the run
        stops ``budget_wrap_up`` once it is recorded). Raises BudgetExceeded before the call is sent when
        it does not fit, a limit is spent or the unknown-usage policy refuses; ValueError for a bad
        estimate or split, or ``final=True`` without an unused slice; RuntimeError after ``finish()``.
        """
        return self._state.reserve(estimated_tokens, model, input_tokens, output_tokens, final)

    def wrap_up_due(self, estimated_tokens: int, model: str | None = None, *, output_tokens: int = 0) -> bool:
        """True when the run's wrap-up slice is unused and a call of ``estimated_tokens`` (tokens;
        ``output_tokens`` of them output) at ``model``'s price does not fit next to it: make it the
        final call (``reserve(..., final=True)``). False without a slice. See
        :func:`budgetlens.guard.wrap_up.wrap_up_due`."""
        return wrap_up_due(self._state, estimated_tokens, output_tokens, model)

    def before_tool_call(
        self,
        name: str,
        *,
        external_effect: bool = False,
        cost_usd: float | None = None,
        units: float | None = None,
    ) -> Effect | None:
        """Count one tool call named ``name`` (a tool call span event; arguments never recorded).
        A paid tool's fee (USD) is ``cost_usd``, else the ``tool_prices`` table's price for ``units``
        (see :func:`budgetlens.guard.tool_prices.tool_fee`; 0 for a tool not in it): it counts in
        ``max_cost_usd`` and the spend windows and is kept apart as tool cost (``RunResult.tool_cost_usd``).
        ``external_effect=True``: the tool writes somewhere (see :meth:`begin_effect`); returns its
        :class:`Effect`, to confirm with :meth:`confirm_effect` once the write is known to have happened;
        else returns None. Raises BudgetExceeded when ``max_tool_calls`` calls were made, wall time is
        spent or the fee does not fit the cost limit or a spend window (no effect is begun, no fee
        counted then); ValueError for a ``cost_usd`` or ``units`` < 0; RuntimeError after ``finish()``.
        """
        fee = tool_fee(self.options.tool_prices, str(name), cost_usd, units)
        with self._state.lock:
            self._state.tool_call_locked(str(name), fee)
        return self._state.effects.begin(str(name)) if external_effect else None

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
        """Record one model call (one turn); returns the advised :class:`Action`: the most severe threshold
        crossed now (WARN, DOWNGRADE, SUMMARIZE once each), SUMMARIZE while at or above ``summarize_at``,
        WRAP_UP when the next ordinary call would not fit next to the wrap-up slice, STOP from 100 % or
        after the final call, else CONTINUE; every action crossed is in :attr:`last_actions`. ``usage``: a
        :class:`Usage`, a raw provider payload or response (see :func:`normalize_usage`), or None when the
        call ended without usage: usage_status becomes ``unknown`` and the call is charged, never 0, as
        :meth:`RunLedger.add_call`. A usage that lacks a part (see :func:`budgetlens.usage.usage_missing_parts`)
        is *partial*: the missing part is charged from the reservation and usage_status becomes ``partial``.
        ``reservation``: the one settled (default: the oldest open one). ``model``/``provider`` price the
        call (``response_model`` does when neither names one; a pricing failure: unpriced). Raises, before changing anything, ValueError for a malformed
        payload or model or a reservation that is not open; RuntimeError after ``finish()``.
        """
        return self._state.record(usage, model, reservation, provider, response_model, error_type)

    def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose call failed before spending anything (it is no turn). Raises
        ValueError as :meth:`record` for a reservation that is not open; after ``finish()`` it does nothing
        (so cleanup code never raises).
        """
        with self._state.lock:
            self._state.release_locked(reservation)

    def output_budget(
        self, ceiling: int | None = None, prompt_tokens: int = 0, *, final: bool = False
    ) -> int | None:
        """The ``max_tokens`` to send with the next call (int, tokens >= 0): the least of the output limit
        left, the total left (open reservations counted) after ``prompt_tokens``, and ``ceiling``; None when
        none is set. An ordinary call's leaves the wrap-up slice out; ``final=True``: the final call's.
        Raises ValueError for a ``ceiling`` or ``prompt_tokens`` that is not an int >= 0."""
        with self._state.lock:
            state = self._state
            limits = state.limits if final else state.wrap_up.ordinary(state.limits)
            return lim.output_budget(limits, state.use, ceiling, prompt_tokens)

    def cheapest_model(self) -> str | None:
        """The model of ``model_chain`` priced lowest for 1,000 input + 1,000 output tokens; the chain's
        last model when none is priced; :attr:`model` without a chain."""
        return cheapest_model(self.model_chain, self.provider) or self.model

    # Context (compression, countdown notice), sub-agents (one ledger for a tree of runs), paused
    # runs and external effects: defined with their concern, budgetlens.guard.compress, .countdown,
    # .children, .snapshot and .effects.
    compress = compress_run
    countdown_notice = run_notice
    child = sub_agents.child
    fan_out = sub_agents.fan_out
    snapshot = pause.take
    begin_effect = effects.begin_effect
    confirm_effect = effects.confirm_effect
    external_effect = effects.external_effect

    @classmethod
    def resume(cls, snapshot: RunSnapshot, *, authorization: Authorization, **options: Any) -> RunBudget:
        """The paused run of ``snapshot`` again: see :func:`budgetlens.guard.snapshot.resume`."""
        return pause.resume(cls, snapshot, authorization=authorization, **options)

    @property
    def children(self) -> tuple[RunBudget, ...]:
        """The child runs made by :meth:`child`, oldest first (their ``result`` has their stop reason)."""
        with self._state.lock:
            return tuple(self._state.children)

    def set_max(self, *, changed_by: str | None = None, **limits: float | None) -> None:
        """Change limits by constructor name (``set_max(max_total_tokens=10_000, changed_by="alice: review
        needs more")``); None removes a limit. Each limit that changes value is kept in
        :attr:`limit_changes` and delivered as a ``budgetlens.limit_changed`` event (reason: the limit's
        name; previous and new value; ``changed_by``; the event's time) and an INFO log. A limit below
        current use stops the next check; thresholds already crossed stay fired. Raises ValueError naming an
        unknown or invalid limit, or a ``changed_by`` that is not a string.
        """
        self._state.set_max(limits, changed_by)

    def reset(self) -> None:
        """Clear use (tokens, cost, turns, tool calls, reservations, a pending budget refusal) and the fired
        thresholds, so the warning can fire again; limits, run id and clock start stay (and so do
        ``cost_unenforced`` warnings: once per run and model)."""
        with self._state.lock:
            self._state.reset_locked()

    def stats(self) -> BudgetStats:
        """A snapshot: used/max/remaining tokens, percent (one decimal), counters, status line (naming
        models whose cost the cost limit cannot enforce)."""
        with self._state.lock:
            return self._state.stats_locked()

    @property
    def result(self) -> RunResult | None:
        """The RunResult once finished, else None."""
        return self._state.finished

    def finish(
        self,
        stop_reason: str | None = None,
        error: BaseException | None = None,
        *,
        retryable: bool | None = None,
    ) -> RunResult:
        """End the run once (later calls return the same result) and end its span; afterwards
        ``before_turn``, ``reserve``, ``record`` and ``before_tool_call`` raise RuntimeError.
        Reservations still open (reserved, never recorded nor released: the call may have been paid for)
        are recorded first as calls of unknown usage charged their reservation
        (:func:`budgetlens.guard.closing.charge_unrecorded`).
        ``stop_reason`` defaults to: the reason of a BudgetExceeded ``error`` or of one in its cause chain
        (a framework's wrapper of a hook's refusal: :func:`budgetlens.guard.closing.budget_cause`);
        ``failed`` for another ``error``; the budget refusal the run ended at (one after its last recorded call; a refusal the run
        recovered from, recording a call after it, is no stop: see
        :func:`budgetlens.guard.stops.final_stop_reason`); else ``completed``. The ``budgetlens.stop`` event
        is still emitted at each refusal. ``retryable`` (bool) sets ``RunResult.retryable``; without it the
        constructor's ``retry_policy`` (a callable taking the default RunResult, returning bool) decides,
        else :func:`budgetlens.guard.stops.retryable`. The result also carries the limits the run ran under,
        the utilization, the number of downgrades and the unconfirmed external effects. Raises ValueError
        for a reason outside :data:`budgetlens.semconv.STOP_REASONS` or a ``retryable`` that is not a bool.
        """
        return finish_run(self._state, stop_reason, error, retryable)

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
        """A guard with the limits of ``task_type`` in a preset file written by ``budgetlens presets``
        (YAML/TOML/JSON by extension). ``overrides`` are constructor keywords and win over the preset
        (``max_total_tokens=10_000`` replaces its value, ``None`` removes it).

        Raises ValueError naming unknown keys or units, KeyError naming a missing task type.
        """
        from budgetlens.guard.preset_file import load_preset  # read YAML/TOML only when used

        return cls(**{**load_preset(task_type, path), **overrides}, task_type=task_type)
