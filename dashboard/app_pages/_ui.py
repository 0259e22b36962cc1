"""Small rendering helpers shared by the pages (headers, KPI tiles, charts, tables)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import streamlit as st

from dashboard import charts

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def describe(f) -> str:
    """One line naming the active filters: window, task types, models, services, time zone."""
    if f.start_utc is None and f.end_utc is None:
        window = "all data"
    else:
        start = f"{f.start_utc:%Y-%m-%d %H:%M}" if f.start_utc else "…"
        end = f"{f.end_utc:%Y-%m-%d %H:%M}" if f.end_utc else "now"
        window = f"{start} → {end} UTC"
    parts = [window]
    for label, values in (("task", f.task_types), ("model", f.models), ("service", f.services)):
        if values:
            parts.append(f"{label}: {', '.join(values)}")
    parts.append(f"days in {f.tz}")
    return " · ".join(parts)


def header(title: str, what: str, f) -> None:
    """Page title, a one-line purpose and the active filters."""
    st.title(title)
    st.caption(f"{what}  \n{describe(f)}")


def tiles(items: Sequence[tuple[str, str, str | None]]) -> None:
    """A row of KPI tiles: (label, value text, help text or None)."""
    columns = st.columns(len(items), border=True)
    for column, (label, value, help_text) in zip(columns, items):
        column.metric(label, value, help=help_text)


def chart(fig, key: str) -> None:
    """Render a Plotly figure full-width."""
    st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG)


def alarm_banner(per_task: pd.DataFrame, threshold: float = charts.HIT_RATE_ALARM) -> None:
    """One error banner per task type whose budget hit rate is above ``threshold``."""
    if per_task.empty:
        return
    hot = per_task[per_task["hit_rate"].fillna(0) > threshold]
    hot = hot.sort_values("hit_rate", ascending=False)
    for _, row in hot.iterrows():
        st.error(
            f"**{row['task_type']}**: budget hit rate {charts.format_percent(row['hit_rate'])} is "
            f"above the {threshold:.0%} alarm line: the budget is too tight or the agent has a "
            "bug. Compare its baseline and preset.",
            icon=":material/warning:",
        )


def usd_column(frame: pd.DataFrame, column: str = "cost_usd", label: str = "cost") -> pd.DataFrame:
    """Replace a USD column by text: ``$0.1234`` or ``unpriced`` (never $0 for a missing price)."""
    if column not in frame.columns:
        return frame
    out = frame.copy()
    out[label] = [charts.format_usd(v) for v in out[column]]
    return out.drop(columns=[column]) if label != column else out


def local_time(frame: pd.DataFrame, column: str, tz: str) -> pd.DataFrame:
    """Convert a naive-UTC timestamp column to ``tz`` for display."""
    if column not in frame.columns or frame.empty:
        return frame
    out = frame.copy()
    values = pd.to_datetime(out[column])
    out[column] = values.dt.tz_localize("UTC").dt.tz_convert(tz).dt.tz_localize(None)
    return out


def no_runs(f) -> None:
    st.info("No runs match these filters. Widen the time window or clear a filter.",
            icon=":material/filter_alt_off:")

