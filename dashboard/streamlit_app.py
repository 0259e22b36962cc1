"""budgetlens dashboard entrypoint: navigation, the shared sidebar filters and auto-refresh.

Run with ``budgetlens dashboard --db PATH`` (or ``BUDGETLENS_DB=PATH streamlit run`` on this
file). Pages live in ``dashboard/app_pages/``, one file each; they read the chosen
``budgetlens.analysis.views.Filters`` through ``budgetlens.dashboard.data.filters()``. Session-state keys of this
file start with ``app_``; URL query parameter ``refresh`` (``5`` or ``30``) presets auto-refresh.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from pathlib import Path

import streamlit as st

from budgetlens.dashboard import data

HERE = Path(__file__).resolve().parent

WINDOWS = {
    "Last 14 days": 14,
    "Last 24 hours": 1,
    "Last 7 days": 7,
    "Last 30 days": 30,
    "All data": None,
    "Custom range": "custom",
}
#: The window the dashboard opens with: the CLI's default (``analysis.window_filters`` with
#: ``--window-days`` 14, ending at the newest run), so both show the same numbers by default.
DEFAULT_WINDOW = "Last 14 days"
REFRESH = {"Off": None, "5 s": 5, "30 s": 30}
#: While the store is unavailable the app retries this often (seconds), refresh on or off.
RETRY_S = 2
#: While no store file exists the app checks this often (seconds) whether one appeared.
MISSING_CHECK_S = 5
COMMON_ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
)

#: Less empty space above the page title than Streamlit's default (a denser, tool-like layout).
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"], .block-container { padding-top: 2.2rem; }
[data-testid="stMetricValue"] { font-size: 1.9rem; }
</style>"""

#: The default page lives at ``/`` (Streamlit gives the default page the empty pathname; its
#: ``url_path`` only names it internally). ``/overview`` reaches it through OVERVIEW_ALIAS.
OVERVIEW = st.Page(
    str(HERE / "app_pages" / "overview.py"),
    title="Overview",
    icon=":material/dashboard:",
    url_path="home",
    default=True,
)
#: A hidden page answering ``/overview``: the app switches from it to OVERVIEW (at ``/``), so a
#: bookmarked or typed ``/overview`` shows the Overview, never "Page not found".
OVERVIEW_ALIAS = st.Page(
    str(HERE / "app_pages" / "overview.py"),
    title="Overview",
    icon=":material/dashboard:",
    url_path="overview",
    visibility="hidden",
)
PAGES = [
    OVERVIEW,
    st.Page(str(HERE / "app_pages" / "cost.py"), title="Cost", icon=":material/payments:", url_path="cost"),
    st.Page(
        str(HERE / "app_pages" / "hit_rate.py"),
        title="Hit rate",
        icon=":material/block:",
        url_path="hit_rate",
    ),
    st.Page(
        str(HERE / "app_pages" / "baselines.py"),
        title="Baselines",
        icon=":material/insights:",
        url_path="baselines",
    ),
    st.Page(
        str(HERE / "app_pages" / "presets.py"), title="Presets", icon=":material/tune:", url_path="presets"
    ),
    st.Page(
        str(HERE / "app_pages" / "whatif.py"), title="What-if", icon=":material/science:", url_path="whatif"
    ),
    st.Page(str(HERE / "app_pages" / "runs.py"), title="Runs", icon=":material/list:", url_path="runs"),
]


def _zones() -> list[str]:
    others = sorted(zoneinfo.available_timezones() - set(COMMON_ZONES))
    return list(COMMON_ZONES) + others


def _local_midnight_utc(day: dt.date, tz: str) -> dt.datetime:
    local = dt.datetime.combine(day, dt.time(), tzinfo=zoneinfo.ZoneInfo(tz))
    return local.astimezone(dt.UTC).replace(tzinfo=None)


def _to_local(ts_utc: dt.datetime, tz: str) -> dt.datetime:
    return ts_utc.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(tz))


def _initial_refresh() -> str:
    wanted = st.query_params.get("refresh")
    for label, seconds in REFRESH.items():
        if seconds is not None and str(seconds) == wanted:
            return label
    return "Off"


def sidebar_filters():
    """Draw the shared filters; return a ``Filters`` (raises data.DataUnavailable)."""
    from budgetlens.analysis.views import Filters, window_filters

    extent = data.query("data_extent")
    options = data.query("filter_options")
    first, last, n_runs = extent
    with st.sidebar:
        st.markdown("### budgetlens")
        st.caption(f"Store `{data.db_path().name}` · {n_runs:,} runs")
        tz = st.selectbox(
            "Time zone",
            _zones(),
            key="app_tz",
            help="Days and hours are bucketed in this zone; stored times are UTC.",
        )
        window = st.selectbox(
            "Time window",
            list(WINDOWS),
            key="app_window",
            index=list(WINDOWS).index(DEFAULT_WINDOW),
            help="The last N days ending at the newest run (as the CLI's --window-days: an old "
            "store still shows); 'All data' spans the data's whole extent.",
        )
        start_utc = end_utc = None
        if WINDOWS[window] == "custom":
            today = dt.date.today()
            lo = _to_local(first, tz).date() if first else today - dt.timedelta(days=13)
            hi = _to_local(last, tz).date() if last else today
            chosen = st.date_input("Days (inclusive)", value=(lo, hi), key="app_range")
            if isinstance(chosen, (tuple, list)) and len(chosen) == 2:
                start_utc = _local_midnight_utc(chosen[0], tz)
                end_utc = _local_midnight_utc(chosen[1] + dt.timedelta(days=1), tz)
        elif WINDOWS[window]:
            # The CLI's window: [newest - N days, newest]; the end stays open so runs committed
            # after this read show at the next refresh instead of being cut off.
            start_utc = window_filters(WINDOWS[window], now_utc=last).start_utc
        if first and last:
            st.caption(
                f"Data: {_to_local(first, tz):%Y-%m-%d %H:%M} → {_to_local(last, tz):%Y-%m-%d %H:%M} ({tz})"
            )
        task_types = st.multiselect(
            "Task type", options["task_types"], key="app_task_types", placeholder="All task types"
        )
        models = st.multiselect("Model", options["models"], key="app_models", placeholder="All models")
        services = st.multiselect(
            "Service", options["services"], key="app_services", placeholder="All services"
        )
    return Filters(
        start_utc=start_utc,
        end_utc=end_utc,
        task_types=tuple(task_types),
        models=tuple(models),
        services=tuple(services),
        tz=tz,
    )


def _poll() -> None:
    """Rerun the whole app when the store changed (a commit, the file appearing) or while it is
    busy. Costs two ``stat`` calls per tick; the queries run only on a rerun."""
    if not st.session_state.get("app_poll_armed"):
        st.session_state["app_poll_armed"] = True  # this is the full run's own pass: no check
    else:
        changed = data.data_version() != st.session_state.get("app_version")
        if changed or st.session_state.get(data.UNAVAILABLE_KEY) == "busy":
            st.rerun(scope="app")
    st.caption(f"Checked for new data at {dt.datetime.now():%H:%M:%S}")


def refresh_control() -> None:
    """The auto-refresh radio and the poller fragment that applies it.

    A setting of N seconds checks the store every N/2 seconds, so a committed run shows within
    N seconds. While the store is busy the app retries every RETRY_S seconds; while it is
    missing it checks every MISSING_CHECK_S seconds for the file to appear.
    """
    with st.sidebar:
        st.divider()
        choice = st.radio(
            "Auto-refresh",
            list(REFRESH),
            horizontal=True,
            key="app_refresh",
            index=list(REFRESH).index(_initial_refresh()),
            help="Re-read the store when the collector commits new runs.",
        )
        if st.button("Reload now", key="app_reload", icon=":material/refresh:"):
            data.clear_cache()
        interval = REFRESH[choice] / 2 if REFRESH[choice] else None
        state = st.session_state.get(data.UNAVAILABLE_KEY)
        if state == "busy":
            interval = min(interval or RETRY_S, RETRY_S)
        elif state == "missing":
            interval = min(interval or MISSING_CHECK_S, MISSING_CHECK_S)
        if interval:
            st.session_state["app_poll_armed"] = False
            st.fragment(_poll, run_every=interval)()


def main() -> None:
    st.set_page_config(page_title="budgetlens", page_icon=":material/savings:", layout="wide")
    st.html(COMPACT_CSS)
    data.begin_run()
    st.session_state["app_version"] = data.data_version()
    page = st.navigation([*PAGES, OVERVIEW_ALIAS])
    if page.url_path == OVERVIEW_ALIAS.url_path:
        st.switch_page(OVERVIEW)
    try:
        st.session_state[data.FILTERS_KEY] = sidebar_filters()
        page.run()
    except data.DataUnavailable as error:
        st.session_state[data.UNAVAILABLE_KEY] = error.state
        if error.missing:
            st.info(f"**No data yet.** {error}", icon=":material/database:")
        elif error.invalid:
            st.error(f"**This file is not a budgetlens store:** {error}", icon=":material/error:")
        else:
            st.warning(f"**Data unavailable, retrying…** {error}", icon=":material/hourglass_top:")
    stale_since = data.stale()
    if stale_since:
        st.session_state[data.UNAVAILABLE_KEY] = "busy"  # retry soon, refresh on or off
        st.caption(
            f"Store busy: showing results read at "
            f"{dt.datetime.fromtimestamp(stale_since):%H:%M:%S}; retrying."
        )
    refresh_control()


main()
