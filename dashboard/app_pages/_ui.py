"""Page furniture shared by the pages: the header (filters, freshness, what the window leaves
out), KPI tiles, charts, the alarm banner, colors, the empty state and preset downloads. Tables
and run links live in ``_tables``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import zoneinfo
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from budgetlens.analysis import preset_export
from budgetlens.analysis import views as analysis
from budgetlens.analysis.views import HIT_RATE_ALARM, LOW_SAMPLE_RUNS, Filters
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _paint
from budgetlens.dashboard.formatting import is_missing, safe_text

#: Plotly's own toolbar is hidden: it covered the chart titles, and Streamlit's element toolbar
#: already offers full screen; drag to zoom and double-click to reset still work.
PLOTLY_CONFIG = {"displayModeBar": False, "displaylogo": False}


#: A window end this close to the clock reads "now".
_NOW_SLACK = dt.timedelta(minutes=1)


def _local(ts_utc: dt.datetime, tz: str) -> dt.datetime:
    return ts_utc.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(tz))


def ago(ts_utc: dt.datetime, now_utc: dt.datetime | None = None) -> str:
    """How long before ``now_utc`` (default: now) ``ts_utc`` was: ``3 min ago``, ``5 h ago``,
    ``12 days ago``, ``just now`` (both naive UTC)."""
    seconds = ((now_utc or analysis.utc_now()) - ts_utc).total_seconds()
    if seconds < 60:
        return "just now"
    for size, unit in ((86400 * 2, "days"), (3600, "h"), (60, "min")):
        if seconds >= size:
            count = seconds / (86400 if unit == "days" else size)
            return f"{count:,.0f} {unit} ago"
    return "just now"


def _active(f: Filters) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(label, values) of every choice filter of ``f`` (tags as ``key=value``)."""
    return (
        ("task", f.task_types),
        ("model", f.models),
        ("service", f.services),
        ("team", f.teams),
        ("user", f.users),
        ("tag", tuple(f"{k}={v}" for k, v in f.tags)),
    )


def describe(f: Filters) -> str:
    """One line naming the active filters: the window in the time zone of the day buckets,
    task types, models, services, time zone."""
    if f.start_utc is None and f.end_utc is None:
        window = "all data"
    else:
        start = f"{_local(f.start_utc, f.tz):%Y-%m-%d %H:%M}" if f.start_utc else "…"
        if f.end_utc is None or abs(f.end_utc - analysis.utc_now()) < _NOW_SLACK:
            end = "now"
        else:
            end = f"{_local(f.end_utc, f.tz):%Y-%m-%d %H:%M}"
        window = f"{start} → {end}"
    parts = [window]
    for label, values in _active(f):
        if values:
            parts.append(f"{label}: {', '.join(safe_text(v) for v in values)}")
    parts.append(f"times and days in {safe_text(f.tz)}")
    return " · ".join(parts)


def _show_all_data() -> None:
    st.session_state["app_window"] = "All data"


def freshness(f: Filters) -> None:
    """The data's extent and last arrival, and, when the window leaves runs out, how many with a
    one-click "show all data" button (design §6: windows say how many runs they leave out)."""
    first, last, _ = data.data_extent()
    if first is None or last is None:
        return
    written = data.last_write_utc()
    parts = [
        f"Data {_local(first, f.tz):%Y-%m-%d %H:%M} → {_local(last, f.tz):%Y-%m-%d %H:%M}",
        f"newest run started {ago(last)}",
    ]
    if written:
        parts.append(f"last write to the store {ago(written)}")
    coverage = data.window_coverage(f)
    if not coverage.left_out or (f.start_utc is None and f.end_utc is None):
        st.caption(" · ".join(parts))
        return
    sides = [
        f"{n:,} {where}"
        for n, where in ((coverage.before, "before the window"), (coverage.after, "after it"))
        if n
    ]
    row = st.container(horizontal=True, vertical_alignment="center")
    row.caption(
        f"**This window keeps {coverage.kept:,} of {coverage.total:,} runs** "
        f"({', '.join(sides)}). " + " · ".join(parts)
    )
    row.button(
        f"Show all {coverage.total:,} runs",
        key="app_show_all",
        on_click=_show_all_data,
        icon=":material/unfold_more:",
        type="secondary",
        width="content",
    )


def period(f: Filters) -> str:
    """The bar period of the time charts for ``f``'s window ('hour', 'day', 'week', 'month'):
    ``charts.period_for_span`` of the window, or of the data's extent for "all data"."""
    first, last, _ = data.data_extent()
    start = f.start_utc or first
    end = min(f.end_utc or analysis.utc_now(), last + dt.timedelta(seconds=1)) if last else f.end_utc
    if start is None or end is None:
        return "day"
    return charts.period_for_span(max((end - start).total_seconds(), 0) / 86400)


def low_sample_mark(runs: int) -> str | None:
    """The tile help suffix of a rate over fewer than ``LOW_SAMPLE_RUNS`` budgeted runs."""
    if 0 < runs < LOW_SAMPLE_RUNS:
        return f"low sample: {runs:,} budgeted run{'s' if runs != 1 else ''}"
    return None


def header(title: str, what: str, f: Filters) -> None:
    """Page title, a one-line purpose, the active filters, the data's extent and last arrival,
    and what the window leaves out."""
    st.title(title)
    st.caption(f"{what}  \n{describe(f)}")
    freshness(f)


def tiles(items: Sequence[tuple]) -> None:
    """A row of KPI tiles: (label, value text, help text or None[, change text or None]); the
    change against the previous period shows under the value (``"+12 % vs previous"``)."""
    columns = st.columns(len(items), border=True)
    _paint.numbers_drawn()
    for column, (label, value, help_text, *rest) in zip(columns, items):
        change = rest[0] if rest else None
        column.metric(label, value, delta=change, delta_color="off", help=help_text)


def previous_window(f: Filters, first_utc: dt.datetime | None = None) -> Filters | None:
    """The window of the same length just before ``f``'s (same scope), for "vs previous period";
    None for "all data", an open-ended window, or a previous window the data covers only in part
    (``first_utc``, the first stored run, later than its start): a change against a partial
    period is not shown (issue 24: "+268 %" against 3 days)."""
    if f.start_utc is None or f.end_utc is None:
        return None
    length = f.end_utc - f.start_utc
    start = f.start_utc - length
    if first_utc is not None and first_utc > start:
        return None
    return dataclasses.replace(f, start_utc=start, end_utc=f.start_utc)


def change_text(current: float | None, previous: float | None) -> str | None:
    """``"+12 % vs previous period"``, ``"new vs previous period"`` when the previous one had
    none; None when either is unknown (never a made-up 0 %)."""
    if current is None or previous is None or is_missing(current) or is_missing(previous):
        return None
    if previous == 0:
        return None if current == 0 else "new vs previous period"
    return f"{(current - previous) / previous * 100:+.0f} % vs previous period"


def chart(fig, key: str) -> None:
    """Render a Plotly figure full-width (in a page's first run: a frame of its height, ``_paint``)."""
    if not _paint.hold_chart(fig.layout.height or CHART_HEIGHT_PX):
        st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG)


#: Plotly's height of a figure that sets none (px).
CHART_HEIGHT_PX = 450


#: Figures kept built (the most recently used ones), for at most the data cache's lifetime.
FIGURE_ENTRIES = 256


def frame_key(frame: pd.DataFrame) -> bytes:
    """A digest of every cell, column name, dtype and index label of ``frame`` (16 bytes): the
    figure cache's key for a frame argument. Streamlit's own key hashes a sample of a frame of
    50,000 rows or more (two frames that differ outside it would share a figure) and logs a
    warning for cells it cannot hash (lists: a preset's lower-bound keys); here list cells hash
    as tuples."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(
        repr((frame.shape, [str(c) for c in frame.columns], [str(t) for t in frame.dtypes])).encode()
    )
    try:
        cells = pd.util.hash_pandas_object(frame, index=True)
    except TypeError:  # unhashable cells
        cells = pd.util.hash_pandas_object(
            frame.map(lambda v: tuple(v) if isinstance(v, list) else v), index=True
        )
    digest.update(cells.to_numpy().tobytes())
    return digest.digest()


@st.cache_resource(
    max_entries=FIGURE_ENTRIES,
    ttl=data.CACHE_TTL_S,
    show_spinner=False,
    hash_funcs={pd.DataFrame: frame_key},
)
def _built(name: str, args: tuple, kwargs: tuple, _builder: Callable[..., go.Figure]) -> go.Figure:
    return _builder(*args, **dict(kwargs))


def figure(builder: Callable[..., go.Figure], *args: Any, **kwargs: Any) -> go.Figure:
    """``builder(*args, **kwargs)`` (a ``budgetlens.dashboard.charts`` builder: pure, so its
    figure follows from its arguments), built once per distinct arguments and shared by every
    session and rerun (issue 24): building a Plotly figure (layout, template, validation) costs
    more than the cached reads behind it. ``st.plotly_chart`` only reads the figure; nothing may
    change it after."""
    name = f"{builder.__module__}.{builder.__qualname__}"
    return _built(name, args, tuple(sorted(kwargs.items())), builder)


def alarm_banner(per_task: pd.DataFrame, threshold: float = HIT_RATE_ALARM) -> None:
    """One error banner per task type of ``per_task`` (``Overview.per_task``) in alarm
    (``analysis.split_alarms``: hit rate above ``threshold`` over at least LOW_SAMPLE_RUNS
    budgeted runs); one softer note naming the low-sample task types above it."""
    hot, low = analysis.split_alarms(per_task, threshold)
    line = f"{threshold * 100:g} %"
    for _, row in hot.iterrows():
        task = str(row["task_type"])
        shown = safe_text(task)
        st.error(
            f"**{shown}**: budget hit rate {charts.format_percent(row['hit_rate'])} is "
            f"above the {line} alarm line: the budget is too tight or the agent has a "
            "bug. Compare its baseline and preset.",
            icon=":material/warning:",
        )
        links = st.container(horizontal=True)
        params = {**url_filters(), "task_type": task}
        for page, label, icon in (
            ("app_pages/baselines.py", f"Baseline of {shown}", ":material/insights:"),
            ("app_pages/presets.py", f"Preset of {shown}", ":material/tune:"),
            ("app_pages/runs.py", f"Runs of {shown}", ":material/list:"),
        ):
            links.page_link(page, label=label, icon=icon, query_params=params)
    if not low.empty:
        names = ", ".join(
            f"**{safe_text(row['task_type'])}** {charts.format_percent(row['hit_rate'])} of {int(row['budgeted_runs']):,}"
            for _, row in low.iterrows()
        )
        st.info(
            f"Above the {line} line on a low sample (< {LOW_SAMPLE_RUNS} budgeted "
            f"finished runs): {names}. Too few runs to call an alarm yet.",
            icon=":material/science:",
        )


def task_colors() -> dict[str, str]:
    """One color per task type of the whole store (stable across charts and filters)."""
    return charts.color_map(data.filter_options()["task_types"], charts.TASK_COLORS)


def model_colors() -> dict[str, str]:
    """One color per model of the whole store (stable across charts and filters)."""
    return charts.color_map(data.filter_options()["models"])


def url_filters() -> dict[str, str | list[str]]:
    """The current URL's shared-filter parameters (window, tz, task_type, ...), for links that
    keep the view when they open another page."""
    shared = ("window", "tz", "from", "to", "task_type", "model", "service", "refresh")
    return {k: st.query_params.get_all(k) for k in shared if k in st.query_params}


#: What an empty store says: how to send data (the README's three ways).
HOW_TO_SEND_DATA = (
    "**No runs in this store yet.** Load the sample (`budgetlens sample`), import agent logs "
    "(`budgetlens import claude-code ~/.claude/projects`), or point an OpenTelemetry exporter at "
    "the collector (`budgetlens collector`, OTLP/HTTP on 127.0.0.1:4318). This page refreshes "
    "when runs arrive."
)


def no_runs(f: Filters) -> None:
    """The empty state: how to send data on an empty store; else what to widen or clear, naming
    only what is actually set."""
    _, _, total = data.data_extent()
    if total == 0:
        st.info(HOW_TO_SEND_DATA, icon=":material/database:")
        return
    ways = []
    if f.start_utc is not None or f.end_utc is not None:
        ways.append("widen the time window")
    set_filters = [("task type" if n == "task" else n) for n, v in _active(f) if v]
    if set_filters:
        ways.append(f"clear the {' / '.join(set_filters)} filter")
    advice = (" " + " or ".join(ways).capitalize() + ".") if ways else ""
    st.info(f"No runs match these filters.{advice}", icon=":material/filter_alt_off:")


def preset_downloads(document: dict, title: str, key_prefix: str) -> None:
    """The YAML / TOML / JSON download buttons of a preset document (the file
    ``RunBudget.from_preset`` loads); button keys ``<key_prefix>_download_<ext>``."""
    buttons = st.container(horizontal=True, vertical_alignment="center")
    buttons.markdown(f"**{safe_text(title)}**", width="content")
    for label, ext, to_text in (
        ("YAML", "yaml", preset_export.to_yaml),
        ("TOML", "toml", preset_export.to_toml),
        ("JSON", "json", preset_export.to_json),
    ):
        buttons.download_button(
            label,
            to_text(document),
            file_name=f"presets.{ext}",
            mime=f"application/{ext}",
            key=f"{key_prefix}_download_{ext}",
            icon=":material/download:",
            help=f"Download presets.{ext}",
            width="content",
        )
