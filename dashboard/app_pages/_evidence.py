"""Shared bits of the evidence tools on the Baselines and Presets pages: the drift flag and the
limits in force (the latest per task type, the date they took effect, and their history)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from budgetlens.analysis.drift import DEFAULT_RECENT_DAYS, DRIFT_THRESHOLD
from budgetlens.dashboard.formatting import column_label, format_percent, safe_text, visible_text


def _change(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value * 100:+.0f} %"


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
        f"{DRIFT_THRESHOLD * 100:.0f} % against the {DEFAULT_RECENT_DAYS:g} days before for "
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
            "Task type": visible_text(row.task_type),
            "Runs": row.n,
            "Stopped by a budget": f"{row.censored_runs:,} ({format_percent(row.censored_share)})",
            "Material": "yes" if row.material else "no",
        }
        for metric, fmt in _KM_METRICS:
            value = getattr(row, f"km_p95_{metric}")
            bound = bool(getattr(row, f"km_p95_{metric}_lower_bound"))
            known = value is not None and not pd.isna(value)
            out["KM " + column_label(f"p95_{metric}")] = (
                Percentile(float(value), bound).text(fmt) if known else "—"
            )
        rows.append(out)
    return pd.DataFrame(rows)


def limits_in_force(current: pd.DataFrame, history: pd.DataFrame, tz: str | None = None) -> None:
    """The limits in force per task type (``views.current_limits``: the latest, not the most
    common, with ``since_utc`` = when they took effect) and, in an expander, every change
    (``views.limit_history``). Nothing when no run ran under a limit."""
    from budgetlens.dashboard.app_pages import _tables

    shown = current.dropna(subset=["since_utc"]) if len(current) else current
    if shown.empty:
        return
    st.subheader("Limits in force")
    st.caption(
        "Per task type the limits of the latest budgeted runs and the date they took effect "
        "(the first run under them); changes = earlier sets of limits."
    )
    _tables.table(shown, first=("task_type", "since_utc", "runs_since", "changes"), tz=tz)
    with st.expander(f"History of limit changes ({len(history):,} periods)"):
        _tables.table(history, first=("task_type", "since_utc", "last_run_utc", "runs"), tz=tz)
