"""budgetlens dashboard entrypoint: navigation, the shared sidebar filters and auto-refresh.

Run with ``budgetlens dashboard --db PATH`` (or ``BUDGETLENS_DB=PATH streamlit run`` on this
file). Pages live in ``dashboard/app_pages/``, one file each; they read the chosen
``budgetlens.analysis.views.Filters`` through ``budgetlens.dashboard.data.filters()``. Session-state keys of this
file start with ``app_``.

The shared filters live in the URL query (``URL_PARAMS``), so a view can be bookmarked and
shared: ``?window=7d&tz=Europe/Berlin&task_type=research&model=gpt-4.1``; ``window`` is one of
``WINDOWS``' codes (``24h``, ``7d``, ``14d``, ``30d``, ``all``, ``custom`` with ``from`` and
``to`` as local dates); ``task_type``, ``model`` and ``service`` repeat; ``refresh`` (``5`` or
``30``) presets auto-refresh. A page adds its own (the Runs page's ``run``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path

import streamlit as st

from budgetlens.dashboard import chrome, data, served, url_params
from budgetlens.dashboard.app_pages import _paint
from budgetlens.dashboard.formatting import safe_text, visible_text
from budgetlens.dashboard.zones import local_midnight_utc, to_local, zone_names, zones

HERE = Path(__file__).resolve().parent

#: Time windows: label -> (URL code, days up to now; None = all data, "custom" = a range of days).
WINDOWS: dict[str, tuple[str, float | str | None]] = {
    "Last 14 days": ("14d", 14),
    "Last 24 hours": ("24h", 1),
    "Last 7 days": ("7d", 7),
    "Last 30 days": ("30d", 30),
    "All data": ("all", None),
    "Custom range": ("custom", "custom"),
}
#: The window the dashboard opens with: the CLI's default (``analysis.window_filters`` with
#: ``--window-days`` 14, up to now), so both show the same numbers by default.
DEFAULT_WINDOW = "Last 14 days"
#: URL query parameter -> session-state key of the sidebar widget it mirrors.
URL_PARAMS = {
    "window": "app_window",
    "tz": "app_tz",
    "task_type": "app_task_types",
    "model": "app_models",
    "service": "app_services",
    "team": "app_teams",
    "user": "app_users",
    "tag": "app_tags",
}
#: The multiselect filters: (URL parameter, widget key, ``filter_options`` key, label).
_CHOICES = (
    ("task_type", "app_task_types", "task_types", "Task type"),
    ("model", "app_models", "models", "Model"),
    ("service", "app_services", "services", "Service"),
    ("team", "app_teams", "teams", "Team"),
    ("user", "app_users", "users", "User"),
    ("tag", "app_tags", "tags", "Tag"),
)
FAVICON = HERE / "favicon.png"
REFRESH = {"Off": None, "5 s": 5, "30 s": 30}
#: While the store is unavailable the app retries this often (seconds), refresh on or off.
RETRY_S = 2
#: While no store file exists the app checks this often (seconds) whether one appeared.
MISSING_CHECK_S = 5

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


def _window_label(code: str | None) -> str | None:
    return next((label for label, (c, _) in WINDOWS.items() if c == code), None)


_URL_WRITTEN_KEY = "app_url_written"
_URL_OWNED = (*URL_PARAMS, "from", "to")


def _shared_params() -> dict[str, list[str]]:
    return {k: st.query_params.get_all(k) for k in _URL_OWNED if k in st.query_params}


def _load_url(options: dict[str, list[str]]) -> None:
    """Set the sidebar widgets from the URL query when it differs from what the app last wrote
    there: a shared link on a new session, a link from another page (the alarm banner's), an
    edited address. The URL is then the whole truth (a filter it lacks is cleared). Unknown
    values are dropped: a filter never names a task type the store lacks."""
    current = _shared_params()
    first = _URL_WRITTEN_KEY not in st.session_state
    refresh = url_params.refresh_ignored(st.query_params.get("refresh"), [s for s in REFRESH.values() if s])
    if not current or (not first and current == st.session_state.get(_URL_WRITTEN_KEY)):
        st.session_state.setdefault(_URL_WRITTEN_KEY, {})
        if first and refresh:
            st.session_state[_URL_IGNORED_KEY] = refresh
        return
    params = st.query_params
    ignored: list[tuple[str, str]] = []  # (param=value, why), shown once above the page: url_note
    st.session_state["app_window"] = _window_label(params.get("window")) or DEFAULT_WINDOW
    if params.get("window") and _window_label(params.get("window")) is None:
        codes = ", ".join(code for code, _ in WINDOWS.values())
        ignored.append((f"window={params.get('window')}", f"not one of {codes}; {DEFAULT_WINDOW} shown"))
    wanted_tz = params.get("tz") or "UTC"
    st.session_state["app_tz"] = wanted_tz if wanted_tz in zone_names() else "UTC"
    if wanted_tz != st.session_state["app_tz"]:
        ignored.append((f"tz={wanted_tz}", "not an IANA time zone; UTC shown"))
    for param, key, option, _ in _CHOICES:
        st.session_state[key] = [v for v in params.get_all(param) if v in options[option]]
        ignored += [
            (f"{param}={v}", "not in the store") for v in params.get_all(param) if v not in options[option]
        ]
    st.session_state[_URL_IGNORED_KEY] = ignored
    ignored += refresh if first else []
    if st.session_state["app_window"] == "Custom range":
        days, problems = url_params.custom_range(
            params.get("from", ""), params.get("to", ""), dt.date.today()
        )
        ignored += problems
        if days is not None:
            st.session_state["app_range"] = days


_URL_IGNORED_KEY = "app_url_ignored"


def url_note() -> None:
    """One warning naming the URL parameters the last link carried that the dashboard could not
    use (an unknown window code or time zone, a task type the store lacks), then forgotten (after
    the rerun of a first paint, ``_paint``, which shows it again)."""
    ignored = (st.session_state.get if _paint.deferring() else st.session_state.pop)(_URL_IGNORED_KEY, None)
    if ignored:
        st.warning(
            "**Ignored in the address:** "
            + "; ".join(f"{url_params.param_markdown(item)} ({why})" for item, why in ignored),
            icon=":material/link_off:",
        )


#: The sidebar widgets' values outlive a run that draws no sidebar (Streamlit drops a widget's
#: state when a run does not draw it: a page switch, a store that was briefly unavailable).
_SAVED_KEY = "app_saved_filters"
_WIDGET_KEYS = ("app_window", "app_tz", "app_range", *(key for _, key, _, _ in _CHOICES))


def _restore_widgets() -> None:
    for key, value in (st.session_state.get(_SAVED_KEY) or {}).items():
        if key not in st.session_state:
            st.session_state[key] = value


def _save_url(f, window: str) -> None:
    """Write the chosen filters into the URL query (keeping a page's own parameters)."""
    wanted: dict[str, str | list[str]] = {"window": WINDOWS[window][0], "tz": f.tz}
    if WINDOWS[window][1] == "custom" and f.start_utc and f.end_utc:
        chosen: tuple = tuple(st.session_state.get("app_range") or ())
        if len(chosen) == 2:
            wanted["from"], wanted["to"] = chosen[0].isoformat(), chosen[1].isoformat()
    tags = tuple(f"{k}={v}" for k, v in f.tags)
    for param, values in (
        ("task_type", f.task_types),
        ("model", f.models),
        ("service", f.services),
        ("team", f.teams),
        ("user", f.users),
        ("tag", tags),
    ):
        if values:
            wanted[param] = list(values)
    current = {k: st.query_params.get_all(k) for k in st.query_params}
    keep = {k: v for k, v in current.items() if k not in _URL_OWNED}
    merged = {**keep, **wanted}
    st.session_state[_URL_WRITTEN_KEY] = {k: v if isinstance(v, list) else [v] for k, v in wanted.items()}
    if {k: (v if isinstance(v, list) else [v]) for k, v in merged.items()} != current:
        st.query_params.from_dict(merged)


def sidebar_filters(draw: bool = True):
    """Draw the shared filters (seeded from and written back to the URL); return a ``Filters``
    (raises data.DataUnavailable). With ``draw`` False nothing is drawn: each filter's value is
    the one its widget would return, from session state (set from the URL or a former run) or
    the widget's default (``_paint.hold_controls``: a session's first run)."""
    from budgetlens.analysis.views import Filters, window_filters

    first, last, n_runs = data.data_extent()
    options = data.filter_options()
    _load_url(options)
    _restore_widgets()
    st.session_state.setdefault("app_window", DEFAULT_WINDOW)

    def widget(key: str, default, make):
        return make() if draw else st.session_state.get(key, default)

    with st.sidebar if draw else contextlib.nullcontext():
        if draw:
            st.markdown("### budgetlens")
            st.caption(f"Store {safe_text(data.store_name())} · {n_runs:,} runs")
        tz = widget(
            "app_tz",
            zones()[0],
            lambda: st.selectbox(
                "Time zone",
                zones(),
                key="app_tz",
                help="Days and hours are bucketed in this zone; stored times are UTC.",
            ),
        )
        window = widget(
            "app_window",
            DEFAULT_WINDOW,
            lambda: st.selectbox(
                "Time window",
                list(WINDOWS),
                key="app_window",
                help="The last N days up to now (as the CLI's --window-days), not up to the newest "
                "run: a collector that stopped sending shows as such. 'All data' spans the data's "
                "whole extent.",
            ),
        )
        start_utc = end_utc = None
        days = WINDOWS[window][1]
        if days == "custom":
            today = dt.date.today()
            lo = to_local(first, tz).date() if first else today - dt.timedelta(days=13)
            hi = to_local(last, tz).date() if last else today
            if "app_range" not in st.session_state:
                st.session_state["app_range"] = (lo, hi)
            chosen = widget("app_range", (lo, hi), lambda: st.date_input("Days (inclusive)", key="app_range"))
            if isinstance(chosen, (tuple, list)) and len(chosen) == 2:
                start_utc = local_midnight_utc(chosen[0], tz)
                end_utc = local_midnight_utc(chosen[1] + dt.timedelta(days=1), tz)
        elif isinstance(days, (int, float)):
            windowed = window_filters(days, now_utc=served.window_now())
            start_utc, end_utc = windowed.start_utc, windowed.end_utc
        # stored strings, shown as plain text with control and bidi characters escaped (visible_text)
        picked = {
            option: tuple(
                widget(
                    key,
                    [],
                    lambda key=key, option=option, label=label: st.multiselect(
                        label,
                        options[option],
                        key=key,
                        placeholder=f"All {label.lower()}s",
                        format_func=visible_text,
                    ),
                )
            )
            for _, key, option, label in _CHOICES
        }
    chosen_filters = Filters(
        start_utc=start_utc,
        end_utc=end_utc,
        task_types=picked["task_types"],
        models=picked["models"],
        services=picked["services"],
        teams=picked["teams"],
        users=picked["users"],
        tags=tuple(tag.partition("=")[::2] for tag in picked["tags"]),
        tz=tz,
    )
    _save_url(chosen_filters, window)
    st.session_state[_SAVED_KEY] = {k: st.session_state[k] for k in _WIDGET_KEYS if k in st.session_state}
    return chosen_filters


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
            index=list(REFRESH).index(chrome.initial_refresh(st.query_params.get("refresh"), REFRESH)),
            help="Re-read the store when the collector commits new runs.",
        )
        if st.button("Reload now", key="app_reload", icon=":material/refresh:"):
            data.clear_cache()
        seconds = REFRESH[choice]
        interval = seconds / 2 if seconds else None
        state = st.session_state.get(data.UNAVAILABLE_KEY)
        if state == "busy":
            interval = min(interval or RETRY_S, RETRY_S)
        elif state == "missing":
            interval = min(interval or MISSING_CHECK_S, MISSING_CHECK_S)
        if interval:
            st.session_state["app_poll_armed"] = False
            st.fragment(_poll, run_every=interval)()


def main() -> None:
    # A local file: the favicon never comes from an outside host (the dashboard works offline).
    st.set_page_config(page_title="budgetlens", page_icon=str(FAVICON), layout="wide")
    data.begin_run()
    try:
        _page_run()
    finally:
        data.end_run()  # the render's one store reader


def _page_run() -> None:
    st.session_state["app_version"] = data.data_version()
    page = st.navigation([*PAGES, OVERVIEW_ALIAS])
    _paint.begin(page.url_path)  # tiles first, charts a run later (``finish`` below)
    completed = False  # the page ran to its end
    controls_held = _paint.hold_controls()  # a session's first run: its numbers before the widgets
    try:
        # The filters first, also on the alias's pass: a run that draws no sidebar would drop
        # the widgets' state (and with it the window a shared link asked for).
        st.session_state[data.FILTERS_KEY] = sidebar_filters(draw=not controls_held)
        if page.url_path == OVERVIEW_ALIAS.url_path:
            st.switch_page(OVERVIEW, query_params=dict(st.query_params))
        url_note()
        page.run()
        completed = True
    except data.DataUnavailable as error:
        st.session_state[data.UNAVAILABLE_KEY] = error.state
        shown, why = safe_text(error, max_chars=500), error.state  # missing, invalid or busy
        notice, title, icon = {
            "missing": (st.info, "No data yet.", "database"),
            "invalid": (st.error, "This file is not a budgetlens store:", "error"),
        }.get(why, (st.warning, "Data unavailable, retrying…", "hourglass_top"))
        notice(f"**{title}** {shown}", icon=f":material/{icon}:")
    stale_since = data.stale()
    if stale_since:
        st.session_state[data.UNAVAILABLE_KEY] = "busy"  # retry soon, refresh on or off
        st.caption(
            f"Store busy: showing results read at "
            f"{dt.datetime.fromtimestamp(stale_since):%H:%M:%S}; retrying."
        )
    if controls_held and not completed:  # no rerun follows a page that did not finish
        with contextlib.suppress(data.DataUnavailable):  # shown above already
            sidebar_filters()
    if not (controls_held and completed):  # a first run's come after its numbers (_paint)
        st.html(chrome.COMPACT_CSS)  # style only: Streamlit puts it out of the page's flow
        refresh_control()
    _paint.finish(completed)


main()
