"""Shared look of the dashboard's charts: palette, task/stop-reason/marker colors, the common
layout (``_base``), the empty-figure note and small axis helpers (pure Plotly, no streamlit)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go

from budgetlens.analysis.views import HIT_RATE_ALARM, is_missing
from budgetlens.dashboard.formatting import format_compact, visible_text

TEMPLATE = "plotly_white"
#: Colors per task type of the seeds, in their usual order; other keys take PALETTE colors that
#: no seed task type uses.
TASK_COLORS = {
    "simple_qa": "#4C78A8",
    "tool_use": "#72B7B2",
    "complex_reasoning": "#F58518",
    "code_generation": "#54A24B",
    "research": "#B279A2",
}
#: Twenty distinct colors (Tableau 10 without its grey, then darker and lighter hues); keys beyond
#: twenty cycle. Grey (#BAB0AC) is kept for "current limit" and reservations.
PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#B279A2",
    "#72B7B2",
    "#E45756",
    "#EECA3B",
    "#FF9DA6",
    "#9D755D",
    "#17BECF",
    "#BCBD22",
    "#393B79",
    "#E377C2",
    "#8C6D31",
    "#637939",
    "#843C39",
    "#5254A3",
    "#9EDAE5",
    "#CEDB9C",
    "#7B4173",
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
#: Reds mean "stopped by the budget" (STOP_COLORS, the alarm line): never a task or model color.
RESERVED_REDS = frozenset({"#E45756", "#FF9DA6", "#B22222", "#843C39"})
#: The markers of a distribution: four hues and four dashes, none of them red (red = a stop).
MARKER_COLORS = {"P50": "#4C78A8", "P95": "#393B79", "Preset": "#54A24B", "Limit": "#7F7F7F"}
EMPTY_TEXT = "No runs in this selection"


def color_map(keys: Iterable[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """Distinct colors for ``keys`` (str -> "#RRGGBB"): a key in ``known`` keeps its color; the
    others take, in sorted order, the PALETTE colors no ``known`` color uses (cycling past that).

    Pass every key a page can show (e.g. all task types of the store) and hand the result to the
    builders' ``colors`` argument: then a task type or model has one color across all charts.
    """
    known = known or {}
    taken = {c.upper() for c in known.values()}
    free = [c for c in PALETTE if c.upper() not in taken and c not in RESERVED_REDS] or list(PALETTE)
    result, index = {}, 0
    for key in sorted({str(k) for k in keys if not is_missing(k)}):
        if key in known:
            result[key] = known[key]
        else:
            result[key] = free[index % len(free)]
            index += 1
    return result


def _colors(keys: Iterable, colors: dict[str, str] | None, known: dict[str, str] | None):
    """``colors`` extended by stable colors for keys it lacks (never reusing one of its colors)."""
    keys = [str(k) for k in keys]
    if not colors:
        return color_map(keys, known)
    missing = sorted({k for k in keys if k not in colors})
    if not missing:
        return colors
    extra = color_map(list(colors) + missing, {**(known or {}), **colors})
    return {**colors, **{k: extra[k] for k in missing}}


#: Plotly reads a subset of HTML in every text it draws (trace names, tick labels, titles,
#: annotations, hover text): ``<a href>`` becomes a link, ``<br>``, ``<b>``, ``<span style>`` apply;
#: and ``%{...}`` in a hover template is a substitution. Its text nodes resolve these entities.
_PLOT_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "%": "&#37;"}


def plot_text(value) -> str:
    """A stored or URL-supplied string (task type, model, stop reason, run id, tool name, service)
    as Plotly text that shows exactly its characters: ``&``, ``<``, ``>`` and ``%`` become
    entities, so no planted ``<a href>`` is a link and no ``%{...}`` is a hover substitution
    (the chart's counterpart of ``formatting.safe_text``); control characters and bidi
    controls are shown escaped (``formatting.visible_text``). Returns str; never raises."""
    return "".join(_PLOT_ENTITIES.get(ch, ch) for ch in visible_text(str(value)))


def _number(value) -> float | None:
    """A marker value as a float, None when missing (None, NaN, pd.NA) or not a number."""
    if is_missing(value):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _base(title: str, x_title: str, y_title: str, *, height: int = 360) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        height=height + 40,
        margin={"l": 60, "r": 20, "t": 45, "b": 10},
        # Below the plot, anchored to the figure's bottom edge (not the plot area's), so long or
        # tilted tick labels and the axis title never run into it.
        legend={
            "orientation": "h",
            "yref": "container",
            "yanchor": "bottom",
            "y": 0.0,
            "xanchor": "left",
            "x": 0.0,
            "font": {"size": 11},
        },
        hovermode="x unified",
    )
    fig.update_xaxes(title_text=x_title, title_standoff=6, automargin=True)
    fig.update_yaxes(title_text=y_title, rangemode="tozero", automargin=True)
    return fig


def _empty(fig: go.Figure, text: str = EMPTY_TEXT) -> go.Figure:
    fig.add_annotation(
        text=text,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        showarrow=False,
        font={"size": 14, "color": "#888"},
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def _count_axis(fig: go.Figure, top: float, axis: str = "y") -> None:
    """Whole-number ticks on a count axis (never 0.2 runs)."""
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    update(tickformat=",d", **({"dtick": 1} if top <= 6 else {}))


def _log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick values and ``format_compact`` labels (``200K``) for a log axis over [low, high]:
    1-2-5 steps, thinned to powers of ten when there are more than 9."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for steps in ((1, 2, 5), (1,)):
        ticks = [m * 10**e for e in range(first, last + 1) for m in steps if low <= m * 10**e <= high]
        if len(ticks) <= 9:
            break
    if len(ticks) < 3:
        ticks = [
            m * 10**e for e in range(first, last + 1) for m in (1, 2, 3, 5, 7) if low <= m * 10**e <= high
        ]
    return ticks, [format_compact(t) for t in ticks]


def _nice_step(top: float, ticks: int = 5) -> float:
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _token_axis(fig: go.Figure, top: float, axis: str = "y") -> None:
    """Linear token ticks labelled like the rest of the dashboard (``200K``, ``1.5M``), not
    Plotly's SI ``200k``. ``top``: the largest value drawn (tokens)."""
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    if not top or not top > 0 or not math.isfinite(top):
        return
    step = _nice_step(float(top))
    values = [k * step for k in range(int(top / step) + 2)]
    update(tickvals=values, ticktext=[format_compact(v) for v in values])


def _few_periods(fig: go.Figure, values, period: str = "day") -> None:
    """Keep a time axis with fewer than 4 distinct periods readable: one tick per period and a
    period of room either side (Plotly would zoom to sub-second ticks around a single bar)."""
    stamps = sorted(pd.to_datetime(pd.Series(list(values))).dropna().unique())
    if not stamps or len(stamps) >= 4:
        return
    step = pd.Timedelta(milliseconds=PERIOD_MS[period])
    fig.update_xaxes(
        range=[stamps[0] - step, stamps[-1] + step],
        dtick="M1" if period == "month" else step.total_seconds() * 1000,
        tickformat="%b %d %H:%M" if period == "hour" else "%b %Y" if period == "month" else "%b %d",
    )


#: Length of a bar's period in milliseconds (Plotly's unit on a date axis); a month is 30 days.
PERIOD_MS = {"hour": 3_600_000, "day": 86_400_000, "week": 7 * 86_400_000, "month": 30 * 86_400_000}
#: Share of its period a bar fills (the rest is the gap between bars).
BAR_FILL = 0.8


def period_for_span(days: float | None) -> str:
    """The bar period for a time range of ``days``: hours up to 2 days, days up to 92, weeks up
    to two years, months beyond (so a bar is never a hairline on a long range)."""
    if days is None:
        return "day"
    for period, limit in (("hour", 2), ("day", 92), ("week", 731)):
        if days <= limit:
            return period
    return "month"


def roll_up(
    df: pd.DataFrame, column: str, period: str, sums: Sequence[str], keys: Sequence[str]
) -> pd.DataFrame:
    """``df`` with ``column`` (dates or timestamps) truncated to ``period`` ('day', 'week' from
    Monday, 'month') and ``sums`` added per (period, ``keys``). 'hour'/'day' leave it as is."""
    if df.empty or period in ("hour", "day"):
        return df
    stamps = pd.to_datetime(df[column])
    if period == "week":
        start = stamps.dt.to_period("W-SUN").dt.start_time  # weeks ending Sunday start on Monday
    else:
        start = stamps.dt.to_period("M").dt.start_time
    return df.assign(**{column: start}).groupby([column, *keys], as_index=False)[list(sums)].sum()


def _bar_width(period: str) -> float:
    """The width of a bar on a date axis (ms): without it Plotly draws a single day's bar as a
    hairline (its default width is the smallest gap between x values, 1 ms for one value)."""
    return PERIOD_MS[period] * BAR_FILL


def _require(df: pd.DataFrame, columns: Sequence[str], builder: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{builder}: data frame lacks column(s) {missing}")


def _alarm_line(fig: go.Figure, y: float = HIT_RATE_ALARM * 100) -> None:
    fig.add_hline(
        y=y,
        line_dash="dash",
        line_color="#E45756",
        line_width=1.5,
        annotation_text=f"{y:.0f} % alarm line",
        annotation_position="top left",
        annotation_font_color="#E45756",
    )
