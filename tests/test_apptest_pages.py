"""``_apptest.run_app`` opens a page with its first run on the page (as a browser opening
``/<page>`` does), not after a run of the Overview and a switch: both ways show the same
elements with the same values on every page, so the AppTests that open a page that way test what
they tested before."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from _apptest import APP, run_app
from browser.live_writer import task_runs, write_runs
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_DB
from budgetlens.store import write_connection

pytestmark = pytest.mark.system  # Streamlit AppTests: seconds each

PAGES = ("cost", "hit_rate", "baselines", "presets", "whatif", "runs")
#: The values that differ between two renders: the time a preset file was generated, and the
#: window's start ("now" minus the window), which moves on when the two renders straddle a minute.
_GENERATED = re.compile(r"generated_utc[^\n]*")
_WINDOW_START = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} → now")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """hot: 10 runs, 4 stopped by the budget; calm: 10 runs, 1 stopped, three days ago."""
    path = tmp_path_factory.mktemp("pages") / "pages.duckdb"
    start = (analysis.utc_now() - dt.timedelta(days=3)).replace(hour=9, minute=0, second=0, microsecond=0)
    batches = task_runs(start, dt.timedelta(minutes=7), {"hot": (10, 4), "calm": (10, 1)})
    with write_connection(path) as conn:
        write_runs(conn, batches)
    return path


def _shown(at: AppTest) -> list[tuple[str, str]]:
    """Every element of the main area and the sidebar, blocks walked in order: its kind and, where
    it has one, its value (charts and tables by kind: their data is checked by the pages' tests)."""
    out: list[tuple[str, str]] = []

    def walk(area: str, node) -> None:
        kind = type(node).__name__
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            out.append((f"{area}:{kind}", ""))
            for child in children.values():
                walk(area, child)
            return
        value = (
            "" if kind in ("PlotlyChart", "Dataframe", "UnknownElement") else repr(getattr(node, "value", ""))
        )
        value = _WINDOW_START.sub("(window start) → now", _GENERATED.sub("generated_utc", value))
        out.append((f"{area}:{kind}", value))

    walk("main", at.main)
    walk("sidebar", at.sidebar)
    return out


@pytest.mark.parametrize("page", PAGES)
def test_a_page_opened_first_shows_what_it_shows_after_the_overview_and_a_switch(store, monkeypatch, page):
    monkeypatch.setenv(ENV_DB, str(store))
    switched = AppTest.from_file(str(APP), default_timeout=60)
    switched.run()
    switched.switch_page(f"app_pages/{page}.py")
    switched.run()
    first = run_app(store, monkeypatch, page)
    assert not switched.exception and not first.exception
    assert len(_shown(first)) > 10  # the page rendered, not an empty or error page
    assert _shown(first) == _shown(switched)
