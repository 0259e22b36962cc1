"""Rate charts: budget hit rate and intervention rate per day and per task type (with the 20 %
alarm line), and stop reasons per task type."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from budgetlens.dashboard.charts._style import (
    HIT_RATE_ALARM,
    STOP_COLORS,
    TASK_COLORS,
    _alarm_line,
    _base,
    _colors,
    _count_axis,
    _empty,
    _few_periods,
    _require,
    color_map,
    plot_text,
)
from budgetlens.dashboard.formatting import NO_BUDGET


def hit_rate_daily(
    df: pd.DataFrame,
    *,
    rate: str = "hit_rate",
    colors: dict[str, str] | None = None,
    period: str = "day",
) -> go.Figure:
    """Lines of the daily (``period`` 'day') or hourly ('hour': ``day`` holds each hour's start)
    hit rate (or ``intervention_rate``) per task type, in %; the hit rate with the
    ``HIT_RATE_ALARM`` line (the intervention rate has no alarm, so no line).

    ``df``: [day, task_type, finished_runs, budget_stops, interventions, hit_rate,
    intervention_rate]; rates are 0..1. A missing rate (None/NaN: no budgeted run that day)
    is a gap in the line, never drawn as 0 %. ``colors``: task type -> color (see
    ``color_map``).
    """
    _require(df, ("day", "task_type", rate, "finished_runs"), "hit_rate_daily")
    if period not in ("day", "hour"):
        raise ValueError(f"hit_rate_daily: period must be 'day' or 'hour', got {period!r}")
    title = f"{'Budget hit' if rate == 'hit_rate' else 'Intervention'} rate per {period}"
    fig = _base(title, period.capitalize(), f"{'Hit' if rate == 'hit_rate' else 'Intervention'} rate (%)")
    if df.empty:
        return _empty(fig)
    colors = _colors(df["task_type"], colors, TASK_COLORS)
    base = "budgeted_runs" if "budgeted_runs" in df.columns else "finished_runs"
    noun = "budgeted runs" if base == "budgeted_runs" else "runs"
    for task, part in df.groupby("task_type", sort=True):
        part = part.sort_values("day")
        fig.add_trace(
            go.Scatter(
                x=part["day"],
                y=pd.to_numeric(part[rate], errors="coerce") * 100,
                name=plot_text(task),
                mode="lines+markers",
                connectgaps=False,
                line={"color": colors[str(task)], "width": 2},
                marker={"size": 5},
                customdata=part[[base]].to_numpy(),
                hovertemplate="%{y:.1f} % of %{customdata[0]:,} "
                + noun
                + "<extra>"
                + plot_text(task)
                + "</extra>",
            )
        )
    if rate == "hit_rate":
        _alarm_line(fig)
    top = max(25.0, float((pd.to_numeric(df[rate], errors="coerce").fillna(0) * 100).max()) * 1.1)
    fig.update_yaxes(range=[0, top], ticksuffix=" %")
    _few_periods(fig, df["day"], period)
    return fig


def rate_by_task(df: pd.DataFrame) -> go.Figure:
    """Horizontal grouped bars of hit rate and intervention rate per task type, in %, with the
    20 % alarm line (vertical).

    ``df``: [task_type, hit_rate, intervention_rate, ...] (e.g. ``Overview.per_task``). A
    task type without a hit rate (None/NaN: none of its runs ran under a limit) has no bar and
    reads "no budget", never 0 %.
    """
    _require(df, ("task_type", "hit_rate", "intervention_rate"), "rate_by_task")
    fig = _base("Hit and intervention rate by task type", "Share of finished runs (%)", "")
    if df.empty:
        return _empty(fig)
    df = df.sort_values("task_type", ascending=False).assign(
        hit_rate=lambda d: pd.to_numeric(d["hit_rate"], errors="coerce"),
        intervention_rate=lambda d: pd.to_numeric(d["intervention_rate"], errors="coerce"),
    )
    fig.add_trace(
        go.Bar(
            y=df["task_type"].map(plot_text),
            x=df["intervention_rate"] * 100,
            orientation="h",
            name="intervention rate (+ downgrades, summaries)",
            marker_color="#F58518",
            opacity=0.6,
        )
    )
    fig.add_trace(
        go.Bar(
            y=df["task_type"].map(plot_text),
            x=df["hit_rate"] * 100,
            orientation="h",
            name="hit rate (budget stops)",
            marker_color="#E45756",
        )
    )
    unbudgeted = df[df["hit_rate"].isna()]
    if not unbudgeted.empty:
        fig.add_trace(
            go.Scatter(
                y=unbudgeted["task_type"].map(plot_text),
                x=[0] * len(unbudgeted),
                mode="text",
                text=[NO_BUDGET] * len(unbudgeted),
                textposition="middle right",
                showlegend=False,
                hoverinfo="skip",
                textfont={"color": "#888", "size": 11},
                name=NO_BUDGET,
            )
        )
    fig.add_vline(
        x=HIT_RATE_ALARM * 100,
        line_dash="dash",
        line_color="#E45756",
        line_width=1.5,
        annotation_text=f"{HIT_RATE_ALARM * 100:.0f} %",
        annotation_position="top",
        annotation_font_color="#E45756",
    )
    highest = pd.concat([df["hit_rate"], df["intervention_rate"]]).fillna(0).max()
    top = max(25.0, float(highest) * 110)
    fig.update_layout(barmode="group", hovermode="closest", legend_traceorder="reversed")
    fig.update_xaxes(range=[0, top], ticksuffix=" %")
    fig.update_yaxes(rangemode=None, automargin=True)
    return fig


def stop_reasons(df: pd.DataFrame) -> go.Figure:
    """Horizontal stacked bars: runs per stop reason for each task type (share in the hover).

    ``df``: [task_type, stop_reason, runs].
    """
    _require(df, ("task_type", "stop_reason", "runs"), "stop_reasons")
    fig = _base("Stop reasons per task type", "Runs", "Task type")
    if df.empty:
        return _empty(fig)
    totals = df.groupby("task_type")["runs"].transform("sum")
    df = df.assign(share=df["runs"] / totals * 100)
    colors = color_map(df["stop_reason"], STOP_COLORS)
    order = [r for r in STOP_COLORS if r in set(df["stop_reason"])]
    order += sorted(set(df["stop_reason"]) - set(order))
    for reason in order:
        part = df[df["stop_reason"] == reason]
        fig.add_trace(
            go.Bar(
                y=part["task_type"].map(plot_text),
                x=part["runs"],
                name=plot_text(reason),
                orientation="h",
                marker_color=colors[str(reason)],
                customdata=part[["share"]].to_numpy(),
                hovertemplate="%{x} runs (%{customdata[0]:.1f} %)<extra>" + plot_text(reason) + "</extra>",
            )
        )
    fig.update_layout(barmode="stack", hovermode="closest")
    fig.update_yaxes(categoryorder="category descending", rangemode=None, automargin=True)
    _count_axis(fig, float(df.groupby("task_type")["runs"].sum().max()), axis="x")
    return fig
