"""The per-child estimate a fan-out is checked with when the caller gives none: the P50 of the
child task type's baseline in a store (issue 21; moved here from the guard, issue 18).

``RunBudget.fan_out(n, task_type, db=...)`` reaches it through the one callable the package root
hands the guard (:func:`budgetlens.guard.children.use_store_estimate`), so the guard imports neither
the store nor the analysis: it sits beside the store, above the shared contract.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from budgetlens.analysis.filters import DEFAULT_WINDOW_DAYS, Filters
from budgetlens.analysis.values import scalar
from budgetlens.analysis.views import baselines
from budgetlens.store.connection import read_connection

__all__ = ["p50_estimate"]


def p50_estimate(db: Any, task_type: str) -> tuple[float | None, float | None]:
    """The P50 of total tokens and of cost (USD) of ``task_type``'s runs in the store at ``db`` (a
    path or lake location, read-only) over the default baseline window (``DEFAULT_WINDOW_DAYS``);
    (None, None) when the store has no run of it (a NaN P50, e.g. no priced run, is None too).
    Raises the store's errors (StoreMissing for a missing file)."""
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=DEFAULT_WINDOW_DAYS)
    with read_connection(db) as conn:
        frame = baselines(conn, Filters(start_utc=start, task_types=(task_type,)))
    if frame.empty:
        return None, None
    row = frame.iloc[0]

    def value(column: str) -> float | None:
        got = scalar(row.get(column))
        return None if got is None else float(got)

    return value("p50_total_tokens"), value("p50_cost_usd")
