"""Runaway runs (design §6): runs far above their task type's P95, or stuck calling one tool.

A run is a runaway when its total tokens are above ``k`` x the P95 of its task type's runs in the
same window (default ``k`` = 3), or when it called the same tool ``repeats`` or more times in a
row (default 10; ``budgetlens.tool_call`` events in time order; tool arguments are never stored,
so "the same call" means the same tool name). The Overview shows how many there were and their
share of the spend; ``budgetlens runaways`` lists them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import duckdb
import pandas as pd

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.spend_queries import for_store
from budgetlens.analysis.values import scalar

__all__ = ["DEFAULT_K", "DEFAULT_REPEATS", "Runaways", "runaways"]

#: A run above this many times its task type's P95 of total tokens is a runaway.
DEFAULT_K = 3.0
#: The same tool called this many times in a row is a loop.
DEFAULT_REPEATS = 10


@dataclass(frozen=True)
class Runaways:
    """The runaway runs of a window. ``runs``: run_id, task_type, start_utc, total_tokens,
    cost_usd (USD; None when unpriced), stop_reason, p95_total_tokens, tokens_ratio (total / P95),
    longest_repeat (the longest run of one tool), repeated_tool, over_p95, tool_loop (bools),
    largest first. ``count`` runs of ``total_runs``; ``cost_usd`` their priced spend and
    ``cost_share`` its share (0..1) of the window's priced spend (None when nothing is priced)."""

    runs: pd.DataFrame = field(repr=False)
    count: int
    total_runs: int
    cost_usd: float | None
    cost_share: float | None
    k: float
    repeats: int


def runaways(
    conn: duckdb.DuckDBPyConnection, f: Filters, k: float = DEFAULT_K, repeats: int = DEFAULT_REPEATS
) -> Runaways:
    """The runaway runs of ``f``: above ``k`` (> 0) x their task type's P95 of total tokens, or
    with one tool called ``repeats`` (>= 2) or more times in a row. Raises ValueError naming the
    argument for another ``k`` or ``repeats``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or not 0 < k < float("inf"):
        raise ValueError(f"k must be a finite number > 0, got {k!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2:
        raise ValueError(f"repeats must be an integer >= 2, got {repeats!r}")
    params = {**f.params(), "k": float(k), "repeats": int(repeats)}
    frame = run_query(conn, for_store(conn, eq.RUNAWAYS), params)
    totals = run_query(conn, for_store(conn, eq.SPEND_TOTAL), f.params()).iloc[0]
    total_cost = scalar(totals["cost_usd"])
    # each dollar once: a parent's cost includes its children's (issue 21), so the own spend is summed
    cost = scalar(frame["own_cost_usd"].sum(min_count=1)) if len(frame) else None
    frame = frame.drop(columns=["own_cost_usd"])
    share = None
    if total_cost:
        share = (cost or 0.0) / total_cost
    return Runaways(
        runs=frame,
        count=len(frame),
        total_runs=int(totals["runs"]),
        cost_usd=cost,
        cost_share=share,
        k=float(k),
        repeats=int(repeats),
    )
