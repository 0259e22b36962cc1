"""Distribution and baseline charts: total tokens per run on a log axis with P50/P95/preset/limit
markers, and current limit vs recommended preset per task type."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from budgetlens.dashboard.charts._style import (
    MARKER_COLORS,
    TASK_COLORS,
    _base,
    _count_axis,
    _empty,
    _log_ticks,
    _number,
    _require,
    _token_axis,
    color_map,
    plot_text,
)
from budgetlens.dashboard.formatting import column_label, format_change, format_tokens, is_missing


def token_distribution(
    df: pd.DataFrame,
    task_type: str,
    *,
    p50: float | None = None,
    p95: float | None = None,
    preset: float | None = None,
    limit: float | None = None,
    color: str | None = None,
) -> go.Figure:
    """Distribution of total tokens per run for one task type on a log axis, P50/P95/preset marked.

    ``df``: [task_type, bucket_low_tokens, bucket_high_tokens, runs] (log-spaced buckets); rows of
    other task types are ignored. Markers are vertical lines at the given token values; a missing
    one (None, NaN, pd.NA) or one <= 0 is left out. Hover shows P50/P95 with one decimal
    (interpolated percentiles), preset and limit whole.
    """
    _require(df, ("task_type", "bucket_low_tokens", "bucket_high_tokens", "runs"), "token_distribution")
    fig = _base(
        f"{plot_text(task_type)}: total tokens per run",
        "Total tokens per run (log scale)",
        "Runs",
        height=300,
    )
    part = df[df["task_type"] == task_type].sort_values("bucket_low_tokens")
    part = part[part["bucket_low_tokens"] > 0]
    if part.empty:
        return _empty(fig, "No token usage was reported for these runs")
    xs, ys = [], []
    for low, high, runs in zip(part["bucket_low_tokens"], part["bucket_high_tokens"], part["runs"]):
        xs += [low, low, high, high]
        ys += [0, runs, runs, 0]
    color = color or color_map([task_type], TASK_COLORS)[task_type]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            fill="tozeroy",
            name="runs per bucket",
            line={"color": color, "width": 1},
            hovertemplate="%{x:,.0f} tokens: %{y} runs<extra></extra>",
        )
    )
    top = float(part["runs"].max()) * 1.15
    p50, p95, preset, limit = (_number(v) for v in (p50, p95, preset, limit))
    for name, value, dash in (
        ("P50", p50, "dot"),
        ("P95", p95, "dash"),
        ("Preset", preset, "solid"),
        ("Limit", limit, "dashdot"),
    ):
        if value is None or value <= 0:
            continue
        label = "current limit" if name == "Limit" else name
        digits = ",.1f" if name in ("P50", "P95") else ",.0f"
        fig.add_trace(
            go.Scatter(
                x=[value, value],
                y=[0, top],
                mode="lines",
                name=f"{label} {format_tokens(value)}",
                line={"color": MARKER_COLORS[name], "dash": dash, "width": 2},
                hovertemplate=f"{label}: %{{x:{digits}}} tokens<extra></extra>",
            )
        )
    values = [v for v in (p50, p95, preset, limit) if v is not None and v > 0]
    lo = min([float(part["bucket_low_tokens"].min())] + values)
    hi = max([float(part["bucket_high_tokens"].max())] + values)
    lo_shown, hi_shown = lo / 10**0.05, hi * 10**0.08
    tickvals, ticktext = _log_ticks(lo_shown, hi_shown)
    fig.update_xaxes(
        type="log", range=[math.log10(lo_shown), math.log10(hi_shown)], tickvals=tickvals, ticktext=ticktext
    )
    fig.update_yaxes(range=[0, top])
    _count_axis(fig, top)
    fig.update_layout(hovermode="closest")
    return fig


def preset_comparison(changes: pd.DataFrame, key: str = "max_total_tokens") -> go.Figure:
    """Grouped bars per task type: the limit runs ran under vs the recommended preset for ``key``.

    ``changes``: [task_type, key, current, recommended, change_pct] (``analysis.preset_changes``).
    A missing current limit shows no bar (the runs ran without one) and the recommendation is
    labelled "no current limit"; a missing recommendation reads "no data".
    """
    _require(changes, ("task_type", "key", "current", "recommended"), "preset_comparison")
    unit = (
        "USD"
        if key.endswith("_usd")
        else "s"
        if key.endswith("_s")
        else ("tokens" if key.endswith("_tokens") else "count")
    )
    label = column_label(key).removesuffix(" (USD)").removesuffix(" (s)")
    fig = _base(f"Current limit vs recommended preset: {label} ({key})", "Task type", f"{label} ({unit})")
    part = changes[changes["key"] == key].sort_values("task_type")
    if part.empty:
        return _empty(fig)
    if part["current"].notna().any():
        fig.add_trace(
            go.Bar(
                x=part["task_type"].map(plot_text),
                y=part["current"],
                name="current limit",
                marker_color="#BAB0AC",
            )
        )
    else:
        fig.add_annotation(
            text=f"No run ran under a {key} limit: recommendations only",
            xref="paper",
            yref="paper",
            x=1.0,
            y=1.02,
            xanchor="right",
            yanchor="bottom",
            showarrow=False,
            font={"size": 11, "color": "#888"},
        )
    texts = [
        format_change(v, current=c, recommended=r)
        for v, c, r in zip(part["change_pct"], part["current"], part["recommended"])
    ]
    fig.add_trace(
        go.Bar(
            x=part["task_type"].map(plot_text),
            y=part["recommended"],
            name="recommended preset",
            marker_color="#4C78A8",
            hovertext=texts,
            hovertemplate="%{x}: %{y:,}<br>%{hovertext}<extra></extra>",
            text=[t if t.endswith("%") else "" for t in texts],
            textposition="outside",
            cliponaxis=False,
        )
    )
    fig.update_layout(barmode="group", hovermode="closest")
    if unit == "tokens":
        top = pd.concat(
            [
                pd.to_numeric(part["current"], errors="coerce"),
                pd.to_numeric(part["recommended"], errors="coerce"),
            ]
        ).max()
        if not is_missing(top):
            _token_axis(fig, float(top) * 1.1)
    elif unit == "USD":
        fig.update_yaxes(tickformat="$,.3~g")
    return fig
