"""Who spent it (issue 19): spend and runs by team, user or service over the filtered runs.

Read by ``budgetlens spend`` and the dashboard's Cost page. One statement per grouping, built
from the fixed ``GROUPINGS`` table (column names never come from input); filtered by
``budgetlens.analysis.queries.FILTERED``.
"""

from __future__ import annotations

import pandas as pd

from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.queries import FILTERED, IS_BUDGET_STOP, count_where
from budgetlens.analysis.spend_queries import SPEND, for_store

__all__ = ["GROUPINGS", "SPEND_BY_COLUMNS", "UNATTRIBUTED", "spend_by"]

#: Grouping name -> the ``runs`` column it groups by.
GROUPINGS = {"team": "team", "user": "user_id", "service": "service_name"}
#: The group of runs that carry no value for the grouping.
UNATTRIBUTED = "(none)"
#: Columns of ``spend_by`` after the grouping's own.
SPEND_BY_COLUMNS = (
    "runs",
    "cost_usd",
    "cost_share",
    "total_tokens",
    "partial_cost_runs",
    "budget_stops",
)


def _statement(column: str) -> str:
    return f"""
WITH {FILTERED},
{SPEND}
SELECT coalesce({column}, $none) AS key,
       count(*) AS runs,
       sum(own_cost_usd) AS cost_usd,
       sum(own_total_tokens) AS total_tokens,
       {count_where("unpriced_calls > 0 OR unknown_usage_calls > 0")} AS partial_cost_runs,
       {count_where(IS_BUDGET_STOP)} AS budget_stops
FROM spend
GROUP BY 1
ORDER BY cost_usd DESC NULLS LAST, runs DESC, key
"""


_STATEMENTS = {name: _statement(column) for name, column in GROUPINGS.items()}


def spend_by(conn, f: Filters, by: str = "team") -> pd.DataFrame:
    """Spend and runs per ``by`` (``team``, ``user`` or ``service``) of the runs ``f`` keeps,
    most expensive first. Columns: ``by`` (the value; ``UNATTRIBUTED`` for runs without one),
    runs, cost_usd (USD, known spend: the priced calls; NULL when nothing is priced), cost_share
    (0..1 of the known spend of every group; NULL when nothing is priced), total_tokens,
    partial_cost_runs (runs with unpriced calls or unknown usage: their cost is a lower bound),
    budget_stops. Raises ValueError for another ``by``."""
    if by not in _STATEMENTS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    frame = run_query(conn, for_store(conn, _STATEMENTS[by]), {**f.params(), "none": UNATTRIBUTED})
    total = frame["cost_usd"].sum(min_count=1)
    frame["cost_share"] = frame["cost_usd"] / total if pd.notna(total) and total > 0 else None
    frame = frame.rename(columns={"key": by})
    return frame[[by, *SPEND_BY_COLUMNS]]
