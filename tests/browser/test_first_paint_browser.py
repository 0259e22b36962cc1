"""First numbers first, in headless Chromium (issue 24): on every page's first visit of a session
its numbers (a KPI tile's value, or its first table) are on screen before its charts are even
asked for, and they show when the charts' code never arrives. Order, never wall time: a script
installed before each page's own (CDP ``Page.addScriptToEvaluateOnNewDocument``) notes the
browser's clock when the numbers, the charts' code request (Plotly's chunk, by resource timing)
and a drawn chart first appear; the test compares those instants."""

from __future__ import annotations

import time

import pytest

from browser import chromium
from budgetlens.sample import ensure_demo_store

pytestmark = [pytest.mark.browser, pytest.mark.system]  # reason: a dashboard subprocess and Chromium

#: Every page with its url path ("" is Overview) and charts on its first visit (the Runs page
#: draws them on a run's view: ``?run=`` the newest run).
PAGES = {"overview": "", "cost": "cost", "hit_rate": "hit_rate", "baselines": "baselines",
         "presets": "presets", "whatif": "whatif", "runs": "runs?run="}  # fmt: skip
TIMEOUT_S = 120.0
#: Notes ``performance.now()`` of each first: "numbers" (a tile's value with a digit, or a
#: table), "chart" (a drawn Plotly chart), "plotly_code" (the request of Plotly's chunk).
MARKS_JS = r"""
window.__paint = {};
const P = window.__paint;
const mark = (name) => { if (!(name in P)) P[name] = performance.now(); };
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (/PlotlyChart\.[^/]*\.js/.test(entry.name)) P.plotly_code ??= entry.startTime;
  }
}).observe({ type: "resource", buffered: true });
new MutationObserver(() => {
  if ([...document.querySelectorAll('[data-testid="stMetricValue"]')].some((e) => /[0-9]/.test(e.textContent))
      || document.querySelector('[data-testid="stDataFrame"], [data-testid="stTable"]')) mark("numbers");
  if (document.querySelector('.js-plotly-plot .main-svg')) mark("chart");
}).observe(document, { childList: true, subtree: true, characterData: true });
"""
#: True once the page is complete: no run going, no placeholder of the first paint left.
SETTLED_JS = """
return document.querySelector('h1') !== null && document.querySelector(
  '[data-testid="stStatusWidgetRunningIcon"], [class*="st-key-paint_pending_"]') === null;
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo store (``budgetlens demo``'s) served by ``budgetlens dashboard``, in Chromium."""
    work = tmp_path_factory.mktemp("first-paint")
    ensure_demo_store(work / "demo.duckdb")
    with chromium.session(work / "demo.duckdb", 1280, 1000, work / "chromium", timeout_s=TIMEOUT_S) as (
        base,
        driver,
    ):
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MARKS_JS})
        yield base, driver, _newest_run(work / "demo.duckdb")


def _newest_run(db) -> str:
    from budgetlens.store import read_connection

    with read_connection(db) as conn:
        return conn.execute("SELECT run_id FROM runs ORDER BY start_utc DESC LIMIT 1").fetchone()[0]


def _until(driver, script: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if driver.execute_script(script):
            return
        time.sleep(0.1)
    raise AssertionError(f"the page did not get there within {TIMEOUT_S:.0f} s")


def _open(driver, url: str) -> None:
    driver.get("about:blank")  # a fresh document: a new Streamlit session, marks from zero
    driver.get(url)


@pytest.mark.parametrize("page", PAGES)
def test_a_pages_numbers_are_on_screen_before_its_charts_are_asked_for(demo, page):
    base, driver, newest_run = demo
    _open(driver, f"{base}/{PAGES[page]}" + (newest_run if page == "runs" else ""))
    _until(driver, "return window.__paint && 'chart' in window.__paint")
    _until(driver, SETTLED_JS)
    marks = driver.execute_script("return window.__paint")
    assert {"numbers", "plotly_code", "chart"} <= set(marks), marks
    assert marks["numbers"] < marks["plotly_code"] < marks["chart"], marks


def test_the_numbers_show_when_the_charts_code_never_arrives(demo):
    base, driver, _ = demo
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*PlotlyChart.*"]})
    try:
        _open(driver, f"{base}/")
        _until(driver, "return window.__paint && 'numbers' in window.__paint")
        tiles = driver.execute_script(
            "return [...document.querySelectorAll('[data-testid=\"stMetricValue\"]')].map(e => e.textContent)"
        )
        assert "chart" not in driver.execute_script("return window.__paint")
    finally:
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        driver.execute_cdp_cmd("Network.disable", {})
    assert len(tiles) >= 4 and all(any(c.isdigit() or c == "—" for c in tile) for tile in tiles[:4]), tiles
