"""Every limit one run ran under, how much of each it used, and the one that stopped it (design
§6; the Runs page's limits table). Pure, over a ``runs`` row as a dict."""

from __future__ import annotations

from typing import Any

import pandas as pd

from budgetlens import semconv as sc
from budgetlens.analysis.values import scalar
from budgetlens.limits import LIMITS

__all__ = ["RUN_LIMIT_COLUMNS", "STOP_METRICS", "run_limits"]

#: Stop reason -> the metrics whose limit can have fired it (tokens: the most used of the three).
STOP_METRICS: dict[str, tuple[str, ...]] = {
    sc.STOP_BUDGET_TOKENS: ("total_tokens", "input_tokens", "output_tokens"),
    sc.STOP_BUDGET_TURNS: ("turns",),
    sc.STOP_BUDGET_TOOLS: ("tool_calls",),
    sc.STOP_BUDGET_TIME: ("duration_s",),
    sc.STOP_BUDGET_COST: ("cost_usd",),
}
#: Columns of ``run_limits``.
RUN_LIMIT_COLUMNS = ("key", "unit", "limit", "used", "used_share", "fired")


def run_limits(run: dict[str, Any]) -> pd.DataFrame:
    """One row per limit the run ran under (its ``limit_*`` columns that are set), in the limit
    table's order: key (``max_total_tokens``...), unit (tokens, count, s, USD), limit, used (the
    run's figure, None when unknown), used_share (used / limit, 0..1+; None when unknown or the
    limit is 0), fired (True for the limit that stopped the run: the one its stop reason names;
    among the token limits the most used). Empty (those columns) when the run had no limit."""
    rows = []
    for spec in LIMITS:
        limit = scalar(run.get(spec.store_column))
        if limit is None:
            continue
        used = scalar(run.get(spec.metric))
        share = float(used) / float(limit) if used is not None and float(limit) > 0 else None
        rows.append(
            {
                "key": spec.name,
                "unit": spec.unit,
                "limit": limit,
                "used": used,
                "used_share": share,
                "fired": False,
            }
        )
    frame = pd.DataFrame(rows, columns=list(RUN_LIMIT_COLUMNS))
    candidates = STOP_METRICS.get(str(run.get("stop_reason")), ())
    keys = [f"max_{m}" for m in candidates]
    mine = frame[frame["key"].isin(keys)]
    if len(mine):
        shares = pd.to_numeric(mine["used_share"], errors="coerce").fillna(-1.0)
        frame.loc[shares.idxmax(), "fired"] = True
    return frame
