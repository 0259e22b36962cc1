"""The Cost page's tiles (issue 25): the window's spend figures without the rest of the Overview.

``cost_totals`` reads the runs once for the figures the Cost page shows above its charts: the
same values as those of ``views.overview`` (the same aggregates:
``queries.COST_TOTALS``), without the hit rates, the P95s and the token parts, which the Cost page does not
show (at 1M runs the Overview read touches about three times the columns).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.queries import COST_TOTAL_COLUMNS, COST_TOTALS
from budgetlens.analysis.spend_queries import for_store
from budgetlens.analysis.values import scalar

__all__ = ["CostTotals", "cost_is_lower_bound", "cost_totals"]


def cost_is_lower_bound(unpriced_calls: int, partially_priced_runs: int, unknown_usage_runs: int) -> bool:
    """True when a known spend leaves out usage of unknown cost (unpriced calls, partly priced
    runs, or calls with unknown usage): show it as known spend "+ unpriced usage"."""
    return bool(unpriced_calls or partially_priced_runs or unknown_usage_runs)


@dataclass(frozen=True)
class CostTotals:
    """The spend figures of a window, as ``views.Overview`` gives them: runs, cost_usd (USD,
    the priced calls' known spend, each dollar once; None when nothing is priced), priced_runs,
    partially_priced_runs, unpriced_calls, unknown_usage_runs, tool_cost_usd (USD, 0.0 without
    any paid tool call)."""

    runs: int
    cost_usd: float | None
    priced_runs: int
    partially_priced_runs: int
    unpriced_calls: int
    unknown_usage_runs: int
    tool_cost_usd: float

    @property
    def cost_is_lower_bound(self) -> bool:
        """``cost_is_lower_bound`` of these figures (``views.Overview.cost_is_lower_bound``)."""
        return cost_is_lower_bound(self.unpriced_calls, self.partially_priced_runs, self.unknown_usage_runs)


def cost_totals(conn: duckdb.DuckDBPyConnection, f: Filters) -> CostTotals:
    """The spend figures of the runs ``f`` keeps (``CostTotals``; statement ``queries.COST_TOTALS``)."""
    row = run_query(conn, for_store(conn, COST_TOTALS), f.params()).iloc[0]
    values = {c: scalar(row[c]) for c in COST_TOTAL_COLUMNS}
    return CostTotals(
        runs=int(values["runs"]),
        cost_usd=None if values["cost_usd"] is None else float(values["cost_usd"]),
        priced_runs=int(values["priced_runs"]),
        partially_priced_runs=int(values["partially_priced_runs"]),
        unpriced_calls=int(values["unpriced_calls"]),
        unknown_usage_runs=int(values["unknown_usage_runs"]),
        tool_cost_usd=float(values["tool_cost_usd"]),
    )
