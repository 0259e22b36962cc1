"""The run views (design §6): the run lists (most expensive, searchable, exported with every
column) and one run's detail with its calls, events and child runs. Same conventions as
``budgetlens.analysis.views`` (which re-exports them): an open read-only connection and a
``Filters`` in, a small pandas DataFrame (or a dataclass) out; statements from
``budgetlens.analysis.run_queries``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from budgetlens.analysis import run_queries as runq
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.values import scalar

__all__ = ["RunDetail", "run_detail", "run_tree", "runs_export", "runs_table", "top_runs"]


def top_runs(conn, f: Filters, limit: int = 20) -> pd.DataFrame:
    """The ``limit`` most expensive priced runs, columns as ``runs_table``."""
    return run_query(conn, runq.TOP_RUNS, {**f.params(), "limit": int(limit)})


def runs_table(conn, f: Filters, search: str = "", limit: int = 500, offset: int = 0):
    """One row per run, newest first: run_id, task_type, service_name, models, start_utc,
    turns, tool_calls, input_tokens, output_tokens, total_tokens, cost_usd, stop_reason,
    usage_status, quality (comma-separated data-quality flags, None when clean). ``search`` is a
    case-insensitive substring of the id, task type, service, models, stop reason, usage status
    (``unknown``) or quality flag (``future_time``). Raises ValueError for a negative limit
    or offset."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must be >= 0")
    params = {**f.params(), "search": search or "", "limit": int(limit), "offset": int(offset)}
    return run_query(conn, runq.RUNS_TABLE, params)


@dataclass(frozen=True)
class RunDetail:
    """One run: ``run`` (the ``runs`` row as a dict), ``calls`` [turn, start_utc, model,
    input_tokens, output_tokens, reserved_tokens, cumulative_tokens, limit_total_tokens,
    usage_status, cost_usd] and ``events`` [ts_utc, name, reason, from_model, to_model,
    tool_name, used_tokens, percent]."""

    run: dict
    calls: pd.DataFrame = field(repr=False)
    events: pd.DataFrame = field(repr=False)
    #: The run's child runs (issue 21), as :func:`run_tree` without the run itself (empty: none).
    children: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)


def run_detail(conn, run_id: str) -> RunDetail | None:
    """Return one run's detail, or None when ``run_id`` is not in the store."""
    params = {"run_id": run_id}
    run = run_query(conn, runq.RUN_DETAIL_RUN, params)
    if run.empty:
        return None
    record = {k: scalar(v) for k, v in run.iloc[0].to_dict().items()}
    return RunDetail(
        run=record,
        calls=run_query(conn, runq.RUN_DETAIL_CALLS, params),
        events=run_query(conn, runq.RUN_DETAIL_EVENTS, params),
        children=run_tree(conn, run_id).query("depth > 0").reset_index(drop=True),
    )


def run_tree(conn, run_id: str) -> pd.DataFrame:
    """The tree of runs below ``run_id`` (child runs name their parent: ``parent_run_id``), the run
    itself first at depth 0, then depth-first by start. Columns: depth (0, 1, ...), run_id,
    parent_run_id, task_type, start_utc, stop_reason, turns, total_tokens, cost_usd (USD),
    tool_cost_usd (USD). Empty when ``run_id`` is not in the store."""
    return run_query(conn, runq.RUN_TREE, {"run_id": run_id})


def runs_export(conn, f: Filters, search: str = "", limit: int = 500, offset: int = 0) -> pd.DataFrame:
    """As ``runs_table`` (same rows, order, ``search``), with every column of the ``runs``
    rollup (``budgetlens.store.schema.RUN_COLUMNS``): also trace_id, source, end_utc,
    duration_s (s), model_calls, cache_read_tokens, cache_write_tokens, reasoning_tokens,
    unpriced_calls, unknown_usage_calls, retryable, the ``limit_*`` the run ran under, warnings,
    downgrades and summaries. Raises ValueError for a negative limit or offset."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must be >= 0")
    params = {**f.params(), "search": search or "", "limit": int(limit), "offset": int(offset)}
    return run_query(conn, runq.RUNS_EXPORT, params)
