"""Shared bits of the evidence tools on the Baselines and Presets pages: the drift flag."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from budgetlens.analysis.drift import DEFAULT_RECENT_DAYS, DRIFT_THRESHOLD
from budgetlens.dashboard.formatting import safe_text


def _change(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:+.0%}"


def drift_flag(frame: pd.DataFrame) -> None:
    """A warning naming each task type whose P95 (tokens or cost) of the last 7 days moved by
    more than 25 % against the 7 days before (``budgetlens.analysis.drift.drift``); nothing
    when none did."""
    flagged = frame[frame["drifted"].astype(bool)] if len(frame) else frame
    if flagged.empty:
        return
    parts = [
        f"**{safe_text(row.task_type)}** (P95 tokens {_change(row.change_total_tokens)}, "
        f"cost {_change(row.change_cost_usd)})"
        for row in flagged.itertuples()
    ]
    st.warning(
        f"Drift: the P95 of the last {DEFAULT_RECENT_DAYS:g} days moved by more than "
        f"{DRIFT_THRESHOLD:.0%} against the {DEFAULT_RECENT_DAYS:g} days before for "
        + ", ".join(parts)
        + ". A preset from this window rests on evidence that is changing.",
        icon=":material/trending_up:",
    )


#: Metrics of the Kaplan–Meier table and their display formats.
_KM_METRICS = (
    ("total_tokens", "{:,.0f}"),
    ("turns", "{:,.0f}"),
    ("tool_calls", "{:,.0f}"),
    ("duration_s", "{:,.1f}"),
    ("cost_usd", "{:,.4f}"),
)


def km_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``budgetlens.analysis.censoring.censored_baselines`` as text cells: the censored share
    in %, each Kaplan–Meier P95 as ``48,000`` or ``≥ 48,000`` (a lower bound), never a bare
    number that looks exact."""
    from budgetlens.analysis.censoring import Percentile

    rows = []
    for row in frame.itertuples():
        out = {
            "Task type": row.task_type,
            "Runs": row.n,
            "Stopped by a budget": f"{row.censored_runs:,} ({row.censored_share:.1%})",
            "Material": "yes" if row.material else "no",
        }
        for metric, fmt in _KM_METRICS:
            value = getattr(row, f"km_p95_{metric}")
            bound = bool(getattr(row, f"km_p95_{metric}_lower_bound"))
            known = value is not None and not pd.isna(value)
            out[f"KM P95 {metric}"] = Percentile(float(value), bound).text(fmt) if known else "—"
        rows.append(out)
    return pd.DataFrame(rows)
