"""Changing a running budget's limits: ``set_max`` (who changed which limit, kept and emitted).

Each change is a :class:`budgetlens.guard.results.LimitChange` in the run's ``limit_changes`` and a
``budgetlens.limit_changed`` event; a resumed run's authorized raise is recorded the same way
(``changed_by`` names who authorized it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from budgetlens.guard.results import LimitChange
from budgetlens.limits import check_limits

__all__ = ["set_limits"]


def set_limits(state: Any, limits: Mapping[str, float | None], changed_by: str | None) -> None:
    """Check ``limits`` (constructor names -> value or None) and ``changed_by`` (str or None), apply
    them to ``state`` (a :class:`budgetlens.guard.run_state.RunState`) under its lock, each change
    kept and emitted, then update the run span's limits. Raises ValueError naming an unknown or
    invalid limit, or a ``changed_by`` that is not a string."""
    check_limits(limits)
    if changed_by is not None and not isinstance(changed_by, str):
        raise ValueError(f"changed_by must be a string (who changed the limit) or None, got {changed_by!r}")
    with state.lock:
        now = datetime.now(UTC)
        for name, new in limits.items():
            previous = state.limits[name]
            if previous == new:
                continue
            state.limits[name] = new
            state.limit_changes.append(LimitChange(name, previous, new, changed_by, now))
            state.dispatch.limit_changed(state.use, state.limits, name, previous, new, changed_by)
    state.telemetry.set_limits(state.limits)
