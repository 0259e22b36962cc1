"""The end of a run: :func:`finish_run` (``RunBudget.finish``) and what it settles that no adapter
did: a budget stop that a framework wrapped in its own exception, and reservations whose call was
never recorded nor released.

Kept apart from :mod:`budgetlens.guard.run_budget` and :mod:`budgetlens.guard.run_state` so the
rules are read (and tested) on their own.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from budgetlens.guard import options as opt
from budgetlens.guard import stops as lim
from budgetlens.guard.results import BudgetExceeded, RunResult

if TYPE_CHECKING:
    from budgetlens.guard.run_state import RunState

__all__ = ["budget_cause", "charge_unrecorded", "finish_run"]

log = logging.getLogger(__name__)


def budget_cause(error: BaseException | None) -> BudgetExceeded | None:
    """The ``BudgetExceeded`` that ``error`` is or was caused by, or None.

    Frameworks re-raise a refusal from a hook as their own error (the OpenAI Agents SDK's
    ``UserError``, smolagents' ``AgentGenerationError``, an ``ExceptionGroup`` of a task group):
    the chain (``__cause__``, then ``__context__``, and the members of exception groups) is
    followed, each exception once, so the run is recorded as the budget stop it was."""
    seen: set[int] = set()
    todo: list[BaseException] = [error] if error is not None else []
    while todo:
        exc = todo.pop(0)
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, BudgetExceeded):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            todo.extend(exc.exceptions)
        todo.extend(e for e in (exc.__cause__, exc.__context__) if e is not None)
    return None


def charge_unrecorded(ledger: Any, record: Callable[..., Any], error: BaseException | None = None) -> int:
    """Record every reservation still open in ``ledger`` (a ``RunLedger``) through ``record``
    (``RunBudget.record``) as a call of unknown usage, charged its reservation: a call that was
    reserved and never recorded or released may have been paid for, so the run's result, its
    spans and the store show the charge and usage_status ``unknown``, never 0 (design §1).
    ``error`` (the exception the run ended with) names the calls' ``error.type``. The budget
    refusal the run ended at stays its stop (those calls were admitted before it). Returns the
    number of calls charged."""
    refusal = ledger.refusal
    open_now = list(ledger.reservations.values())
    for res in open_now:
        record(None, reservation=res, error_type=type(error).__name__ if error is not None else None)
    ledger.refusal = refusal
    return len(open_now)


def finish_run(
    state: RunState, stop_reason: str | None, error: BaseException | None, retryable: bool | None
) -> RunResult:
    """End the run of ``state`` (``RunBudget.finish``): check the arguments, end the run once under
    its lock (later calls return the same result: :class:`budgetlens.guard.results.RunResult`),
    then end the run span (a failure there is logged). Raises ValueError for an unknown
    ``stop_reason`` or a ``retryable`` that is not a bool or None."""
    opt.check_stop_reason(stop_reason)
    if retryable is not None and not isinstance(retryable, bool):
        raise ValueError(f"retryable must be True, False or None, got {retryable!r}")
    with state.lock:
        if state.finished is not None:
            return state.finished
        error = budget_cause(error) or error  # a refusal a framework re-raised as its own

        def record_unknown(usage: None, *, reservation: Any, error_type: str | None = None) -> Any:
            return state.record(usage, None, reservation, None, None, error_type)

        charge_unrecorded(state.use, record_unknown, error)  # reserved, never recorded
        result = _finish_locked(state, stop_reason, error, retryable)
    try:
        state.telemetry.finish(result, state.limits, state.use.usage_known, state.use.priced_cost_usd)
    except Exception:
        log.exception("run %s: could not end the run span", state.run_id)
    return result


def _finish_locked(
    state: RunState, stop_reason: str | None, error: BaseException | None, retryable: bool | None
) -> RunResult:
    use = state.use
    refusal = error if isinstance(error, BudgetExceeded) else use.refusal
    reason = lim.final_stop_reason(stop_reason, error, use.refusal, state.wrap_up.done)
    result = use.result(
        state.run_id,
        state.options.task_type,
        reason,
        state.elapsed_s(),
        error,
        limits=state.limits,
        stop=refusal,
        unconfirmed_effects=state.effects.unconfirmed,
        downgrades=state.dispatch.downgrades,
    )
    policy = state.options.retry_policy
    if retryable is None and policy is not None:
        try:
            retryable = bool(policy(result))
        except Exception:
            log.exception("run %s: retry_policy failed; the default rule decides", state.run_id)
    if retryable is not None:
        result = dataclasses.replace(result, retryable=retryable)
    # Reservations still open at the end (neither recorded nor released) stop being held
    # in the shared pool and windows; their unknown usage is charged as reserved.
    state.shared.settle_open(use, charge=True)
    state.finished = result
    return result
