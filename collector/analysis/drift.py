"""Drift (design §6): per task type, this week's P95 against the previous window's, so that a
preset is not adopted on stale evidence.

The recent window is the ``recent_days`` (default 7) ending at the filter's end (or the newest
run), the previous one the ``recent_days`` before it; the other filters (task types, models,
services) apply to both. A P95 of total tokens or of cost that moved by more than
``DRIFT_THRESHOLD`` (25 %) either way is flagged; a window with fewer than ``MIN_RUNS`` runs is
not compared (``drifted`` False, ``change_*`` None).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pandas as pd

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis.filters import Filters, data_extent, run_query

__all__ = ["DEFAULT_RECENT_DAYS", "DRIFT_THRESHOLD", "MIN_RUNS", "drift"]

#: A relative change of the P95 above this (either way) is drift.
DRIFT_THRESHOLD = 0.25
DEFAULT_RECENT_DAYS = 7.0
#: Fewer runs than this in either window: no comparison.
MIN_RUNS = 5

COLUMNS = (
    "task_type",
    "n_recent",
    "n_previous",
    "p95_total_tokens_recent",
    "p95_total_tokens_previous",
    "change_total_tokens",
    "p95_cost_usd_recent",
    "p95_cost_usd_previous",
    "change_cost_usd",
    "drifted",
)


def _change(recent, previous):
    if recent is None or previous is None or pd.isna(recent) or pd.isna(previous) or previous == 0:
        return None
    return (float(recent) - float(previous)) / float(previous)


def drift(
    conn: duckdb.DuckDBPyConnection,
    f: Filters,
    recent_days: float = DEFAULT_RECENT_DAYS,
    threshold: float = DRIFT_THRESHOLD,
) -> pd.DataFrame:
    """Per task type: n_recent, n_previous, the P95 of total tokens and of known cost (USD) in
    each window, change_total_tokens and change_cost_usd ((recent - previous) / previous; None
    without enough runs), drifted (either change above ``threshold`` in absolute value). Windows
    as the module docstring; ``f.start_utc`` is not used. Raises ValueError for
    ``recent_days`` <= 0 or ``threshold`` < 0."""
    if not recent_days > 0:
        raise ValueError(f"recent_days must be > 0, got {recent_days!r}")
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if f.end_utc is not None:
        end = f.end_utc
    else:
        _, last, n = data_extent(conn)
        if not n or last is None:
            return pd.DataFrame(columns=COLUMNS)
        end = last + dt.timedelta(microseconds=1)
    split = end - dt.timedelta(days=recent_days)
    start = split - dt.timedelta(days=recent_days)
    params = {**f.params(), "start_utc": start, "split_utc": split, "end_utc": end}
    frame = run_query(conn, eq.DRIFT, params)
    rows = []
    for _, row in frame.iterrows():
        enough = row["n_recent"] >= MIN_RUNS and row["n_previous"] >= MIN_RUNS
        tokens = _change(row["p95_total_tokens_recent"], row["p95_total_tokens_previous"]) if enough else None
        cost = _change(row["p95_cost_usd_recent"], row["p95_cost_usd_previous"]) if enough else None
        drifted = any(c is not None and abs(c) > threshold for c in (tokens, cost))
        rows.append(
            {**row.to_dict(), "change_total_tokens": tokens, "change_cost_usd": cost, "drifted": drifted}
        )
    return pd.DataFrame(rows, columns=COLUMNS)
