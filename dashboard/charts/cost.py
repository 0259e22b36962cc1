"""Cost charts: cost per period (stacked by model or task type), runs per cost bucket, spend by
team, user or service, and the most expensive runs as a display table."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from budgetlens.dashboard.charts._style import (
    EMPTY_TEXT,
    PALETTE,
    TASK_COLORS,
    _bar_width,
    _base,
    _colors,
    _empty,
    _few_periods,
    _require,
    plot_text,
)
from budgetlens.dashboard.formatting import format_usd


def cost_stacked(
    df: pd.DataFrame, *, period: str = "day", by: str = "model", colors: dict[str, str] | None = None
) -> go.Figure:
    """Stacked bars of cost per period, one color per ``key`` (a model or a task type).

    ``df``: [period_start, key, cost_usd, runs, unpriced_calls]; ``period`` one of 'hour',
    'day', 'week', 'month' (each bar spans 80 % of it, so a store with one day of data shows
    one full-width bar, not a hairline). Rows with NULL cost (unpriced) are left out of the
    bars; a period whose usage is all unpriced is drawn as a hatched gray band labelled
    "unpriced" with its unpriced calls counted (never an empty or $0 period).
    ``colors``: key -> color (see ``color_map``).
    """
    _require(df, ("period_start", "key", "cost_usd"), "cost_stacked")
    label = "model" if by == "model" else "task type"
    x_title = {"hour": "Hour", "day": "Day", "week": "Week (from Monday)", "month": "Month"}[period]
    fig = _base(f"Cost per {period} by {label}", x_title, "Cost (USD)")
    priced = df[df["cost_usd"].notna()]
    unpriced = _unpriced_periods(df)
    if priced.empty and not unpriced:
        return _empty(fig, "No priced usage in this selection" if len(df) else EMPTY_TEXT)
    _unpriced_bands(fig, unpriced, period)
    if priced.empty:
        fig.update_yaxes(showticklabels=False)
        _few_periods(fig, [start for start, _ in unpriced], period)
        return fig
    colors = _colors(priced["key"], colors, TASK_COLORS if by == "task_type" else None)
    for key, part in priced.groupby("key", sort=True):
        part = part.sort_values("period_start")
        fig.add_trace(
            go.Bar(
                x=part["period_start"],
                y=part["cost_usd"],
                name=plot_text(key),
                marker_color=colors[str(key)],
                width=_bar_width(period),
                hovertemplate="%{y:$,.4~g}<extra>" + plot_text(key) + "</extra>",
            )
        )
    fig.update_layout(barmode="stack")
    _few_periods(fig, priced["period_start"], period)
    fig.update_yaxes(tickformat="$,.3~g")  # $0.005, $0.25, $12 (never $0.00 for a cost)
    return fig


def _unpriced_periods(df: pd.DataFrame) -> list[tuple[pd.Timestamp, int]]:
    """(period start, unpriced calls) of each period with usage but no priced cost at all."""
    if "unpriced_calls" not in df.columns or df.empty:
        return []
    grouped = df.groupby("period_start", sort=True).agg(
        cost=("cost_usd", lambda c: c.notna().any()), calls=("unpriced_calls", "sum")
    )
    return [
        (pd.Timestamp(start), int(row.calls))
        for start, row in grouped.iterrows()
        if not row.cost and row.calls > 0
    ]


def _unpriced_bands(fig: go.Figure, periods: list[tuple[pd.Timestamp, int]], period: str) -> None:
    """A hatched gray band over each all-unpriced period, labelled with its unpriced calls."""
    half = pd.Timedelta(milliseconds=_bar_width(period) / 2)
    for start, calls in periods:
        fig.add_vrect(
            x0=start - half,
            x1=start + half,
            fillcolor="#bbbbbb",
            opacity=0.35,
            line_width=0,
            layer="below",
            annotation_text=f"unpriced<br>{calls:,} call{'s' if calls != 1 else ''}",
            annotation_position="top",
            annotation_font={"size": 11, "color": "#666"},
        )


def bucket_label(low: float, high: float) -> str:
    """A cost bucket as ``$1.00–$1.78`` / ``$0.0178–$0.0316``: both edges in the dashboard's one
    USD format (``format_usd``, with 3 significant figures below $1)."""
    return f"{format_usd(low, digits=3)}–{format_usd(high, digits=3)}"


def _two_lines(label: str) -> str:
    low, high = label.split("–", 1)
    return f"{low}–<br>{high}"


def _cost_buckets(df: pd.DataFrame) -> list[tuple[float, float]]:
    """Every log-spaced bucket from the cheapest to the dearest one in ``df``, empty ones too."""
    lows = df["bucket_low_usd"].astype(float)
    highs = df["bucket_high_usd"].astype(float)
    width = float((highs.apply(math.log10) - lows.apply(math.log10)).median())
    if not width > 0:
        return sorted(set(zip(lows, highs)))
    first = round(math.log10(float(lows.min())) / width)
    last = round(math.log10(float(lows.max())) / width)
    return [(10 ** (k * width), 10 ** ((k + 1) * width)) for k in range(first, last + 1)]


def cost_per_run(df: pd.DataFrame, *, colors: dict[str, str] | None = None) -> go.Figure:
    """Bars of runs per cost bucket (log-spaced buckets), stacked by task type, on a log count
    axis (the expensive tail shows beside the many cheap runs).

    ``df``: [task_type, bucket_low_usd, bucket_high_usd, runs]. Every bucket between the cheapest
    and the dearest run shows on the axis, empty ones too; labels follow ``bucket_label``.
    """
    _require(df, ("task_type", "bucket_low_usd", "bucket_high_usd", "runs"), "cost_per_run")
    fig = _base("Cost per run", "Cost per run (USD, log buckets)", "Runs (log scale)")
    if df.empty:
        return _empty(fig, "No priced runs in this selection")
    df = df.sort_values("bucket_low_usd")
    order = [bucket_label(lo, hi) for lo, hi in _cost_buckets(df)]
    colors = _colors(df["task_type"], colors, TASK_COLORS)
    fig.add_trace(
        go.Bar(
            x=order,
            y=[0] * len(order),
            showlegend=False,
            hoverinfo="skip",
            name="buckets",
            marker_color="rgba(0,0,0,0)",
        )
    )  # keeps empty buckets
    for task, part in df.groupby("task_type", sort=True):
        labels = [bucket_label(lo, hi) for lo, hi in zip(part["bucket_low_usd"], part["bucket_high_usd"])]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=part["runs"],
                name=plot_text(task),
                marker_color=colors[str(task)],
                hovertemplate="%{x}: %{y} runs<extra>" + plot_text(task) + "</extra>",
            )
        )
    fig.update_layout(barmode="stack", bargap=0.05, hovermode="closest")
    fig.update_xaxes(
        categoryorder="array",
        categoryarray=order,
        tickangle=0,
        tickvals=order,
        ticktext=[_two_lines(label) for label in order],
        tickfont={"size": 10},
    )
    # A log count axis: the few dear runs of the tail ($1–$31) stay visible beside thousands of
    # cheap ones (a linear axis draws them as nothing).
    fig.update_yaxes(type="log", rangemode=None, tickformat=",d", dtick=1)
    return fig


def spend_by(df: pd.DataFrame, *, by: str = "team") -> go.Figure:
    """Horizontal bars of known spend (USD) per team, user or service (``by``), the dearest on
    top; ``df`` as ``budgetlens.analysis.spenders.spend_by`` returns it ([by, runs, cost_usd,
    ...]). Groups with nothing priced are left out of the bars (never drawn as $0)."""
    _require(df, (by, "runs", "cost_usd"), "spend_by")
    fig = _base(f"Spend by {by}", "Cost (USD)", by.capitalize())
    priced = df[df["cost_usd"].notna()]
    if priced.empty:
        return _empty(fig, "No priced usage in this selection" if len(df) else EMPTY_TEXT)
    priced = priced.sort_values("cost_usd")
    fig.add_trace(
        go.Bar(
            x=priced["cost_usd"],
            y=priced[by].map(plot_text),
            orientation="h",
            customdata=priced["runs"],
            marker_color=PALETTE[0],
            hovertemplate="%{y}: %{x:$,.4~g} over %{customdata:,} runs<extra></extra>",
        )
    )
    fig.update_xaxes(tickformat="$,.3~g")
    fig.update_yaxes(type="category")
    return fig
