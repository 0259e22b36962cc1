"""A page's first run draws its numbers and holds its charts and later tables; the rerun that
``_paint.finish`` asks for draws them (issue 24: tiles first in the browser)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

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
