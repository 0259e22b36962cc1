"""Small rendering helpers shared by the pages (headers, KPI tiles, charts, tables)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import streamlit as st

from dashboard import charts, data
from dashboard.analysis import LOW_SAMPLE_RUNS
from dashboard.formatting import MISSING, number_format

#: Plotly's own toolbar is hidden: it covered the chart titles, and Streamlit's element toolbar
#: already offers full screen; drag to zoom and double-click to reset still work.
PLOTLY_CONFIG = {"displayModeBar": False, "displaylogo": False}


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


def split_alarms(per_task: pd.DataFrame, daily: pd.DataFrame,
                 threshold: float = charts.HIT_RATE_ALARM,
                 min_runs: int = LOW_SAMPLE_RUNS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(alarms, low-sample) rows of ``per_task`` whose hit rate is above ``threshold``.

    ``per_task``: [task_type, hit_rate, ...] (``Overview.per_task``); ``daily``: the
    ``hit_rate_daily`` frame, whose ``finished_runs`` are summed per task type into a
    ``finished_runs`` column. Alarms have at least ``min_runs`` finished runs; the others are a
    low sample (one stop in four runs is 25 % but says little). Both sorted by hit rate, highest
    first. Pure.
    """
    if per_task.empty:
        return per_task, per_task
    finished = (daily.groupby("task_type")["finished_runs"].sum() if not daily.empty
                else pd.Series(dtype="int64"))
    frame = per_task.assign(finished_runs=[int(finished.get(t, 0)) for t in per_task["task_type"]])
    hot = frame[frame["hit_rate"].fillna(0) > threshold].sort_values("hit_rate", ascending=False)
    enough = hot["finished_runs"] >= min_runs
    return hot[enough], hot[~enough]


def alarm_banner(per_task: pd.DataFrame, daily: pd.DataFrame,
                 threshold: float = charts.HIT_RATE_ALARM) -> None:
    """One error banner per task type whose budget hit rate is above ``threshold`` over at least
    LOW_SAMPLE_RUNS finished runs; one softer note naming the low-sample task types above it."""
    hot, low = split_alarms(per_task, daily, threshold)
    for _, row in hot.iterrows():
        st.error(
            f"**{row['task_type']}**: budget hit rate {charts.format_percent(row['hit_rate'])} is "
            f"above the {threshold:.0%} alarm line: the budget is too tight or the agent has a "
            "bug. Compare its baseline and preset.",
            icon=":material/warning:",
        )
    if not low.empty:
        names = ", ".join(f"**{row['task_type']}** {charts.format_percent(row['hit_rate'])} "
                          f"of {row['finished_runs']:,}" for _, row in low.iterrows())
        st.info(f"Above the {threshold:.0%} line on a low sample (< {LOW_SAMPLE_RUNS} finished "
                f"runs): {names}. Too few runs to call an alarm yet.",
                icon=":material/science:")


def task_colors() -> dict[str, str]:
    """One color per task type of the whole store (stable across charts and filters)."""
    return charts.color_map(data.query("filter_options")["task_types"], charts.TASK_COLORS)


def model_colors() -> dict[str, str]:
    """One color per model of the whole store (stable across charts and filters)."""
    return charts.color_map(data.query("filter_options")["models"])


def table(frame: pd.DataFrame, column_config: dict | None = None, **kwargs) -> None:
    """``st.dataframe`` without the index, missing values shown as an em dash (never ``None``),
    numeric columns formatted by name and unit (``formatting.number_format``: percentiles with
    one decimal) unless ``column_config`` says otherwise."""
    config = {}
    for column in frame.columns:
        fmt = number_format(str(column))
        if fmt and pd.api.types.is_numeric_dtype(frame[column]):
            config[column] = st.column_config.NumberColumn(str(column), format=fmt)
    config.update(column_config or {})
    st.dataframe(frame, hide_index=True, column_config=config, placeholder=MISSING, **kwargs)


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

