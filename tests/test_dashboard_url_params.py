"""Dashboard URL parameters it cannot use are named, never silently changed: a custom range
from after to, a range ending in the future, an unknown refresh; a value that is a control
character or has spaces at its ends reads as such; ``--`` in a run id stays two dashes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from _apptest import open_app as _app
from browser.live_writer import run_rows, write_runs
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.dashboard import formatting, url_params
from budgetlens.store import write_connection

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"
TODAY = dt.date(2026, 12, 2)


def test_a_reversed_custom_range_is_ignored_and_named():
    days, ignored = url_params.custom_range("2030-01-01", "2020-01-01", TODAY)
    assert days is None
    assert ignored == [("from=2030-01-01&to=2020-01-01", "from is after to; the default range shown")]


def test_a_custom_range_ending_in_the_future_ends_today_with_a_note():
    days, ignored = url_params.custom_range("2026-11-20", "2030-01-01", TODAY)
    assert days == (dt.date(2026, 11, 20), TODAY)
    assert ignored[0][1] == "a window never ends in the future; it ends today (2026-12-02)"
    assert url_params.custom_range("2027-01-01", "2027-02-01", TODAY)[0] is None
    assert url_params.custom_range("2026-11-01", "2026-11-30", TODAY) == (
        (dt.date(2026, 11, 1), dt.date(2026, 11, 30)),
        [],
    )


@pytest.mark.parametrize("value", ["0.001", "-1", "5.0", ""])
def test_a_refresh_that_is_not_5_or_30_is_named(value):
    assert url_params.refresh_ignored(value, [5, 30]) == [
        (f"refresh={value}", "not one of 5, 30 seconds; auto-refresh off")
    ]
    assert url_params.refresh_ignored("30", [5, 30]) == [] and url_params.refresh_ignored(None, [5, 30]) == []


def test_an_ignored_value_is_shown_whole_in_bold():
    assert url_params.param_markdown("model=\x00") == "**model\\=\\\\x00**"
    assert url_params.param_markdown("model= a ") == "**model\\=\u2420a\u2420**"
    assert url_params.param_markdown("model=") == "**model\\=\\(empty\\)**"


def test_two_dashes_or_dots_stay_two_and_three_not_smart_punctuation():
    shown = formatting.safe_text("' OR 1=1 --...")
    assert "\\-\u2060\\-" in shown and "\\.\u2060\\.\u2060\\." in shown
    assert formatting.safe_text("a-b.c") == "a\\-b\\.c"  # single ones untouched


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("params") / "params.duckdb"
    now = analysis.utc_now()
    with write_connection(path) as conn:
        write_runs(
            conn,
            [
                run_rows(f"r-{index:04d}", start_utc=now - dt.timedelta(hours=6 * index + 1))
                for index in range(4)
            ],
        )
    return path


def _warnings(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)


@pytest.mark.system
def test_the_app_names_a_reversed_range_and_a_bad_refresh(store, monkeypatch):
    at = _app(store, monkeypatch, window="custom", **{"from": "2030-01-01", "to": "2020-01-01"})
    note = _warnings(at).replace("\\", "")
    assert "Ignored in the address" in note and "from is after to" in note
    start, end = at.session_state["app_range"]
    assert end <= dt.date.today()  # never a window ending in the future
    for value in ("0.001", "-1"):
        at = _app(store, monkeypatch, refresh=value)
        assert f"refresh={value}" in _warnings(at).replace("\\", ""), _warnings(at)
        assert at.radio(key="app_refresh").value == "Off"


@pytest.mark.system
def test_the_app_shows_a_nul_model_and_a_dashed_run_id_as_they_are(store, monkeypatch):
    at = _app(store, monkeypatch, model="\x00")
    assert "**model\\=\\\\x00**" in _warnings(at)
    at = _app(store, monkeypatch, "runs")
    at.query_params["run"] = "' OR 1=1 --"
    at.run()
    (warning,) = [w.value for w in at.warning if "is not in this store" in w.value]
    assert "\\-\u2060\\-" in warning and "—" not in warning and "–" not in warning


@pytest.mark.parametrize(
    ("lo", "hi"), [("20261101", "2026-11-30"), ("2026-11-01", "20261130"), ("２０２６-11-01", "2026-11-30")]
)
def test_a_date_not_written_yyyy_mm_dd_is_ignored_and_named(lo, hi):
    days, ignored = url_params.custom_range(lo, hi, TODAY)
    assert days is None
    assert ignored == [(f"from={lo}&to={hi}", "dates are YYYY-MM-DD")]
