"""What a served dashboard shares across its sessions so each page shows its first numbers fast
(issue 24): one held "now" for the windows "the last N days up to now", and a warm-up at server
start (``serve.py``, the launcher ``budgetlens dashboard`` runs) that imports what the pages
import and reads what each page reads on its first visit, so those reads hit the cache.

A bare ``streamlit run streamlit_app.py`` (and AppTest) runs without either: the clock at every
run, nothing read ahead.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from budgetlens.analysis.filters import Filters, utc_now, window_filters
from budgetlens.dashboard import data

log = logging.getLogger(__name__)

#: Seconds a served dashboard keeps one "now" while the store is unchanged: below the minute
#: within which a window's end reads "now" (``_ui.describe``), within the cache's lifetime.
NOW_HOLD_S = 45.0


@dataclass
class _HeldNow:
    seconds: float = 0.0  # 0: the clock at every call
    version: data.DataVersion | None = None
    since: float = 0.0  # time.monotonic() when ``now_utc`` was read
    now_utc: dt.datetime | None = None


_held = _HeldNow()
_held_lock = threading.Lock()


def hold_now(seconds: float) -> None:
    """Let ``window_now`` keep one "now" for up to ``seconds`` while the store is unchanged
    (0: the clock at every call, the default). Raises ValueError for a negative hold."""
    if not seconds >= 0:
        raise ValueError(f"the hold must be >= 0 seconds, got {seconds!r}")
    with _held_lock:
        _held.seconds, _held.now_utc = float(seconds), None


def window_now() -> dt.datetime:
    """The "now" the sidebar's windows "the last N days" end at (naive UTC): the clock, or with
    ``hold_now`` on, one instant shared by every session and rerun while the store's data version
    is unchanged, for at most the hold.

    A window ending at the clock is a new cache key at every run, so every page switch, new tab
    and widget change would read every query again; a held one hits the cache. A commit changes
    the data version and moves the held now to the clock at once: no committed run is left out
    of "up to now"."""
    with _held_lock:
        if not _held.seconds:
            return utc_now()
        version = data.data_version()
        if (
            _held.now_utc is None
            or _held.version != version
            or time.monotonic() - _held.since > _held.seconds
        ):
            _held.version, _held.since, _held.now_utc = version, time.monotonic(), utc_now()
        return _held.now_utc


def default_filters() -> Filters:
    """The sidebar's filters of a first visit: the CLI's default window (the last 14 days) up to
    ``window_now``, every task type, model and service, UTC."""
    return window_filters(now_utc=window_now())


def first_visit_reads(f: Filters) -> None:
    """Read what every page reads on a first visit with filters ``f`` (the pages' default widget
    values), in the order of the navigation, so those reads are in the cache.

    Mirrors the pages' calls argument for argument (the cache keys them by their arguments);
    ``tests/test_served.py`` renders every page after it and checks no page opens a reader."""
    from budgetlens.analysis import whatif
    from budgetlens.dashboard.app_pages import _ui

    period = _ui.period(f)
    first = data.data_extent()[0]
    data.filter_options()
    data.window_coverage(f)
    # Overview
    data.overview(f)
    previous = _ui.previous_window(f, first)
    if previous:
        data.overview(previous)
    data.hit_rate_daily(f)
    data.cost_by_period(f, period=period, by="task_type")
    data.runaways(f)
    # Cost
    data.cost_totals(f)
    data.cost_by_period(f, period=period, by="model")
    data.cost_per_run(f)
    data.top_runs(f, limit=20)
    data.spend_by(f, by="team")
    # Hit rate
    data.hit_rate_daily(f, period="hour" if period == "hour" else "day")
    data.stop_reasons(f)
    # Baselines
    data.baselines(f, by_model=False)
    data.drift(f)
    data.token_distribution(f)
    data.current_limits(f)
    data.censored_baselines(f)
    data.limit_history(f)
    data.token_part_baselines(f)
    # Presets
    data.baselines(f)
    data.evidence(f)
    # What-if (the slider's default in %, as the page divides it)
    target = whatif.DEFAULT_TARGET_HIT_RATE * 100 / 100
    data.whatif_plan(f, target, "auto", run_limit=data.WHATIF_SHOWN_RUNS)
    # Runs
    data.runs_table(f, search="", limit=data.RUNS_PAGE_SIZE)


def _import_page_modules() -> None:
    """Import what a page's first run imports (pandas, DuckDB, the analysis, Plotly, pyarrow),
    convert one frame as ``st.dataframe`` does and build one figure of the charts' kind: Plotly imports the classes of its template, its
    traces and shapes at the first figure that uses them (half a second and more)."""
    import pandas as pd
    import plotly.graph_objects as go
    import plotly.io
    import pyarrow as pa
    from plotly.subplots import make_subplots

    from budgetlens.dashboard import charts
    from budgetlens.dashboard.app_pages import _evidence, _tables, _ui  # noqa: F401

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(template=charts.TEMPLATE, title={"text": "warm-up"}, legend={"orientation": "h"})
    fig.add_trace(go.Bar(x=[0], y=[1], marker={"color": charts.PALETTE[0]}))
    fig.add_trace(go.Scatter(x=[0], y=[1], mode="lines+markers"), secondary_y=True)
    fig.add_hline(y=1, annotation_text="line")
    fig.add_vline(x=0)
    fig.add_vrect(x0=0, x1=1)
    fig.add_annotation(text="warm-up", x=0, y=1)
    fig.update_xaxes(title_text="x", type="log")
    fig.update_yaxes(title_text="y", rangemode="tozero")
    plotly.io.to_json(fig)
    pa.Table.from_pandas(pd.DataFrame({"n": [1], "when": [pd.Timestamp(0)]}))  # st.dataframe's conversion


def warm_up(hold_s: float = NOW_HOLD_S) -> None:
    """Hold the now for ``hold_s`` seconds, read every page's first visit (``first_visit_reads``,
    the first page first), then import what the pages' tables and charts import. Never raises:
    a store that is missing, busy or broken is the pages' to report; the warm-up only logs it.
    Streamlit's "missing ScriptRunContext" warnings of this thread are not logged meanwhile (the
    cached loaders run outside a script run here, on purpose)."""
    hold_now(hold_s)
    started = time.perf_counter()
    quiet = _NotFromThread(threading.get_ident())
    context_log = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")
    context_log.addFilter(quiet)
    try:
        with data.render_reader():
            first_visit_reads(default_filters())
        _import_page_modules()
    except Exception as error:  # the pages show the store's state; a warm-up never breaks them
        log.info("dashboard warm-up stopped: %s", error)
        return
    finally:
        context_log.removeFilter(quiet)
    log.info("dashboard warm-up read every page's first visit in %.2f s", time.perf_counter() - started)


class _NotFromThread(logging.Filter):
    """Drops the records logged by the thread ``thread_id``."""

    def __init__(self, thread_id: int) -> None:
        super().__init__()
        self.thread_id = thread_id

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread_id
