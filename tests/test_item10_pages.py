"""Issue 24, item 10 and the live demo, on the dashboard side (Streamlit AppTests): one name and
one unit per rate (Intervention rate, a share; Intervened runs, a count), the unpriced banner
names the models, URL parameters the dashboard cannot use are named, and no change is shown
against a previous period the data covers only in part; a window of 48 hours or less draws the
hit rate per hour."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _apptest import open_app as _app
from browser.live_writer import run_rows, write_runs
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.store import write_connection

pytestmark = pytest.mark.system  # Streamlit AppTests: seconds each

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def _store(path: Path, days: float, unpriced_model: str | None = None) -> Path:
    """Two runs a day over the last ``days`` days (one stopped by its budget every other day);
    ``unpriced_model``: one more run on a model with no price."""
    now = analysis.utc_now()
    batches = []
    for index in range(int(days * 2)):
        start = now - dt.timedelta(hours=12 * index + 1)
        stop = "budget_tokens" if index % 4 == 0 else "completed"
        batches.append(run_rows(f"r-{index:04d}", start_utc=start, stop_reason=stop))
    if unpriced_model:
        batches.append(
            run_rows("r-unpriced", start_utc=now - dt.timedelta(hours=2), model=unpriced_model, priced=False)
        )
    with write_connection(path) as conn:
        write_runs(conn, batches)  # one commit (as one write_batch per run would store them)
    return path


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


def _values(array) -> list:
    """A figure array as a list (Plotly's JSON packs numbers as base64 ``bdata``)."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _hit_rate_figure(at: AppTest) -> dict | None:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next((s for s in specs if s["layout"]["title"]["text"].startswith("Budget hit rate per")), None)


def test_a_window_of_48_hours_or_less_draws_the_hit_rate_per_hour(tmp_path, monkeypatch):
    now = analysis.utc_now().replace(minute=30, second=0, microsecond=0) - dt.timedelta(hours=1)
    db = tmp_path / "s.duckdb"
    batches = []  # two runs in each of 4 hours before this one, one stopped
    for index in range(8):
        start = now - dt.timedelta(hours=index // 2, minutes=10 * (index % 2) + 1)
        stop = "budget_tokens" if index % 2 else "completed"
        batches.append(run_rows(f"d-{index}", start_utc=start, stop_reason=stop))
    with write_connection(db) as conn:
        write_runs(conn, batches)
    today = now.date()
    two_days = {
        "window": "custom",
        "from": (today - dt.timedelta(days=1)).isoformat(),
        "to": today.isoformat(),
    }
    for window in ({"window": "24h"}, two_days):  # 24 h, and a custom range of 2 days (48 h)
        at = _app(db, monkeypatch, page="hit_rate", **window)
        fig = _hit_rate_figure(at)
        assert fig is not None and fig["layout"]["title"]["text"] == "Budget hit rate per hour", window
        hours = sorted({pd.Timestamp(x) for trace in fig["data"] for x in _values(trace["x"])})
        assert len(hours) == 4 and all(h.minute == 0 for h in hours)  # one dot per hour, not per day
        assert [round(y) for y in _values(fig["data"][0]["y"])] == [50, 50, 50, 50]
        assert "rates per hour" in " ".join(c.value for c in at.caption)
        assert at.expander[0].label == "Hourly figures"
    longer = _app(_store(tmp_path / "m.duckdb", days=5), monkeypatch, page="hit_rate", window="7d")
    daily = _hit_rate_figure(longer)
    assert daily is not None and daily["layout"]["title"]["text"] == "Budget hit rate per day"


def test_a_window_whose_runs_fall_in_one_hour_says_so_instead_of_a_dot(tmp_path, monkeypatch):
    now = analysis.utc_now().replace(minute=40, second=0, microsecond=0) - dt.timedelta(hours=1)
    db = tmp_path / "s.duckdb"
    with write_connection(db) as conn:
        write_runs(
            conn,
            [run_rows(f"d-{index}", start_utc=now - dt.timedelta(minutes=10 + index)) for index in range(3)],
        )
    at = _app(db, monkeypatch, page="hit_rate", window="24h")
    assert _hit_rate_figure(at) is None
    assert "All runs of this window fall in one hour" in " ".join(c.value for c in at.caption)
