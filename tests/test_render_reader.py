"""One reader of the store per page render (issue 25): the loaders of one render share the reader
``data`` opens at the first cache miss, closed when the render ends; a render that hits the cache
opens none. Counted with a wrapper around ``data.connect`` (the real reader underneath)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views
from budgetlens.config import ENV_DB
from budgetlens.dashboard import data

pytestmark = pytest.mark.system  # Streamlit AppTests on a generated sample store: seconds each

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


class _Counter:
    """``data.connect`` with its opens and closes counted."""

    def __init__(self, real):
        self.real = real
        self.opened = 0
        self.closed = 0

    @contextlib.contextmanager
    def __call__(self, *args, **kwargs):
        with self.real(*args, **kwargs) as conn:
            self.opened += 1
            try:
                yield conn
            finally:
                self.closed += 1


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_copy) -> Path:
    path = tmp_path_factory.mktemp("render") / "sample.duckdb"
    return sample_store_copy(path, days=5, seed=4, runs_per_day=12)


@pytest.fixture
def counted(sample_store, monkeypatch) -> Iterator[_Counter]:
    monkeypatch.setenv(ENV_DB, str(sample_store))
    counter = _Counter(data.connect)
    monkeypatch.setattr(data, "connect", counter)
    data.clear_cache()
    yield counter
    data.clear_cache()


def test_the_loaders_of_one_render_share_one_reader_closed_after(counted):
    f = views.Filters()
    with data.render_reader() as reader:
        data.data_extent()
        data.overview(f)
        data.baselines(f, by_model=True)
        plan = data.whatif_plan(f, 0.05, "auto", run_limit=10)
        assert counted.opened == 1 and counted.closed == 0
    assert counted.opened == counted.closed == reader.opened == 1
    assert len(plan.replay.runs) <= 10 and not plan.curve.empty


def test_a_render_that_hits_the_cache_opens_no_reader(counted):
    f = views.Filters()
    data.overview(f)  # outside a render: one reader for the call
    assert counted.opened == counted.closed == 1
    with data.render_reader():
        data.overview(f)
    assert counted.opened == 1


def test_a_failing_query_drops_the_shared_reader_and_the_next_loader_reopens(counted):
    import duckdb

    def failing(conn):
        raise duckdb.IOException("disk hiccup")

    with data.render_reader() as reader:
        with pytest.raises(duckdb.IOException):
            data._cached_call("test.failing", str(data.db_path()), data.data_version(), (), (), failing)
        data.data_extent()
    assert reader.opened == 2 and counted.opened == counted.closed == 2


@pytest.mark.system  # Streamlit AppTest
def test_a_whatif_page_render_opens_one_reader(counted, sample_store):
    """A page's first visit in a session is two script runs (``_paint``: the numbers first,
    then at once the run that draws the held charts); each run opens one reader, closed when it
    ends."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert counted.opened == counted.closed == 2  # the Overview and the sidebar: one reader a run
    at.switch_page("app_pages/whatif.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= 1  # the trade-off curve rendered
    assert counted.opened == counted.closed == 4  # the What-if visit: one more reader a run
