"""Small rendering helpers shared by the pages (headers, KPI tiles, charts, tables)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from budgetlens.analysis.views import LOW_SAMPLE_RUNS
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.formatting import (
    MISSING,
    column_label,
    format_usd,
    is_missing,
    number_format,
)

#: Plotly's own toolbar is hidden: it covered the chart titles, and Streamlit's element toolbar
#: already offers full screen; drag to zoom and double-click to reset still work.
PLOTLY_CONFIG = {"displayModeBar": False, "displaylogo": False}


def describe(f) -> str:
    """One line naming the active filters: window, task types, models, services, time zone."""
    if f.start_utc is None and f.end_utc is None:
        window = "all data"
    else:
        start = f"{f.start_utc:%Y-%m-%d %H:%M}" if f.start_utc else "…"
        end = f"{f.end_utc:%Y-%m-%d %H:%M}" if f.end_utc else "the newest run"
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


def split_alarms(
    per_task: pd.DataFrame,
    daily: pd.DataFrame,
    threshold: float = charts.HIT_RATE_ALARM,
    min_runs: int = LOW_SAMPLE_RUNS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(alarms, low-sample) rows of ``per_task`` whose hit rate is above ``threshold``.

    ``per_task``: [task_type, hit_rate, (budgeted_runs,) ...] (``Overview.per_task``); the
    rate's denominator is its ``budgeted_runs`` when present, else the ``finished_runs`` of
    ``daily`` (the ``hit_rate_daily`` frame) summed per task type; either lands in a
    ``rate_runs`` column. Alarms have at least ``min_runs`` such runs; the others are a low
    sample (one stop in four runs is 25 % but says little). Both sorted by hit rate, highest
    first. A task type without a hit rate (no budgeted run) is never an alarm. Pure.
    """
    if per_task.empty:
        return per_task, per_task
    if "budgeted_runs" in per_task.columns:
        counts = pd.to_numeric(per_task["budgeted_runs"], errors="coerce").fillna(0).astype(int)
    else:
        finished = (
            daily.groupby("task_type")["finished_runs"].sum() if not daily.empty else pd.Series(dtype="int64")
        )
        counts = [int(finished.get(t, 0)) for t in per_task["task_type"]]
    frame = per_task.assign(rate_runs=list(counts))
    rates = pd.to_numeric(frame["hit_rate"], errors="coerce").fillna(0)
    hot = frame[rates > threshold].sort_values("hit_rate", ascending=False)
    enough = hot["rate_runs"] >= min_runs
    return hot[enough], hot[~enough]


def alarm_banner(
    per_task: pd.DataFrame, daily: pd.DataFrame, threshold: float = charts.HIT_RATE_ALARM
) -> None:
    """One error banner per task type whose budget hit rate is above ``threshold`` over at least
    LOW_SAMPLE_RUNS finished runs; one softer note naming the low-sample task types above it."""
    hot, low = split_alarms(per_task, daily, threshold)
    line = f"{threshold * 100:g} %"
    for _, row in hot.iterrows():
        st.error(
            f"**{row['task_type']}**: budget hit rate {charts.format_percent(row['hit_rate'])} is "
            f"above the {line} alarm line: the budget is too tight or the agent has a "
            "bug. Compare its baseline and preset.",
            icon=":material/warning:",
        )
    if not low.empty:
        names = ", ".join(
            f"**{row['task_type']}** {charts.format_percent(row['hit_rate'])} of {row['rate_runs']:,}"
            for _, row in low.iterrows()
        )
        st.info(
            f"Above the {line} line on a low sample (< {LOW_SAMPLE_RUNS} budgeted "
            f"finished runs): {names}. Too few runs to call an alarm yet.",
            icon=":material/science:",
        )


def task_colors() -> dict[str, str]:
    """One color per task type of the whole store (stable across charts and filters)."""
    return charts.color_map(data.query("filter_options")["task_types"], charts.TASK_COLORS)


def model_colors() -> dict[str, str]:
    """One color per model of the whole store (stable across charts and filters)."""
    return charts.color_map(data.query("filter_options")["models"])


#: The widest a pinned run-id column gets (pixels); a longer id is cut, its cell shows it all.
RUN_ID_MAX_PX = 300
#: Text of the ``low_sample`` column (a badge, never a checkbox that looks editable).
LOW_SAMPLE_BADGE = "low sample"


def _whole(series: pd.Series) -> bool:
    values = pd.to_numeric(series, errors="coerce").dropna()
    return bool(((values - values.round()).abs() < 1e-9).all())


def display_frame(
    frame: pd.DataFrame, *, unpriced: str = "unpriced", tz: str | None = None
) -> tuple[pd.DataFrame, dict]:
    """(frame, column_config) for ``st.dataframe`` with the dashboard's one display rule.

    Every column gets its human label (``formatting.column_label``). USD columns (``*_usd``)
    become text in the CLI's USD format (``format_usd``: ``$0.0039``, never ``$0.00`` for a
    non-zero value; ``unpriced`` for a missing one); rates (``*_rate``, 0..1) read ``20.1 %``;
    ``low_sample`` reads ``low sample`` or nothing; percentiles keep one decimal unless the whole
    column is whole; counts and tokens have thousands separators; ``*_utc`` timestamps are shown
    in ``tz`` (label ``Start (tz)``); ``run_id`` is pinned, as wide as its ids (at most
    RUN_ID_MAX_PX). Pure apart
    from building Streamlit column configs.
    """
    shown = frame.copy()
    config: dict = {}
    for column in shown.columns:
        name = str(column)
        label = column_label(name)
        series = shown[column]
        numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
        if name.endswith("_usd"):
            shown[column] = [format_usd(v, unpriced=unpriced) for v in series]
            config[column] = st.column_config.TextColumn(label, alignment="right")
        elif name == "low_sample":
            shown[column] = [LOW_SAMPLE_BADGE if not is_missing(v) and bool(v) else "" for v in series]
            config[column] = st.column_config.TextColumn(
                label, help=f"low sample = fewer than {LOW_SAMPLE_RUNS} runs: a rough guide"
            )
        elif name.endswith("_rate") and numeric:
            shown[column] = series * 100
            config[column] = st.column_config.NumberColumn(label, format="%.1f %%")
        elif name == "percent" and numeric:
            config[column] = st.column_config.NumberColumn(label, format="%.1f %%")
        elif name.endswith("_utc"):
            if tz and not shown.empty:
                values = pd.to_datetime(series)
                shown[column] = values.dt.tz_localize("UTC").dt.tz_convert(tz).dt.tz_localize(None)
            config[column] = st.column_config.DatetimeColumn(
                f"{label} ({tz or 'UTC'})", format="YYYY-MM-DD HH:mm:ss"
            )
        elif name == "run_id":
            longest = max((len(str(v)) for v in series if not is_missing(v)), default=8)
            config[column] = st.column_config.TextColumn(  # wide enough for the whole id
                label,
                width=int(min(RUN_ID_MAX_PX, 7.2 * longest + 26)),
                pinned=True,
                help="The run's id (hover a cell or widen the column to read a long one)",
            )
        elif numeric and number_format(name):
            fmt = number_format(name)
            if fmt == "%,.1f" and _whole(series):
                fmt = "%,.0f"
            config[column] = st.column_config.NumberColumn(label, format=fmt)
        elif numeric and pd.api.types.is_integer_dtype(series):
            config[column] = st.column_config.NumberColumn(label, format="%,d")
        else:
            config[column] = label
    return shown, config


def table(
    frame: pd.DataFrame,
    column_config: dict | None = None,
    *,
    first: Sequence[str] = (),
    unpriced: str = "unpriced",
    tz: str | None = None,
    **kwargs,
) -> None:
    """``st.dataframe`` without the index, missing values as an em dash (never ``None``),
    columns labelled and formatted by ``display_frame``; ``first`` names the columns shown
    first (the most important ones), the others follow in their order; ``column_config``
    overrides per column."""
    shown, config = display_frame(frame, unpriced=unpriced, tz=tz)
    config.update(column_config or {})
    order = [c for c in first if c in shown.columns]
    order += [c for c in shown.columns if c not in order]
    st.dataframe(
        shown, hide_index=True, column_config=config, column_order=order, placeholder=MISSING, **kwargs
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
    st.info(
        "No runs match these filters. Widen the time window or clear a filter.",
        icon=":material/filter_alt_off:",
    )
