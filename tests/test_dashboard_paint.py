"""A page's first run draws its numbers and holds its charts and later tables; the rerun that
``_paint.finish`` asks for draws them (issue 24: tiles first in the browser)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from browser.live_writer import run_rows, write_runs
from streamlit.testing.v1 import AppTest

from budgetlens.analysis.filters import utc_now
from budgetlens.config import ENV_DB
from budgetlens.dashboard import served
from budgetlens.store import write_connection

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"

SCRIPT = """
import streamlit as st
from budgetlens.dashboard.app_pages import _paint

_paint.begin(st.session_state.get("page", "overview"))
first_table = _paint.hold_table(5)  # no tiles before it: the page's first numbers
chart = _paint.hold_chart(300)
later_table = _paint.hold_table(5)
st.session_state.setdefault("held", []).append((first_table, chart, later_table))
_paint.finish(True)
"""


def test_first_run_holds_charts_and_later_tables_and_its_rerun_draws_them():
    at = AppTest.from_string(SCRIPT).run()
    assert not at.exception
    assert at.session_state["held"] == [(False, True, True), (False, False, False)]


def test_a_later_run_of_the_same_page_draws_everything_at_once():
    at = AppTest.from_string(SCRIPT).run()
    at.run()
    assert at.session_state["held"][-1] == (False, False, False)
    assert len(at.session_state["held"]) == 3  # no second rerun


def test_another_page_holds_again():
    at = AppTest.from_string(SCRIPT).run()
    at.session_state["page"] = "cost"
    at.run()
    assert at.session_state["held"][2:] == [(False, True, True), (False, False, False)]


CONTROLS_SCRIPT = """
import streamlit as st
from budgetlens.dashboard.app_pages import _paint

_paint.begin(st.session_state.get("page", "overview"))
st.session_state.setdefault("controls", []).append(_paint.hold_controls())
_paint.finish(True)
"""


def test_a_sessions_first_run_holds_the_sidebar_controls_and_its_rerun_draws_them():
    at = AppTest.from_string(CONTROLS_SCRIPT).run()
    assert not at.exception
    assert at.session_state["controls"] == [True, False]  # the rerun follows though nothing else was held
    at.session_state["page"] = "cost"
    at.run()
    assert at.session_state["controls"][2:] == [False]  # a page switch keeps the sidebar drawn


#: The entrypoint's functions without its ``main()`` call, and both ways of reading the sidebar's
#: filters in one run: without the widgets (``draw=False``, a session's first run) and with them.
SIDEBAR_SCRIPT = """
from pathlib import Path

import streamlit as st

from budgetlens.dashboard import served

served.hold_now(3600)  # both reads' rolling windows end at one "now"
app = Path(st.session_state["app_file"])
names = {"__file__": str(app), "__name__": "sidebar_under_test"}
exec(compile(app.read_text().rsplit("\\nmain()", 1)[0], str(app), "exec"), names)
held = names["sidebar_filters"](draw=False)
st.session_state["pair"] = (held, names["sidebar_filters"]())
"""


@pytest.fixture(scope="module")
def sidebar_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sidebar") / "sidebar.duckdb"
    now = utc_now()
    with write_connection(path) as conn:
        write_runs(
            conn,
            [
                run_rows(
                    f"r-{index:02d}",
                    task_type=("research", "tool_use")[index % 2],
                    model=("gpt-4o-mini", "gpt-4.1")[index % 2],
                    start_utc=now - dt.timedelta(hours=20 * index + 1),
                )
                for index in range(6)
            ],
        )
    return path


@pytest.mark.system  # reason: a Streamlit AppTest on a store
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"window": "7d", "tz": "Europe/Berlin", "task_type": "research", "model": "gpt-4.1"},
        {"window": "custom", "from": "2026-11-20", "to": "2026-11-30", "tz": "Asia/Tokyo"},
        {"window": "bogus", "tz": "Mars/Phobos", "task_type": "missing"},
    ],
)
def test_the_filters_read_without_the_sidebar_widgets_equal_the_widgets(sidebar_store, monkeypatch, params):
    monkeypatch.setenv(ENV_DB, str(sidebar_store))
    at = AppTest.from_string(SIDEBAR_SCRIPT, default_timeout=60)
    at.session_state["app_file"] = str(APP)
    for key, value in params.items():
        at.query_params[key] = value
    try:
        at.run()
    finally:
        served.hold_now(0)
    assert not at.exception, [e.value for e in at.exception]
    held, drawn = at.session_state["pair"]
    assert held == drawn
    assert len(at.sidebar.selectbox) == 2 and len(at.sidebar.multiselect) == 6  # drawn once, by the second


@pytest.mark.system  # reason: a Streamlit AppTest of the app on a store
def test_a_first_visit_ends_with_the_compact_css_drawn_once(sidebar_store, monkeypatch):
    from budgetlens.dashboard import chrome

    monkeypatch.setenv(ENV_DB, str(sidebar_store))
    at = AppTest.from_file(str(APP), default_timeout=60).run()  # the first run, then its rerun
    assert not at.exception, [e.value for e in at.exception]
    styles = [element for element in at.get("html") if chrome.COMPACT_CSS in element.proto.body]
    assert len(styles) == 1
