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
from budgetlens.analysis import views
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.spend_queries import for_store
from budgetlens.analysis.values import is_missing, scalar

__all__ = ["DEFAULT_K", "DEFAULT_REPEATS", "RunawayBasis", "Runaways", "basis_of", "runaways"]

#: A run above this many times its task type's P95 of total tokens is a runaway.
DEFAULT_K = 3.0
#: The same tool called this many times in a row is a loop.
DEFAULT_REPEATS = 10


@dataclass(frozen=True)
class RunawayBasis:
    """What the runaways of a window are measured against, per task type of its runs (the same
    order in each tuple; a task type may be None): ``p95_total_tokens`` (None when no run of
    the type has a total), and the window's ``runs`` and priced own spend ``cost_usd`` (USD;
    None when nothing is priced). ``basis_of`` takes it from the Overview of the same filters,
    which holds these figures; hashable, so a cached loader can take it as an argument."""

    task_types: tuple[str | None, ...]
    p95_total_tokens: tuple[float | None, ...]
    runs: int
    cost_usd: float | None


def basis_of(overview: views.Overview) -> RunawayBasis:
    """The ``RunawayBasis`` of the filters ``overview`` (``views.overview``) was read with: its
    per-task P95 of total tokens (``quantile_cont`` over the same runs as ``runaways`` takes
    it), its runs and its priced spend (each dollar once). Pure."""
    per_task = overview.per_task
    return RunawayBasis(
        task_types=tuple(None if is_missing(t) else str(t) for t in per_task["task_type"]),
        p95_total_tokens=tuple(scalar(v) for v in per_task["p95_total_tokens"]),
        runs=overview.runs,
        cost_usd=overview.cost_usd,
    )


def _read_basis(conn: duckdb.DuckDBPyConnection, f: Filters) -> RunawayBasis:
    """The ``RunawayBasis`` of ``f`` read from the store (``evidence_queries.RUNAWAY_BASIS``)."""
    frame = run_query(conn, for_store(conn, eq.RUNAWAY_BASIS), f.params())
    return RunawayBasis(
        task_types=tuple(None if is_missing(t) else str(t) for t in frame["task_type"]),
        p95_total_tokens=tuple(scalar(v) for v in frame["p95_total_tokens"]),
        runs=int(frame["runs"].sum()),
        cost_usd=scalar(frame["cost_usd"].sum(min_count=1)),
    )


def _statement(conn: duckdb.DuckDBPyConnection, repeats: int) -> str:
    """The statement of the runaways with their P95s given: ``RUNAWAYS_GIVEN_P95``, or, when no
    stored run may be a tool loop (``MAY_HAVE_TOOL_LOOPS``, one read of the events),
    ``RUNAWAYS_OVER_P95_GIVEN``: the same rows at less cost (issue 25)."""
    if bool(run_query(conn, eq.MAY_HAVE_TOOL_LOOPS, {"repeats": repeats}).iloc[0, 0]):
        return eq.RUNAWAYS_GIVEN_P95
    return eq.RUNAWAYS_OVER_P95_GIVEN


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
    conn: duckdb.DuckDBPyConnection,
    f: Filters,
    k: float = DEFAULT_K,
    repeats: int = DEFAULT_REPEATS,
    basis: RunawayBasis | None = None,
) -> Runaways:
    """The runaway runs of ``f``: above ``k`` (> 0) x their task type's P95 of total tokens, or
    with one tool called ``repeats`` (>= 2) or more times in a row. ``basis``: the P95s and the
    spend of ``f``'s runs when the caller has them (``basis_of`` its Overview of the same
    filters; issue 25: the Overview page then reads the runs once less), else read here. Raises
    ValueError naming the argument for another ``k`` or ``repeats``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or not 0 < k < float("inf"):
        raise ValueError(f"k must be a finite number > 0, got {k!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2:
        raise ValueError(f"repeats must be an integer >= 2, got {repeats!r}")
    if basis is None:
        basis = _read_basis(conn, f)
    params = {
        **f.params(),
        "k": float(k),
        "repeats": int(repeats),
        "basis_task_types": list(basis.task_types),
        "basis_tokens": list(basis.p95_total_tokens),
        "least_given": min((p for p in basis.p95_total_tokens if p is not None), default=None),
    }
    frame = run_query(conn, for_store(conn, _statement(conn, int(repeats))), params)
    total_cost = basis.cost_usd
    # each dollar once: a parent's cost includes its children's (issue 21), so the own spend is summed
    cost = scalar(frame["own_cost_usd"].sum(min_count=1)) if len(frame) else None
    frame = frame.drop(columns=["own_cost_usd"])
    share = None
    if total_cost:
        share = (cost or 0.0) / total_cost
    return Runaways(
        runs=frame,
        count=len(frame),
        total_runs=basis.runs,
        cost_usd=cost,
        cost_share=share,
        k=float(k),
        repeats=int(repeats),
    )
