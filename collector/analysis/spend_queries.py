"""Spend counted once (issue 21): the ``spend`` CTE that every sum over runs reads.

A parent run's stored totals include its children's (``RunBudget.child``: one ledger, its budget
covered them), so a sum of ``runs`` figures over a parent and its children counts the children
twice. ``SPEND`` gives each filtered run its own use beside the inclusive figures; it follows
``budgetlens.analysis.queries.FILTERED`` in a ``WITH`` list (it reads the ``filtered`` CTE).
"""

from __future__ import annotations

__all__ = ["HAS_CHILD_RUNS", "SPEND", "SPEND_COLUMNS", "SPEND_FLAT", "for_store"]

#: The figures a run's own use is given in (issue 21), as ``own_<column>`` of ``spend``.
SPEND_COLUMNS = (
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
)
#: A run whose stored totals come from its guard's run record (``retryable`` is set only there):
#: a parent's record counts its children's use (``RunBudget.child``: one ledger); before its
#: record lands, a parent's totals are its own calls'.
_HAS_GUARD_RECORD = "f.retryable IS NOT NULL"


def _own(column: str) -> str:
    return (
        f"CASE WHEN k.parent_run_id IS NOT NULL AND {_HAS_GUARD_RECORD} "
        f"THEN greatest(f.{column} - coalesce(k.{column}, 0), 0) ELSE f.{column} END AS own_{column}"
    )


#: Spend counted once (a CTE named ``spend``, after ``FILTERED``): the filtered runs with, for
#: each of ``SPEND_COLUMNS``, ``own_<column>``: the run's own use, its totals less its direct
#: children's (a child's own children are taken off in the child), so a sum of ``own_*`` over
#: any selection counts each token and dollar once, where it was spent; the plain columns stay
#: inclusive (a parent's budget covers its children: percentiles and baselines read those).
#: Sums over runs read ``own_*`` (OVERVIEW_*, COST_BY_PERIOD_*, spend by team/user/service, the
#: what-if's spent totals, the runaways' share).
SPEND = f"""
child_use AS (
    SELECT parent_run_id, {", ".join(f"sum({c}) AS {c}" for c in SPEND_COLUMNS)}
    FROM runs WHERE parent_run_id IS NOT NULL GROUP BY parent_run_id
),
spend AS (
    SELECT f.*, {", ".join(_own(c) for c in SPEND_COLUMNS)}
    FROM filtered f LEFT JOIN child_use k ON k.parent_run_id = f.run_id
)"""

#: ``SPEND`` for a store where no run has a parent (``HAS_CHILD_RUNS`` false): each run's own use
#: is its totals, as ``SPEND`` gives it there (its join finds no child), without the join and
#: the CASE per run and column (issue 25: about half of the Overview's read at 1M runs).
SPEND_FLAT = f"""
spend AS (
    SELECT *, {", ".join(f"{c} AS own_{c}" for c in SPEND_COLUMNS)} FROM filtered
)"""
#: Whether any stored run is a child run (a parent's stored totals include its children's).
HAS_CHILD_RUNS = "SELECT EXISTS (SELECT 1 FROM runs WHERE parent_run_id IS NOT NULL)"


def for_store(conn, statement: str) -> str:
    """``statement`` (a named statement with ``SPEND`` in its ``WITH`` list) as ``conn``'s store
    reads it: with ``SPEND_FLAT`` in its place when no stored run has a parent (the same values,
    at less cost), else unchanged. One look-up of ``HAS_CHILD_RUNS`` (a few ms at 1M runs).
    Raises ValueError for a statement without ``SPEND``."""
    if SPEND not in statement:
        raise ValueError("for_store: the statement does not read SPEND")
    row = conn.execute(HAS_CHILD_RUNS).fetchone()
    return statement if row and row[0] else statement.replace(SPEND, SPEND_FLAT)
