"""The served dashboard's fast first paint (issue 24): one held "now" while the store is
unchanged, and a warm-up that reads each page's first visit, so no page opens a reader of the
store on its first visit after it. Counted with a wrapper around ``data.connect`` (the real
reader underneath), on a real DuckDB sample store."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views
from budgetlens.config import ENV_DB
from budgetlens.dashboard import data, served
from budgetlens.sample import default_end_utc, write_sample
from budgetlens.store import write_batch, write_connection

pytestmark = pytest.mark.system  # Streamlit AppTests on a 14-day sample store: seconds each

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"
PAGES = ("overview", "cost", "hit_rate", "baselines", "presets", "whatif", "runs")


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_copy) -> Path:
    path = tmp_path_factory.mktemp("served") / "sample.duckdb"
    return sample_store_copy(path, days=14, seed=5, runs_per_day=12, end_utc=default_end_utc())


@pytest.fixture
def store(sample_store, monkeypatch) -> Iterator[Path]:
    monkeypatch.setenv(ENV_DB, str(sample_store))
    data.clear_cache()
    yield sample_store
    served.hold_now(0)
    data.clear_cache()


class _Counter:
    """``data.connect`` with its opens counted."""

    def __init__(self, real):
        self.real = real
        self.opened = 0

    @contextlib.contextmanager
    def __call__(self, *args, **kwargs):
        with self.real(*args, **kwargs) as conn:
            self.opened += 1
            yield conn


def test_without_a_hold_the_window_ends_at_the_clock(store):
    before = views.utc_now()
    assert before <= served.window_now() <= views.utc_now()


def test_a_held_now_stays_while_the_store_is_unchanged_and_moves_after_the_hold(store):
    served.hold_now(0.3)
    held = served.window_now()
    assert served.window_now() == held
    time.sleep(0.4)
    assert served.window_now() > held


def test_a_commit_moves_the_held_now_to_the_clock(store, tmp_path, monkeypatch):
    from browser.live_writer import run_rows

    db = tmp_path / "live.duckdb"
    write_sample(db, days=2, seed=3, runs_per_day=5, end_utc=default_end_utc())
    monkeypatch.setenv(ENV_DB, str(db))
    served.hold_now(3600)
    held = served.window_now()
    with write_connection(db) as conn:
        write_batch(conn, *run_rows("fresh-0001", task_type="fresh", start_utc=views.utc_now()))
    assert served.window_now() > held


def test_a_negative_hold_is_refused():
    with pytest.raises(ValueError, match="the hold must be >= 0 seconds"):
        served.hold_now(-1)


def test_the_default_filters_are_the_sidebars_first_visit(store):
    served.hold_now(3600)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state[data.FILTERS_KEY] == served.default_filters()
    f = served.default_filters()
    assert f.end_utc - f.start_utc == dt.timedelta(days=14, microseconds=1)  # the end includes now


@pytest.mark.system  # seven AppTest renders
def test_after_the_warm_up_no_page_opens_a_reader_on_its_first_visit(store, monkeypatch):
    served.warm_up(hold_s=3600)
    counter = _Counter(data.connect)
    monkeypatch.setattr(data, "connect", counter)
    for page in PAGES:
        at = AppTest.from_file(str(APP), default_timeout=60)
        if page != "overview":
            at.switch_page(f"app_pages/{page}.py")
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title[0].value
        assert counter.opened == 0, f"the {page} page read the store after the warm-up"


def test_a_warm_up_on_a_missing_store_logs_and_returns(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ENV_DB, str(tmp_path / "none.duckdb"))
    data.clear_cache()
    try:
        with caplog.at_level("INFO", logger=served.__name__):
            served.warm_up(hold_s=0)
    finally:
        data.clear_cache()
    assert "warm-up stopped" in caplog.text


def test_budgetlens_dashboard_serves_the_launcher_as_an_st_app():
    from streamlit.web.server.app_discovery import discover_asgi_app

    from budgetlens.cli import dashboard_cmd

    found = discover_asgi_app(dashboard_cmd.ENTRYPOINT)
    assert found.is_asgi_app and found.import_string == "serve:app"
