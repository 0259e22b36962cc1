"""What the end of a run settles that no adapter did: a budget stop that a framework wrapped in
its own exception, and reservations whose call was never recorded nor released.

Kept apart from :mod:`budgetlens.guard.run_budget` so the two rules are read (and tested) on
their own; ``RunBudget.finish`` calls both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from budgetlens.guard.results import BudgetExceeded

__all__ = ["budget_cause", "charge_unrecorded"]


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
