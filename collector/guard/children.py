"""Sub-agent budgets: a child run carved from its parent's remainder (issue 21).

``parent.child(task_type=..., limits=...)`` (:meth:`budgetlens.RunBudget.child`) builds a child
:class:`~budgetlens.RunBudget` whose limits are the smaller of its own and what the parent has left
(:func:`carve_limits`), and links it to the parent with a :class:`ParentLink`. The link is one of
the child's shared steps (:class:`budgetlens.guard.shared.SharedSteps`): every reservation of the
child is also held in the parent, atomically under the parent's lock, and must fit the parent's
limits (its wrap-up slice left out) and the parent's own shared steps (its pool, spend windows, its
own parent); a recorded call replaces the hold with the call's tokens and cost in the parent's
ledger as it happens; a paid tool's fee is counted in the parent's cost too. So there is one
ledger: the parent's ``used_tokens`` and cost include its children's, its turns and tool calls are
its own. The parent's thresholds (warn, downgrade, summarize) and alert-only limits are checked
at each such charge, so they fire as a child's use happens, not at the parent's next step.

The bound: a tree of runs passes its root's token or cost limit by no more than a single run does
alone, the underestimate of the calls in flight at once (each call's use above its reservation;
with ``output_tokens`` = the request's ``max_tokens``, a call's output never passes it), because
every call of every child is reserved in every ancestor before it is sent.

Fan-out (:meth:`budgetlens.RunBudget.fan_out`) of N children is refused before any is made when
the parent's remainder cannot cover N × the child task type's estimate (tokens and/or USD): a given
estimate, else the P50 of the task type's baseline in a store. That one is read by the analysis
(:func:`budgetlens.analysis.fan_out_estimate.p50_estimate`) through the callable the package root
hands over (:func:`use_store_estimate`): the guard imports neither the store nor the analysis.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from budgetlens import semconv as sc
from budgetlens.guard import stops as lim
from budgetlens.guard.results import BudgetExceeded
from budgetlens.guard.stops import Stop
from budgetlens.limits import LIMIT_KEYS
from budgetlens.usage import Usage

if TYPE_CHECKING:
    from budgetlens.guard.ledger import RunLedger
    from budgetlens.guard.run_budget import RunBudget
    from budgetlens.guard.run_state import RunState

__all__ = [
    "CARVED_LIMITS",
    "ParentLink",
    "StoreEstimate",
    "carve_limits",
    "check_fan_out",
    "child",
    "fan_out",
    "use_store_estimate",
]

#: The limits a child's are capped by (the parent's remainder): tokens, cost and wall time. Turns
#: and tool calls are counts of each run's own calls, so a child's are its own.
CARVED_LIMITS = (
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_cost_usd",
    "max_duration_s",
)

#: ``(db, task_type) -> (P50 tokens, P50 USD)`` of a task type in the store at ``db`` (None: no run).
StoreEstimate = Callable[[Any, str], tuple[float | None, float | None]]
_store_estimate: list[StoreEstimate] = []

#: The option names a child takes from its parent unless given: clock, tracer, provider, attribution.
INHERITED_OPTIONS = ("clock", "tracer", "provider", "service", "team", "user", "session_id", "tags")


def remainder(state: RunState) -> dict[str, float | None]:
    """What the parent ``state`` has left of each :data:`CARVED_LIMITS` limit (None: no limit),
    after use, open reservations and its children's holds, its wrap-up slice left out: tokens
    (int, >= 0), USD and seconds (float, >= 0). The caller holds the parent's lock."""
    use, limits = state.use, state.wrap_up.ordinary(state.limits)
    used = {
        "max_total_tokens": use.committed_tokens,
        "max_input_tokens": use.committed_input_tokens,
        "max_output_tokens": use.committed_output_tokens,
        "max_cost_usd": use.spent_usd + use.reserved_cost_usd,
        "max_duration_s": state.elapsed_s(),
    }
    left: dict[str, float | None] = {}
    for key in CARVED_LIMITS:
        limit = limits[key]
        if limit is None:
            left[key] = None
        elif key in ("max_cost_usd", "max_duration_s"):
            left[key] = max(0.0, float(limit) - used[key])
        else:
            left[key] = max(0, int(limit) - int(used[key]))
    return left


def carve_limits(
    own: Mapping[str, float | None], parent_left: Mapping[str, float | None]
) -> dict[str, float | None]:
    """A child's limits (every :data:`budgetlens.limits.LIMIT_KEYS` name): for each carved limit the
    smaller of ``own`` (the child's, None: unset) and ``parent_left`` (:func:`remainder`), else
    ``own``. Raises ValueError naming an unknown limit name in ``own``."""
    unknown = sorted(set(own) - set(LIMIT_KEYS))
    if unknown:
        raise ValueError(f"limits: unknown limit names {unknown}; known: {list(LIMIT_KEYS)}")
    carved: dict[str, float | None] = {}
    for key in LIMIT_KEYS:
        mine, left = own.get(key), parent_left.get(key)
        candidates = [value for value in (mine, left) if value is not None]
        carved[key] = min(candidates) if candidates else None
    return carved


class _Hold:
    __slots__ = ("ledger", "tokens", "output_tokens", "cost_usd")

    def __init__(self, ledger: RunLedger, tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.ledger, self.tokens, self.output_tokens, self.cost_usd = ledger, tokens, output_tokens, cost_usd


class ParentLink:
    """A child run's step in its parent's ledger (``parent``: the parent's
    :class:`budgetlens.guard.run_state.RunState`). Calls are named by the child's call ids
    (``child run id:number``). Never raises for budget reasons: refusals are returned as Stops,
    whose detail names the parent run."""

    def __init__(self, parent: RunState) -> None:
        self.parent = parent
        self.parent_run_id = parent.run_id
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()

    def _named(self, stop: Stop | None) -> Stop | None:
        if stop is None:
            return None
        detail = f"parent run {self.parent_run_id}" + (f": {stop.detail}" if stop.detail else "")
        return stop._replace(detail=detail)

    def _spent(self) -> Stop | None:
        parent = self.parent
        if parent.finished is not None:
            return Stop(sc.STOP_BUDGET_TOKENS, 0, 0, 0, "finished")
        limit = parent.limits["max_duration_s"]
        stop = lim.time_stop(limit, parent.elapsed_s()) if limit is not None else None
        shared = parent.shared
        return stop or lim.spent_stop(
            parent.wrap_up.ordinary(parent.limits), parent.use, shared.spend_stop if shared.spend else None
        )

    def check(self) -> Stop | None:
        """The parent's refusal when it is finished or a limit of it is spent (wall time, cost, a
        spend window, tokens), else its own parent's, else None."""
        with self.parent.lock:
            stop = self._named(self._spent())
            if stop is None:
                stop = self.parent.shared.pool_stop()
            return stop

    def reserve(self, tokens: int, output_tokens: int, cost_usd: float, call_id: str) -> Stop | None:
        """Hold a child call's reservation (``tokens``, ``output_tokens`` of them output, estimated
        ``cost_usd``) in the parent, if it fits the parent's limits and shared steps."""
        parent = self.parent
        with parent.lock:
            stop = self._named(
                self._spent()
                or lim.reserve_stop(
                    parent.wrap_up.ordinary(parent.limits), parent.use, tokens, output_tokens, cost_usd
                )
            )
            if stop is None:
                stop = parent.shared.reserve(tokens, cost_usd, call_id=call_id, output_tokens=output_tokens)
            if stop is not None:
                return stop
            use = parent.use
            use.reserved_tokens += tokens
            use.reserved_output_tokens += output_tokens
            use.reserved_cost_usd += cost_usd
            with self._lock:
                self._holds[call_id] = _Hold(use, tokens, output_tokens, cost_usd)
            return None

    def _drop(self, call_id: str | None) -> _Hold | None:
        with self._lock:
            hold = self._holds.pop(call_id, None) if call_id is not None else None
        if hold is not None and hold.ledger is self.parent.use:  # a parent reset() dropped it already
            use = hold.ledger
            use.reserved_tokens -= hold.tokens
            use.reserved_output_tokens -= hold.output_tokens
            use.reserved_cost_usd = max(0.0, use.reserved_cost_usd - hold.cost_usd)
        return hold

    def settle(
        self, call_id: str | None, usage: Usage | None, cost_usd: float | None, charged_tokens: int
    ) -> None:
        """Replace the hold of call ``call_id`` (None: recorded without a reservation) with the
        recorded call: its ``usage`` and ``cost_usd`` (USD, None: unpriced) or, without usage,
        ``charged_tokens`` (the child's conservative charge) counted as unknown usage."""
        parent = self.parent
        with parent.lock:
            hold = self._drop(call_id)
            use = parent.use
            if usage is not None:
                use.input_tokens += usage.input_tokens
                use.output_tokens += usage.output_tokens
                use.cache_read_tokens += usage.cache_read_tokens
                use.cache_write_tokens += usage.cache_write_tokens
                use.reasoning_tokens += usage.reasoning_tokens
                if cost_usd is not None:
                    use.cost_usd += cost_usd
                    use.priced_calls += 1
                else:
                    use.unpriced_calls += 1
            elif charged_tokens:
                use.add_unknown(charged_tokens)
            res = None if hold is None else _AsReservation(call_id, hold)
            used = charged_tokens if usage is None else usage.input_tokens + usage.output_tokens
            shared = parent.shared
            shared.settle_call(res, used, usage, cost_usd)
            if shared.spend is not None:
                shared.settle_spend(res, cost_usd, usage_known=usage is not None)
            parent.child_spent_locked()  # its thresholds fire as the child's use happens

    def release(self, call_id: str) -> None:
        """Give back the hold of a child call that failed before spending anything."""
        parent = self.parent
        with parent.lock:
            hold = self._drop(call_id)
            if hold is not None:
                parent.shared.release(_AsReservation(call_id, hold))

    def charge_tool(self, name: str, fee_usd: float) -> Stop | None:
        """Count a child's paid tool fee (USD) in the parent's cost, unless it does not fit."""
        parent = self.parent
        with parent.lock:
            stop = self._named(lim.tool_cost_stop(parent.limits["max_cost_usd"], parent.use, name, fee_usd))
            if stop is None:
                stop = parent.shared.charge_tool(fee_usd, name)
            if stop is None:
                parent.use.tool_cost_usd += fee_usd
                parent.child_spent_locked()
            return stop


class _AsReservation:
    """A hold seen as a reservation by the parent's own shared steps (``tokens``, ``cost_usd``,
    ``output_tokens`` and the call id as ``run_id:id``)."""

    __slots__ = ("run_id", "id", "tokens", "output_tokens", "cost_usd")

    def __init__(self, call_id: str | None, hold: _Hold | None) -> None:
        run_id, _, number = (call_id or ":").rpartition(":")
        self.run_id, self.id = run_id, number
        self.tokens = hold.tokens if hold else 0
        self.output_tokens = hold.output_tokens if hold else 0
        self.cost_usd = hold.cost_usd if hold else 0.0


def check_fan_out(
    n: int,
    task_type: str,
    parent_left: Mapping[str, float | None],
    estimate_tokens: float | None,
    estimate_usd: float | None,
) -> None:
    """Refuse a fan-out of ``n`` children of ``task_type`` whose estimates (tokens and/or USD per
    child; None: not checked) times ``n`` do not fit the parent's remainder ``parent_left``
    (:func:`remainder`). Raises BudgetExceeded (``budget_tokens`` or ``budget_cost``, detail
    ``fan-out of n task_type``); ValueError for ``n`` < 1 or an estimate < 0, or no estimate."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (children), got {n!r}")
    if estimate_tokens is None and estimate_usd is None:
        raise ValueError(
            f"fan-out of {task_type}: no estimate; give estimate_tokens/estimate_usd or a store (db) with "
            "the task type's baseline"
        )
    for name, value in (("estimate_tokens", estimate_tokens), ("estimate_usd", estimate_usd)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{name} must be a number >= 0 or None, got {value!r}")
    detail = f"fan-out of {n} {task_type}"
    for key, reason, estimate in (
        ("max_total_tokens", sc.STOP_BUDGET_TOKENS, estimate_tokens),
        ("max_cost_usd", sc.STOP_BUDGET_COST, estimate_usd),
    ):
        left = parent_left.get(key)
        if estimate is not None and left is not None and n * estimate > left:
            raise BudgetExceeded(reason, left, 0, n * estimate, detail)


def use_store_estimate(estimate: StoreEstimate) -> None:
    """Set how ``fan_out(db=...)`` reads a task type's P50 from a store: the package root passes
    :func:`budgetlens.analysis.fan_out_estimate.p50_estimate` (imported when first called)."""
    _store_estimate[:] = [estimate]


def _inherited(parent: Any) -> dict[str, Any]:
    """The options a child takes from ``parent`` (a RunBudget) unless given."""
    o, who = parent.options, parent.options.attribution
    return {
        "clock": o.clock,
        "tracer": o.tracer,
        "provider": o.provider,
        "service": who.service,
        "team": who.team,
        "user": who.user,
        "session_id": who.session_id,
        "tags": dict(who.tags) or None,
    }


def child(
    self: RunBudget,
    task_type: str = "default",
    limits: Mapping[str, float | None] | None = None,
    **options: Any,
) -> RunBudget:
    """``RunBudget.child``: a sub-agent's run: a RunBudget whose token, cost and wall-time limits
    are the smaller of ``limits`` (constructor names) and this run's remainder (:func:`carve_limits`),
    whose every call is reserved and counted in this run as it happens (one ledger: the module
    docstring), and whose span names this run (``budgetlens.parent_run_id``). ``options``: constructor
    keywords (clock, tracer, provider and attribution default to this run's; no ``pool``/``spend``).
    Raises BudgetExceeded when this run is spent; RuntimeError after ``finish()``; ValueError as the
    constructor."""
    if options.get("pool") is not None or options.get("spend") is not None:
        raise ValueError(
            "child: pool and spend come from the parent run (its use counts there); do not pass them"
        )
    state = self._state
    with state.lock:
        stop = ParentLink(state).check() if state.finished is None else None
        if state.finished is not None:
            raise RuntimeError(f"run {state.run_id} is finished: no child after finish()")
        if stop is not None:
            raise stop.exception()
        carved = carve_limits(dict(limits or {}), remainder(state))
    run_type: Any = type(self)  # RunBudget or a subclass: its keywords are checked by RunOptions
    made = run_type(**carved, **{**_inherited(self), **options, "task_type": task_type})
    made._state.shared.parent = ParentLink(state)
    made.parent_run_id = state.run_id
    made._state.telemetry.span.set_attribute(sc.BUDGET_PARENT_RUN_ID, state.run_id)
    with state.lock:
        state.children.append(made)
    return made


def fan_out(
    self: RunBudget,
    n: int,
    task_type: str = "default",
    limits: Mapping[str, float | None] | None = None,
    *,
    estimate_tokens: float | None = None,
    estimate_usd: float | None = None,
    db: Any = None,
    **options: Any,
) -> list[RunBudget]:
    """``RunBudget.fan_out``: ``n`` children (:func:`child`), refused before any is made
    (BudgetExceeded, detail ``fan-out of n task_type``) when this run's remainder cannot cover ``n``
    × the estimate per child: ``estimate_tokens`` (tokens) / ``estimate_usd`` (USD), else the task
    type's P50 in the store at ``db`` (read as :func:`use_store_estimate` says). Raises ValueError
    for ``n`` < 1 or no estimate."""
    if db is not None and estimate_tokens is None and estimate_usd is None and _store_estimate:
        estimate_tokens, estimate_usd = _store_estimate[0](db, task_type)
    state = self._state
    with state.lock:
        check_fan_out(n, task_type, remainder(state), estimate_tokens, estimate_usd)
        return [child(self, task_type, limits, **options) for _ in range(n)]
