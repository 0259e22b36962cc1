"""Run charts: one run's cumulative tokens per turn with reservations, limit and budget events,
and finished runs per day by task type."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import plotly.graph_objects as go

from budgetlens import semconv
from budgetlens.dashboard.charts._style import (
    TASK_COLORS,
    _bar_width,
    _base,
    _colors,
    _count_axis,
    _empty,
    _few_periods,
    _number,
    _require,
    _token_axis,
    plot_text,
    roll_up,
)
from budgetlens.dashboard.formatting import format_tokens, is_missing


def run_turns(
    calls: pd.DataFrame,
    events: pd.DataFrame | None = None,
    limit_total_tokens: float | None = None,
    run_id: str = "",
) -> go.Figure:
    """One run: cumulative used tokens per turn (line), each turn's reservation (bars), the run's
    total-token limit (red line) and its budget events (markers at the turn they happened in:
    warnings, downgrades and summaries each their own marker, the stop a red X; tool calls are
    not drawn, see ``EVENT_STYLES``).

    ``calls``: [turn, start_utc, model, input_tokens, output_tokens, reserved_tokens,
    cumulative_tokens, limit_total_tokens, usage_status, cost_usd];
    ``events``: [ts_utc, name, reason, from_model, to_model, tool_name, used_tokens, percent].
    When a call has no turn number (a foreign trace, an import) the calls are ordered by start
    time and numbered 1..n, and the x axis says "Model call".
    """
    _require(calls, ("turn", "cumulative_tokens", "reserved_tokens"), "run_turns")
    numbered = calls.empty or bool(calls["turn"].notna().all())
    unit = "turn" if numbered else "model call"
    title = f"Cumulative tokens per {unit}"
    fig = _base(
        f"Run {plot_text(run_id)}: {title.lower()}" if run_id else title,
        "Turn" if numbered else "Model call (in start order)",
        "Tokens",
        height=380,
    )
    if calls.empty:
        return _empty(fig, "This run has no model calls")
    if not numbered and "start_utc" in calls.columns:
        calls = calls.sort_values("start_utc", kind="stable", na_position="last")
    calls = calls.reset_index(drop=True)
    turns = (
        pd.Series(calls["turn"].astype(float).astype(int))
        if numbered
        else pd.Series(range(1, len(calls) + 1))
    )
    reserved = pd.to_numeric(calls["reserved_tokens"], errors="coerce")
    if reserved.notna().any():
        fig.add_trace(
            go.Bar(x=turns, y=reserved, name="reserved before the call", marker_color="#BAB0AC", opacity=0.6)
        )
    unknown = calls.get("usage_status", pd.Series(["reported"] * len(calls))) == "unknown"
    fig.add_trace(
        go.Scatter(
            x=turns,
            y=calls["cumulative_tokens"],
            name="cumulative used",
            mode="lines+markers",
            line={"color": "#4C78A8", "width": 2.5},
            marker={
                "size": [11 if u else 7 for u in unknown],
                "symbol": ["x" if u else "circle" for u in unknown],
            },
            hovertemplate=unit + " %{x}: %{y:,.0f} tokens<extra></extra>",
        )
    )
    limit_total_tokens = _number(limit_total_tokens)
    if limit_total_tokens is None and "limit_total_tokens" in calls.columns:
        limits = calls["limit_total_tokens"].dropna()
        limit_total_tokens = _number(limits.iloc[0]) if len(limits) else None
    if limit_total_tokens:
        fig.add_hline(
            y=limit_total_tokens,
            line_color="#E45756",
            line_width=2,
            annotation_text=f"limit {format_tokens(limit_total_tokens)}",
            annotation_position="top left",
            annotation_font_color="#E45756",
        )
    if events is not None and not events.empty and "start_utc" in calls.columns:
        _add_events(fig, calls, turns, events)
    fig.update_layout(hovermode="closest", bargap=0.4)
    drawn = [
        pd.to_numeric(calls["cumulative_tokens"], errors="coerce").max(),
        reserved.max(),
        limit_total_tokens,
    ]
    _token_axis(fig, max(float(v) for v in drawn if not is_missing(v)) * 1.05)
    fig.update_xaxes(dtick=1 if len(calls) <= 30 else None)
    return fig


#: How each kind of event is drawn: (legend name, marker symbol, color, size). Tool calls are
#: not budget events: they are counted per turn in the hover, never drawn as markers (a
#: 116-turn runaway has 179 of them). The real stop is a red X of its own.
EVENT_STYLES = {
    semconv.EVENT_WARNING: ("warning", "triangle-up", "#EECA3B", 12),
    semconv.EVENT_DOWNGRADE: ("downgrade", "triangle-down", "#B279A2", 12),
    semconv.EVENT_SUMMARIZE: ("summary", "square", "#72B7B2", 11),
    semconv.EVENT_STOP: ("budget stop", "x", "#E45756", 15),
}


#: How far apart (in turns) markers of one turn are drawn, so none hides another.
EVENT_SPREAD_TURNS = 0.22


def _add_events(fig: go.Figure, calls: pd.DataFrame, turns: pd.Series, events: pd.DataFrame) -> None:
    """Markers of the budget events at the turn they happened in. Events of one turn (a warning
    and the stop it led to) are drawn side by side, ``EVENT_SPREAD_TURNS`` apart around the
    turn, in the order they happened, so the stop's X covers none of them."""
    starts = pd.to_datetime(calls["start_utc"]).tolist()
    placed: list[tuple[str, int, float, str]] = []  # (event name, call index, tokens, hover text)
    for _, event in events.sort_values("ts_utc").iterrows():
        name = str(event["name"])
        if name not in EVENT_STYLES:  # tool calls and unknown names: not budget events
            continue
        ts = pd.to_datetime(event["ts_utc"])
        index = max(0, sum(1 for s in starts if pd.notna(s) and s <= ts) - 1)
        used = event.get("used_tokens")
        detail = next(
            (
                str(event[c])
                for c in ("reason", "to_model", "tool_name")
                if c in event and not is_missing(event[c])
            ),
            "",
        )
        label = EVENT_STYLES[name][0]
        tokens = used if pd.notna(used) else calls["cumulative_tokens"].iloc[index]
        placed.append((name, index, tokens, f"{label}: {plot_text(detail)}" if detail else label))
    per_turn = Counter(index for _, index, _, _ in placed)
    seen: Counter = Counter()
    drawn: dict[str, tuple[list, list, list]] = {}
    for name, index, tokens, text in placed:
        offset = (seen[index] - (per_turn[index] - 1) / 2) * EVENT_SPREAD_TURNS
        seen[index] += 1
        xs, ys, texts = drawn.setdefault(name, ([], [], []))
        xs.append(turns.iloc[index] + offset)
        ys.append(tokens)
        texts.append(text)
    for name, (xs, ys, texts) in drawn.items():
        label, symbol, color, size = EVENT_STYLES[name]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=label,
                text=texts,
                marker={
                    "symbol": symbol,
                    "size": size,
                    "color": color,
                    "line": {"width": 1, "color": "#333"},
                },
                hovertemplate="%{text}<br>%{y:,.0f} tokens<extra></extra>",
            )
        )


def runs_per_day(df: pd.DataFrame, *, colors: dict[str, str] | None = None, period: str = "day") -> go.Figure:
    """Stacked bars of finished runs per ``period`` ('day', 'week' or 'month': days are added
    up, see ``roll_up``) by task type. ``df`` as for ``hit_rate_daily``; ``colors``: task type
    -> color (see ``color_map``). A bar spans 80 % of its period (never a hairline)."""
    _require(df, ("day", "task_type", "finished_runs"), "runs_per_day")
    noun = {"day": "day", "week": "week", "month": "month"}.get(period, "day")
    fig = _base(f"Finished runs per {noun}", noun.capitalize(), "Runs")
    if df.empty:
        return _empty(fig)
    df = roll_up(df[["day", "task_type", "finished_runs"]], "day", noun, ["finished_runs"], ["task_type"])
    colors = _colors(df["task_type"], colors, TASK_COLORS)
    for task, part in df.groupby("task_type", sort=True):
        part = part.sort_values("day")
        fig.add_trace(
            go.Bar(
                x=pd.to_datetime(part["day"]),
                y=part["finished_runs"],
                name=plot_text(task),
                marker_color=colors[str(task)],
                width=_bar_width(noun),
            )
        )
    fig.update_layout(barmode="stack")
    _count_axis(fig, float(df.groupby("day")["finished_runs"].sum().max()))
    _few_periods(fig, df["day"], noun)
    return fig


def run_cost_time(
    calls: pd.DataFrame,
    limit_cost_usd: float | None = None,
    limit_duration_s: float | None = None,
    fired: str | None = None,
) -> go.Figure:
    """One run's cumulative cost (USD, top) and elapsed time (s since its first call, bottom) per
    turn, each on its own axis with its limit as a line (the one that stopped the run, ``fired``
    = ``max_cost_usd`` / ``max_duration_s``, drawn thick and labelled "stopped the run").
    ``calls``: [turn, start_utc, cost_usd]. Unpriced calls add nothing to the cost line."""
    from plotly.subplots import make_subplots

    _require(calls, ("turn", "start_utc", "cost_usd"), "run_cost_time")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12)
    fig.update_layout(title="Cost and time per turn", height=420, hovermode="closest", showlegend=False)
    if calls.empty:
        return fig
    ordered = calls.sort_values("start_utc", kind="stable").reset_index(drop=True)
    turns = pd.Series(range(1, len(ordered) + 1))
    cost = pd.to_numeric(ordered["cost_usd"], errors="coerce").fillna(0).cumsum()
    start = pd.to_datetime(ordered["start_utc"])
    elapsed = (start - start.min()).dt.total_seconds()
    fig.add_trace(go.Scatter(x=turns, y=cost, mode="lines+markers", name="cost (USD)"), row=1, col=1)
    fig.add_trace(go.Scatter(x=turns, y=elapsed, mode="lines+markers", name="elapsed (s)"), row=2, col=1)
    for row, value, key, text in (
        (1, _number(limit_cost_usd), "max_cost_usd", "cost limit ${:,.4g}"),
        (2, _number(limit_duration_s), "max_duration_s", "time limit {:,.0f} s"),
    ):
        if value is None:
            continue
        hit = fired == key
        label = text.format(value) + (" — stopped the run" if hit else "")
        fig.add_hline(
            y=value,
            row=row,
            col=1,
            line_color="#E45756" if hit else "#BAB0AC",
            line_width=3 if hit else 1.5,
            line_dash="solid" if hit else "dash",
            annotation_text=label,
            annotation_position="top left",
        )
    fig.update_yaxes(title_text="Cost (USD)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="Elapsed (s)", row=2, col=1, rangemode="tozero")
    fig.update_xaxes(title_text="Model call (in start order)", row=2, col=1)
    return fig
