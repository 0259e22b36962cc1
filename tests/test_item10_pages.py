"""Issue 24, item 10 and the live demo, on the dashboard side (Streamlit AppTests): one name and
one unit per rate (Intervention rate, a share; Intervened runs, a count), the unpriced banner
names the models, URL parameters the dashboard cannot use are named, and no change is shown
against a previous period the data covers only in part."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from browser.live_writer import run_rows
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_DB
from budgetlens.store import write_batch, write_connection

pytestmark = pytest.mark.system  # Streamlit AppTests: seconds each

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def _store(path: Path, days: float, unpriced_model: str | None = None) -> Path:
    """Two runs a day over the last ``days`` days (one stopped by its budget every other day);
    ``unpriced_model``: one more run on a model with no price."""
    now = analysis.utc_now()
    with write_connection(path) as conn:
        for index in range(int(days * 2)):
            start = now - dt.timedelta(hours=12 * index + 1)
            stop = "budget_tokens" if index % 4 == 0 else "completed"
            write_batch(conn, *run_rows(f"r-{index:04d}", start_utc=start, stop_reason=stop))
        if unpriced_model:
            rows = run_rows(
                "r-unpriced", start_utc=now - dt.timedelta(hours=2), model=unpriced_model, priced=False
            )
            write_batch(conn, *rows)
    return path


def _app(db: Path, monkeypatch, page: str | None = None, **params: str) -> AppTest:
    monkeypatch.setenv(ENV_DB, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    if page:
        at.switch_page(f"app_pages/{page}.py")
        at.run()
    assert not at.exception
    return at


def _labels(at: AppTest) -> list[str]:
    return [metric.label for metric in at.metric]


def test_the_intervention_rate_has_one_name_and_the_count_another(tmp_path, monkeypatch):
    db = _store(tmp_path / "s.duckdb", days=5)
    overview = _app(db, monkeypatch)
    hit_rate = _app(db, monkeypatch, page="hit_rate")
    for at in (overview, hit_rate):
        assert "Intervention rate" in _labels(at)
        assert "Interventions" not in _labels(at)
        rate = next(m for m in at.metric if m.label == "Intervention rate")
        assert rate.value.endswith("%")  # a share, in percent like every rate
    count = next(m for m in hit_rate.metric if m.label == "Intervened runs")
    assert count.value.isdigit()


def test_the_unpriced_banner_names_the_model(tmp_path, monkeypatch):
    db = _store(tmp_path / "s.duckdb", days=2, unpriced_model="acme-model-x9")
    at = _app(db, monkeypatch, page="cost")
    banner = " ".join(w.value for w in at.warning).replace("\\", "")  # markdown escapes
    assert "no known price (acme-model-x9)" in banner


def test_url_parameters_it_cannot_use_are_named_not_ignored(tmp_path, monkeypatch):
    db = _store(tmp_path / "s.duckdb", days=2)
    at = _app(db, monkeypatch, window="bogus", tz="Mars/Phobos", task_type="no_such_task")
    note = " ".join(w.value for w in at.warning).replace("\\", "")  # markdown escapes
    assert "Ignored in the address" in note
    assert "window=bogus" in note and "tz=Mars/Phobos" in note and "task_type=no_such_task" in note
    assert "(not an IANA time zone; UTC shown)" in note
    assert at.session_state["app_tz"] == "UTC"
    # a clean address says nothing
    clean = _app(db, monkeypatch, window="7d", tz="Europe/Berlin")
    assert not any("Ignored in the address" in w.value for w in clean.warning)


@pytest.mark.parametrize(("days", "shown"), [(10, False), (16, True)])
def test_no_change_against_a_previous_period_the_data_covers_in_part(tmp_path, monkeypatch, days, shown):
    """7-day window: with 10 days of data the previous 7 days are covered in part (no change
    shown); with 16 days, in full (the change is shown)."""
    db = _store(tmp_path / "s.duckdb", days=days)
    at = _app(db, monkeypatch, window="7d")
    runs = next(m for m in at.metric if m.label == "Runs")
    assert (runs.proto.delta != "") is shown, runs.proto.delta


def test_a_one_day_window_draws_no_daily_dots_on_hit_rate(tmp_path, monkeypatch):
    now = analysis.utc_now()
    db = tmp_path / "s.duckdb"
    with write_connection(db) as conn:  # every run within the last 3 hours: one day
        for index in range(6):
            start = now - dt.timedelta(minutes=20 * index + 5)
            write_batch(conn, *run_rows(f"d-{index}", start_utc=start, stop_reason="completed"))
    one_day = _app(db, monkeypatch, page="hit_rate", window="24h")
    texts = " ".join(c.value for c in one_day.caption)
    assert "no daily line to draw" in texts
    many = _app(_store(tmp_path / "m.duckdb", days=5), monkeypatch, page="hit_rate")
    assert "no daily line to draw" not in " ".join(c.value for c in many.caption)
    assert len(many.get("plotly_chart")) > len(one_day.get("plotly_chart"))
