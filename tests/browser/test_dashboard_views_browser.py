"""What only a browser sees (issue 11), in headless Chromium at 1280 px on real ``budgetlens
dashboard`` subprocesses: bars of a one-day store are bars (not hairlines), the alarm banner links
to the task type's pages, a run opens from its URL, the filters live in the URL, a window that
leaves runs out says how many and shows them in one click, KPI tiles are not cut off at 1280 px,
an empty store says how to send data, and no page asks any host but 127.0.0.1 for anything."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

from browser.chromium import HEADLESS_FLAGS
from browser.live_writer import run_rows, task_runs, write_runs
from browser.quiet import until_quiet
from browser.test_dashboard_browser import (
    CHART,
    CHROMEDRIVER,
    CHROMIUM,
    EXCEPTION,
    PAGES,
    READY_TIMEOUT_S,
    RUNNING,
    dashboard,
)
from budgetlens.store import write_connection

pytestmark = [pytest.mark.browser, pytest.mark.system]

WIDTH_PX = 1280
#: The narrowest a day's bar may be on a one-day store (Plotly's hairline default is ~1 px).
MIN_BAR_PX = 20


@pytest.fixture(scope="module")
def browser():
    """Chromium at 1280 px with the performance log on (every network request it makes)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: install chromium and chromium-driver", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="budgetlens-chromium-")
    for flag in (*HEADLESS_FLAGS, f"--window-size={WIDTH_PX},1100", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(READY_TIMEOUT_S)
    yield driver
    driver.quit()


def _settled(driver, chart: bool = True) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, READY_TIMEOUT_S, poll_frequency=0.2)
    wait.until(lambda d: d.find_elements(By.TAG_NAME, "h1") or d.find_elements(By.CSS_SELECTOR, EXCEPTION))
    if chart:
        wait.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, CHART) or d.find_elements(By.CSS_SELECTOR, EXCEPTION)
        )
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, RUNNING))
    until_quiet(driver)
    assert not [e.text for e in driver.find_elements(By.CSS_SELECTOR, EXCEPTION)]


def _body(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _write(db: Path, batches) -> Path:
    with write_connection(db) as conn:
        write_runs(conn, batches)  # one commit (as one write_batch per run would store them)
    return db


@pytest.fixture(scope="module")
def one_day_dashboard(tmp_path_factory):
    """Every run on one day, an hour ago: hot (6 of 20 stopped: 30 %) and calm (2 of 20)."""
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
    batches = task_runs(start, dt.timedelta(seconds=20), {"hot": (20, 6), "calm": (20, 2)})
    db = _write(tmp_path_factory.mktemp("oneday") / "oneday.duckdb", batches)
    with dashboard(db) as base:
        yield base


@pytest.fixture(scope="module")
def old_dashboard(tmp_path_factory):
    """A store whose runs stopped arriving 40 days ago (a dead collector, an old import)."""
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=40)
    batches = [run_rows(f"old-{i:03d}", start_utc=start + dt.timedelta(hours=i)) for i in range(12)]
    db = _write(tmp_path_factory.mktemp("old") / "old.duckdb", batches)
    with dashboard(db) as base:
        yield base


def _bar_widths(driver, title: str) -> list[float]:
    """Pixel widths of the bars of the chart titled ``title``."""
    return driver.execute_script(
        """
        const title = arguments[0];
        for (const plot of document.querySelectorAll('.js-plotly-plot')) {
            const t = plot.querySelector('.gtitle');
            if (t && t.textContent.startsWith(title)) {
                return [...plot.querySelectorAll('.barlayer .point path')]
                    .map(p => p.getBoundingClientRect().width);
            }
        }
        return null;
        """,
        title,
    )


def test_a_one_day_store_draws_day_bars_not_hairlines(browser, one_day_dashboard):
    browser.get(one_day_dashboard)
    _settled(browser)
    for title in ("Cost per day by task type", "Finished runs per day"):
        widths = _bar_widths(browser, title)
        assert widths, f"no bars in {title!r}"
        assert min(widths) >= MIN_BAR_PX, (title, widths)
    browser.get(f"{one_day_dashboard}/cost?window=14d")
    _settled(browser)
    for title in ("Cost per day by model", "Cost per day by task type"):
        widths = _bar_widths(browser, title)
        assert widths and min(widths) >= MIN_BAR_PX, (title, widths)


def test_the_alarm_banner_links_to_the_task_types_baseline_preset_and_runs(browser, one_day_dashboard):
    from selenium.webdriver.common.by import By

    browser.get(one_day_dashboard)
    _settled(browser)
    links = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a")}
    wanted = {"Baseline of hot": "/baselines", "Preset of hot": "/presets", "Runs of hot": "/runs"}
    for text, path in wanted.items():
        href = next((h for t, h in links.items() if text in t), None)
        assert href, (text, list(links))
        url = urllib.parse.urlparse(href)
        assert url.path.endswith(path) and urllib.parse.parse_qs(url.query)["task_type"] == ["hot"]
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "a") if "Baseline of hot" in a.text)
    link.click()
    _settled(browser)
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Baselines")
    assert "task: hot" in _body(browser)  # the filter came along


def test_a_run_opens_from_its_url(browser, one_day_dashboard):
    from selenium.webdriver.common.by import By

    browser.get(f"{one_day_dashboard}/runs?run=hot-0003")
    _settled(browser)
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "h3")]
    assert "Run hot-0003" in headings
    assert "budget_tokens" in _body(browser)


def test_filters_live_in_the_url_and_survive_a_page_change(browser, one_day_dashboard):
    from selenium.webdriver.common.by import By

    browser.get(f"{one_day_dashboard}/hit_rate?window=7d&tz=Asia/Tokyo&task_type=calm")
    _settled(browser)
    body = _body(browser)
    assert "task: calm" in body and "times and days in Asia/Tokyo" in body
    tiles = {
        m.find_element(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]').text: m.find_element(
            By.CSS_SELECTOR, '[data-testid="stMetricValue"]'
        ).text
        for m in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')
    }
    assert tiles["Budget stops"] == "2"  # calm only
    nav = next(
        a
        for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')
        if "Cost" in a.text
    )
    nav.click()
    _settled(browser)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(browser.current_url).query)
    assert query["task_type"] == ["calm"] and query["window"] == ["7d"] and query["tz"] == ["Asia/Tokyo"]


def test_a_window_that_leaves_runs_out_says_so_and_shows_them_in_one_click(browser, old_dashboard):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(old_dashboard)
    _settled(browser, chart=False)
    body = _body(browser)
    assert "This window keeps 0 of 12 runs" in body and "newest run started 40 days ago" in body
    # The caption paints first; the button beside it once Chromium has loaded the button's code.
    button = WebDriverWait(browser, READY_TIMEOUT_S, poll_frequency=0.2).until(
        lambda d: next(
            (b for b in d.find_elements(By.TAG_NAME, "button") if "Show all 12 runs" in b.text), None
        )
    )
    button.click()
    _settled(browser)
    value = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')[0].text
    assert value == "12"
    assert "window=all" in browser.current_url


@pytest.fixture(scope="module")
def every_page(browser, one_day_dashboard) -> dict:
    """Every page opened once at 1280 px (the KPI tile and the network tests read the same visit):
    per page the tile texts cut off and whether it shows tiles, and every host any page asked."""
    from selenium.webdriver.common.by import By

    browser.get_log("performance")  # drop what earlier tests logged
    cut, tiles = {}, {}
    for page in PAGES:
        browser.get(f"{one_day_dashboard}/{'' if page == 'overview' else page}?run=hot-0001")
        _settled(browser, chart=page != "presets")
        cut[page] = browser.execute_script(
            """
            return [...document.querySelectorAll(
                '[data-testid="stMetricLabel"] p, [data-testid="stMetricValue"] div, [data-testid="stMetricValue"]')]
              .filter(e => e.scrollWidth > e.clientWidth + 1)
              .map(e => e.textContent);
            """
        )
        tiles[page] = bool(browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'))
    time.sleep(2)
    hosts = set()
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = urllib.parse.urlparse(message["params"]["request"]["url"])
            if url.scheme in ("http", "https", "ws", "wss"):
                hosts.add(url.hostname)
    return {"cut": cut, "tiles": tiles, "hosts": hosts}


def test_kpi_tiles_are_not_cut_off_at_1280_px(every_page):
    for page in PAGES:
        assert every_page["cut"][page] == [], (page, every_page["cut"][page])
        if page in ("overview", "cost", "hit_rate", "runs"):  # the pages with KPI tiles
            assert every_page["tiles"][page], page


def test_an_empty_store_says_how_to_send_data(browser, tmp_path):
    db = _write(tmp_path / "empty.duckdb", [])
    with dashboard(db) as base:
        browser.get(base)
        _settled(browser, chart=False)
        body = _body(browser)
    assert "No runs in this store yet" in body and "budgetlens collector" in body
    assert "clear a filter" not in body.lower()


def test_no_page_requests_anything_from_a_host_other_than_127_0_0_1(every_page):
    assert every_page["hosts"] == {"127.0.0.1"}, every_page["hosts"]
