"""Plotly figure builders for the dashboard (pure: no streamlit import, no database access).

Each builder takes the pandas DataFrame an analysis function returns (columns as documented in
``dashboard.analysis``) and returns a ``plotly.graph_objects.Figure`` with titled axes that carry
their units. An empty frame gives an empty figure that says "No runs in this selection", never a
misleading zero. Text formatting (``"unpriced"``, never ``$0``) lives in ``dashboard.formatting``.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard.formatting import (  # noqa: F401  (re-exported for the pages)
    format_change,
    format_percent,
    format_tokens,
    format_usd,
)

#: The alarm line of the budget hit rate (design §6): above it a budget is too tight or the
#: agent has a bug.
HIT_RATE_ALARM = 0.20

TEMPLATE = "plotly_white"
#: Colors per task type of the seeds, in their usual order; other task types cycle through PALETTE.
TASK_COLORS = {
    "simple_qa": "#4C78A8",
    "tool_use": "#72B7B2",
    "complex_reasoning": "#F58518",
    "code_generation": "#54A24B",
    "research": "#B279A2",
}
PALETTE = (
    "#4C78A8", "#F58518", "#54A24B", "#B279A2", "#72B7B2",
    "#E45756", "#EECA3B", "#FF9DA6", "#9D755D", "#BAB0AC",
)
STOP_COLORS = {
    "completed": "#54A24B",
    "budget_tokens": "#E45756",
    "budget_cost": "#B22222",
    "budget_turns": "#F58518",
    "budget_tools": "#EECA3B",
    "budget_time": "#FF9DA6",
    "failed": "#7F7F7F",
}
MARKER_COLORS = {"P50": "#4C78A8", "P95": "#F58518", "Preset": "#E45756", "Limit": "#E45756"}
EMPTY_TEXT = "No runs in this selection"


def color_map(keys: Iterable[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """Stable colors for ``keys``: the known ones first, then PALETTE in sorted order."""
    known = known or {}
    result, index = {}, 0
    for key in sorted({str(k) for k in keys}):
        if key in known:
            result[key] = known[key]
        else:
            result[key] = PALETTE[index % len(PALETTE)]
            index += 1
    return result


# --- building blocks ---------------------------------------------------------------------------
def _base(title: str, x_title: str, y_title: str, *, height: int = 360) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        height=height + 40,
        margin={"l": 60, "r": 20, "t": 45, "b": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0.0,
                "font": {"size": 11}},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text=x_title, title_standoff=6, automargin=True)
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    return fig


def _empty(fig: go.Figure, text: str = EMPTY_TEXT) -> go.Figure:
    fig.add_annotation(
        text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
        font={"size": 14, "color": "#888"},
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def _require(df: pd.DataFrame, columns: Sequence[str], builder: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{builder}: data frame lacks column(s) {missing}")


def _alarm_line(fig: go.Figure, y: float = HIT_RATE_ALARM * 100) -> None:
    fig.add_hline(
        y=y, line_dash="dash", line_color="#E45756", line_width=1.5,
        annotation_text=f"{y:.0f} % alarm line", annotation_position="top left",
        annotation_font_color="#E45756",
    )


# --- cost ------------------------------------------------------------------------------------
def cost_stacked(df: pd.DataFrame, *, period: str = "day", by: str = "model") -> go.Figure:
    """Stacked bars of cost per period, one color per ``key`` (a model or a task type).

    ``df``: [period_start, key, cost_usd, runs, unpriced_calls]. Rows with NULL cost (unpriced)
    are left out of the bars; their unpriced calls show in the hover text of the period.
    """
    _require(df, ("period_start", "key", "cost_usd"), "cost_stacked")
    label = "model" if by == "model" else "task type"
    x_title = "Hour" if period == "hour" else "Day"
    fig = _base(f"Cost per {period} by {label}", x_title, "Cost (USD)")
    priced = df[df["cost_usd"].notna()]
    if priced.empty:
        return _empty(fig, "No priced usage in this selection" if len(df) else EMPTY_TEXT)
    colors = color_map(priced["key"], TASK_COLORS if by == "task_type" else None)
    for key, part in priced.groupby("key", sort=True):
        part = part.sort_values("period_start")
        fig.add_trace(go.Bar(
            x=part["period_start"], y=part["cost_usd"], name=str(key),
            marker_color=colors[str(key)],
            hovertemplate="%{y:$,.2f}<extra>" + str(key) + "</extra>",
        ))
    fig.update_layout(barmode="stack", bargap=0.15)
    fig.update_yaxes(tickprefix="$", tickformat=",.2f")
    return fig


def _bucket_label(low: float, high: float, fmt) -> str:
    return f"{fmt(low)}–{fmt(high)}"


def cost_per_run(df: pd.DataFrame) -> go.Figure:
    """Bars of runs per cost bucket (log-spaced buckets), stacked by task type.

    ``df``: [task_type, bucket_low_usd, bucket_high_usd, runs].
    """
    _require(df, ("task_type", "bucket_low_usd", "bucket_high_usd", "runs"), "cost_per_run")
    fig = _base("Cost per run", "Cost per run (USD, log buckets)", "Runs")
    if df.empty:
        return _empty(fig, "No priced runs in this selection")
    df = df.sort_values("bucket_low_usd")
    edges = zip(df["bucket_low_usd"], df["bucket_high_usd"])
    order = list(dict.fromkeys(_bucket_label(lo, hi, _usd_short) for lo, hi in edges))
    colors = color_map(df["task_type"], TASK_COLORS)
    for task, part in df.groupby("task_type", sort=True):
        labels = [_bucket_label(lo, hi, _usd_short)
                  for lo, hi in zip(part["bucket_low_usd"], part["bucket_high_usd"])]
        fig.add_trace(go.Bar(x=labels, y=part["runs"], name=str(task),
                             marker_color=colors[str(task)]))
    fig.update_layout(barmode="stack", bargap=0.05, hovermode="closest")
    fig.update_xaxes(categoryorder="array", categoryarray=order, tickangle=-35)
    return fig


def _usd_short(value: float) -> str:
    if value >= 1:
        return f"${value:,.0f}" if value >= 10 else f"${value:.1f}"
    return f"${value:.3g}"


def top_runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """The most expensive runs formatted for display: cost as text (``unpriced`` when NULL)."""
    out = df.copy()
    if "cost_usd" in out.columns:
        out["cost"] = [format_usd(v) for v in out["cost_usd"]]
    return out


# --- hit rate --------------------------------------------------------------------------------
def hit_rate_daily(df: pd.DataFrame, *, rate: str = "hit_rate") -> go.Figure:
    """Lines of the daily hit rate (or ``intervention_rate``) per task type, in %, with the 20 %
    alarm line.

    ``df``: [day, task_type, finished_runs, budget_stops, interventions, hit_rate,
    intervention_rate]; rates are 0..1.
    """
    _require(df, ("day", "task_type", rate, "finished_runs"), "hit_rate_daily")
    title = "Budget hit rate per day" if rate == "hit_rate" else "Intervention rate per day"
    fig = _base(title, "Day", f"{'Hit' if rate == 'hit_rate' else 'Intervention'} rate (%)")
    if df.empty:
        return _empty(fig)
    colors = color_map(df["task_type"], TASK_COLORS)
    for task, part in df.groupby("task_type", sort=True):
        part = part.sort_values("day")
        fig.add_trace(go.Scatter(
            x=part["day"], y=part[rate] * 100, name=str(task), mode="lines+markers",
            line={"color": colors[str(task)], "width": 2}, marker={"size": 5},
            customdata=part[["finished_runs"]].to_numpy(),
            hovertemplate="%{y:.1f} % of %{customdata[0]} runs<extra>" + str(task) + "</extra>",
        ))
    _alarm_line(fig)
    top = max(25.0, float((df[rate].fillna(0) * 100).max()) * 1.1)
    fig.update_yaxes(range=[0, top], ticksuffix=" %")
    return fig


def rate_by_task(df: pd.DataFrame) -> go.Figure:
    """Horizontal grouped bars of hit rate and intervention rate per task type, in %, with the
    20 % alarm line (vertical).

    ``df``: [task_type, hit_rate, intervention_rate, ...] (e.g. ``Overview.per_task``).
    """
    _require(df, ("task_type", "hit_rate", "intervention_rate"), "rate_by_task")
    fig = _base("Hit and intervention rate by task type", "Share of finished runs (%)", "")
    if df.empty:
        return _empty(fig)
    df = df.sort_values("task_type", ascending=False)
    fig.add_trace(go.Bar(y=df["task_type"], x=df["intervention_rate"] * 100, orientation="h",
                         name="intervention rate (+ downgrades, summaries)",
                         marker_color="#F58518", opacity=0.6))
    fig.add_trace(go.Bar(y=df["task_type"], x=df["hit_rate"] * 100, orientation="h",
                         name="hit rate (budget stops)", marker_color="#E45756"))
    fig.add_vline(
        x=HIT_RATE_ALARM * 100, line_dash="dash", line_color="#E45756", line_width=1.5,
        annotation_text=f"{HIT_RATE_ALARM * 100:.0f} %", annotation_position="top",
        annotation_font_color="#E45756",
    )
    highest = pd.concat([df["hit_rate"], df["intervention_rate"]]).fillna(0).max()
    top = max(25.0, float(highest) * 110)
    fig.update_layout(barmode="group", hovermode="closest", legend_traceorder="reversed")
    fig.update_xaxes(range=[0, top], ticksuffix=" %")
    fig.update_yaxes(rangemode=None)
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
        fig.add_trace(go.Bar(
            y=part["task_type"], x=part["runs"], name=str(reason), orientation="h",
            marker_color=colors[str(reason)], customdata=part[["share"]].to_numpy(),
            hovertemplate="%{x} runs (%{customdata[0]:.1f} %)<extra>" + str(reason) + "</extra>",
        ))
    fig.update_layout(barmode="stack", hovermode="closest")
    fig.update_yaxes(categoryorder="category descending", rangemode=None)
    return fig


# --- distributions and baselines --------------------------------------------------------------
def token_distribution(
    df: pd.DataFrame,
    task_type: str,
    *,
    p50: float | None = None,
    p95: float | None = None,
    preset: float | None = None,
    limit: float | None = None,
) -> go.Figure:
    """Distribution of total tokens per run for one task type on a log axis, P50/P95/preset marked.

    ``df``: [task_type, bucket_low_tokens, bucket_high_tokens, runs] (log-spaced buckets); rows of
    other task types are ignored. Markers are vertical lines at the given token values.
    """
    _require(df, ("task_type", "bucket_low_tokens", "bucket_high_tokens", "runs"),
             "token_distribution")
    fig = _base(f"{task_type}: total tokens per run", "Total tokens per run (log scale)", "Runs",
                height=300)
    part = df[df["task_type"] == task_type].sort_values("bucket_low_tokens")
    part = part[part["bucket_low_tokens"] > 0]
    if part.empty:
        return _empty(fig)
    xs, ys = [], []
    for low, high, runs in zip(part["bucket_low_tokens"], part["bucket_high_tokens"], part["runs"]):
        xs += [low, low, high, high]
        ys += [0, runs, runs, 0]
    color = color_map([task_type], TASK_COLORS)[task_type]
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="lines", fill="tozeroy", name="runs per bucket",
        line={"color": color, "width": 1},
        hovertemplate="%{x:,.0f} tokens: %{y} runs<extra></extra>",
    ))
    top = float(part["runs"].max()) * 1.15
    for name, value, dash in (("P50", p50, "dot"), ("P95", p95, "dash"),
                              ("Preset", preset, "solid"), ("Limit", limit, "dashdot")):
        if value is None or (isinstance(value, float) and math.isnan(value)) or value <= 0:
            continue
        label = "current limit" if name == "Limit" else name
        fig.add_trace(go.Scatter(
            x=[value, value], y=[0, top], mode="lines", name=f"{label} {format_tokens(value)}",
            line={"color": MARKER_COLORS[name], "dash": dash, "width": 2},
            hovertemplate=f"{label}: %{{x:,.0f}} tokens<extra></extra>",
        ))
    values = [v for v in (p50, p95, preset, limit) if v is not None and v == v and v > 0]
    lo = min([float(part["bucket_low_tokens"].min())] + values)
    hi = max([float(part["bucket_high_tokens"].max())] + values)
    fig.update_xaxes(type="log", range=[math.log10(lo) - 0.05, math.log10(hi) + 0.08])
    fig.update_yaxes(range=[0, top])
    fig.update_layout(hovermode="closest")
    return fig


def preset_comparison(changes: pd.DataFrame, key: str = "max_total_tokens") -> go.Figure:
    """Grouped bars per task type: the limit runs ran under vs the recommended preset for ``key``.

    ``changes``: [task_type, key, current, recommended, change_pct] (``analysis.preset_changes``).
    A missing current limit shows no bar (the runs ran without one).
    """
    _require(changes, ("task_type", "key", "current", "recommended"), "preset_comparison")
    unit = "USD" if key.endswith("_usd") else "s" if key.endswith("_s") else (
        "tokens" if key.endswith("_tokens") else "count")
    fig = _base(f"Current limit vs recommended preset: {key}", "Task type", f"{key} ({unit})")
    part = changes[changes["key"] == key].sort_values("task_type")
    if part.empty:
        return _empty(fig)
    fig.add_trace(go.Bar(x=part["task_type"], y=part["current"], name="current limit",
                         marker_color="#BAB0AC"))
    fig.add_trace(go.Bar(x=part["task_type"], y=part["recommended"], name="recommended preset",
                         marker_color="#4C78A8",
                         text=[format_change(v) for v in part["change_pct"]],
                         textposition="outside"))
    fig.update_layout(barmode="group", hovermode="closest")
    return fig


# --- one run ---------------------------------------------------------------------------------
def run_turns(calls: pd.DataFrame, events: pd.DataFrame | None = None,
              limit_total_tokens: float | None = None, run_id: str = "") -> go.Figure:
    """One run: cumulative used tokens per turn (line), each turn's reservation (bars), the run's
    total-token limit (red line) and its budget events (markers at the turn they happened in).

    ``calls``: [turn, start_utc, model, input_tokens, output_tokens, reserved_tokens,
    cumulative_tokens, limit_total_tokens, usage_status, cost_usd];
    ``events``: [ts_utc, name, reason, from_model, to_model, tool_name, used_tokens, percent].
    """
    _require(calls, ("turn", "cumulative_tokens", "reserved_tokens"), "run_turns")
    title = f"Run {run_id}: cumulative tokens per turn" if run_id else "Cumulative tokens per turn"
    fig = _base(title, "Turn", "Tokens", height=380)
    if calls.empty:
        return _empty(fig, "This run has no model calls")
    calls = calls.reset_index(drop=True)
    turns = calls["turn"].where(calls["turn"].notna(), pd.Series(range(1, len(calls) + 1)))
    fig.add_trace(go.Bar(x=turns, y=calls["reserved_tokens"], name="reserved before the call",
                         marker_color="#BAB0AC", opacity=0.6))
    unknown = calls.get("usage_status", pd.Series(["reported"] * len(calls))) == "unknown"
    fig.add_trace(go.Scatter(
        x=turns, y=calls["cumulative_tokens"], name="cumulative used", mode="lines+markers",
        line={"color": "#4C78A8", "width": 2.5},
        marker={"size": [11 if u else 7 for u in unknown],
                "symbol": ["x" if u else "circle" for u in unknown]},
        hovertemplate="turn %{x}: %{y:,.0f} tokens<extra></extra>",
    ))
    if limit_total_tokens is None and "limit_total_tokens" in calls.columns:
        limits = calls["limit_total_tokens"].dropna()
        limit_total_tokens = float(limits.iloc[0]) if len(limits) else None
    if limit_total_tokens:
        fig.add_hline(y=limit_total_tokens, line_color="#E45756", line_width=2,
                      annotation_text=f"limit {format_tokens(limit_total_tokens)}",
                      annotation_position="top left", annotation_font_color="#E45756")
    if events is not None and not events.empty and "start_utc" in calls.columns:
        _add_events(fig, calls, turns, events)
    fig.update_layout(hovermode="closest", bargap=0.4)
    fig.update_xaxes(dtick=1 if len(calls) <= 30 else None)
    return fig


def _add_events(fig: go.Figure, calls: pd.DataFrame, turns: pd.Series,
                events: pd.DataFrame) -> None:
    starts = pd.to_datetime(calls["start_utc"]).tolist()
    xs, ys, texts = [], [], []
    for _, event in events.sort_values("ts_utc").iterrows():
        ts = pd.to_datetime(event["ts_utc"])
        index = max(0, sum(1 for s in starts if pd.notna(s) and s <= ts) - 1)
        xs.append(turns.iloc[index])
        used = event.get("used_tokens")
        ys.append(used if pd.notna(used) else calls["cumulative_tokens"].iloc[index])
        name = str(event["name"]).removeprefix("budgetlens.")
        detail = next((str(event[c]) for c in ("reason", "to_model", "tool_name")
                       if c in event and pd.notna(event[c])), "")
        texts.append(f"{name}: {detail}" if detail else name)
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="markers", name="budget events", text=texts,
        marker={"symbol": "diamond", "size": 11, "color": "#F58518",
                "line": {"width": 1, "color": "#333"}},
        hovertemplate="%{text}<br>%{y:,.0f} tokens<extra></extra>",
    ))


def runs_per_day(df: pd.DataFrame) -> go.Figure:
    """Stacked bars of finished runs per day by task type. ``df`` as for ``hit_rate_daily``."""
    _require(df, ("day", "task_type", "finished_runs"), "runs_per_day")
    fig = _base("Finished runs per day", "Day", "Runs")
    if df.empty:
        return _empty(fig)
    colors = color_map(df["task_type"], TASK_COLORS)
    for task, part in df.groupby("task_type", sort=True):
        part = part.sort_values("day")
        fig.add_trace(go.Bar(x=part["day"], y=part["finished_runs"], name=str(task),
                             marker_color=colors[str(task)]))
    fig.update_layout(barmode="stack", bargap=0.15)
    return fig
