"""The dashboard in a real browser: ``budgetlens dashboard`` as a subprocess on a free port,
Debian's headless Chromium driven by selenium. Every page renders a Plotly chart without a
Streamlit exception (screenshots go to tests/browser/screenshots/), and with auto-refresh on the
Overview shows runs that another process keeps committing into the same file, with no lock
error on the way. Never skipped: without Chromium the tests fail and say what to install."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import find_free_port

from browser.chromium import HEADLESS_FLAGS, stop, wait_healthy
from browser.live_writer import null_heavy_batches, run_rows, write_runs
from browser.quiet import until_quiet
from budgetlens.config import ENV_DB
from budgetlens.sample import default_end_utc, write_sample
from budgetlens.store import write_connection

pytestmark = pytest.mark.browser
log = logging.getLogger(__name__)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HERE = Path(__file__).resolve().parent
SCREENSHOTS = HERE / "screenshots"
PAGES = ("overview", "cost", "hit_rate", "baselines", "presets", "whatif", "runs")
CHART = ".js-plotly-plot .main-svg"
EXCEPTION = '[data-testid="stException"], .stException'
RUNNING = '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stStatusWidget"] img'
READY_TIMEOUT_S = 60
#: What a lock conflict would look like on the page (DuckDB's messages, a raw IO error).
LOCK_ERROR = re.compile(r"\block(ed)?\b|IO Error|IOException|Conflicting", re.IGNORECASE)


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: install the Debian packages chromium and "
            "chromium-driver (`bash .ci/test` does)",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="budgetlens-chromium-")
    for flag in (*HEADLESS_FLAGS, "--disable-quic", "--window-size=1500,1250", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(READY_TIMEOUT_S)
    yield driver
    driver.quit()


@contextlib.contextmanager
def dashboard(db: Path):
    """Run ``budgetlens dashboard --db DB --port <free>``; yield its base URL; stop it."""
    port = find_free_port()
    env = {**os.environ, ENV_DB: "/nonexistent-the-flag-must-win.duckdb"}
    process = subprocess.Popen(
        [sys.executable, "-m", "budgetlens.cli", "dashboard", "--db", str(db), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, process, READY_TIMEOUT_S)
        except RuntimeError as error:
            stderr = process.stderr.read() if process.stderr and process.poll() is not None else ""
            raise AssertionError(f"{error}: {stderr}") from None
        yield base
    finally:
        stop(process, timeout_s=10)


def _settled(driver, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait for a rendered Plotly chart and for the script run to finish."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout_s, poll_frequency=0.2)
    wait.until(
        lambda d: d.find_elements(By.CSS_SELECTOR, CHART) or d.find_elements(By.CSS_SELECTOR, EXCEPTION)
    )
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, RUNNING))
    until_quiet(driver)  # let Plotly finish drawing the last chart before the screenshot


@pytest.fixture(scope="module")
def sample_dashboard(tmp_path_factory):
    db = tmp_path_factory.mktemp("browser") / "sample.duckdb"
    write_sample(db, days=14, seed=5, runs_per_day=40, end_utc=default_end_utc())  # up to today
    with dashboard(db) as base:
        yield base, db


def _newest_run(db: Path) -> str:
    from budgetlens.store import read_connection

    with read_connection(db) as conn:
        return conn.execute("SELECT run_id FROM runs ORDER BY start_utc DESC LIMIT 1").fetchone()[0]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_a_plotly_chart_without_an_exception(browser, sample_dashboard, page):
    from selenium.webdriver.common.by import By

    run = "?run=" + _newest_run(sample_dashboard[1]) if page == "runs" else ""
    browser.get(f"{sample_dashboard[0]}/{'' if page == 'overview' else page}{run}")
    _settled(browser)
    errors = [e.text for e in browser.find_elements(By.CSS_SELECTOR, EXCEPTION)]
    assert not errors, errors
    assert browser.find_elements(By.CSS_SELECTOR, CHART)
    assert "Page not found" not in browser.find_element(By.TAG_NAME, "body").text
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"{page}.png"))


def test_overview_also_answers_at_slash_overview(browser, sample_dashboard):
    from selenium.webdriver.common.by import By

    browser.get(f"{sample_dashboard[0]}/overview")
    _settled(browser)
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Page not found" not in body
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Overview")
    assert not browser.find_elements(By.CSS_SELECTOR, EXCEPTION)


@pytest.fixture(scope="module")
def null_heavy_dashboard(tmp_path_factory):
    db = tmp_path_factory.mktemp("browser") / "nulls.duckdb"
    with write_connection(db) as conn:
        write_runs(conn, null_heavy_batches())  # one commit (as one write_batch per run would store them)
    with dashboard(db) as base:
        yield base


@pytest.mark.parametrize("page", PAGES)
def test_null_heavy_data_renders_every_page_without_an_exception_or_none(browser, null_heavy_dashboard, page):
    from selenium.webdriver.common.by import By

    run = "?run=foreign-0001&" if page == "runs" else "?"
    browser.get(f"{null_heavy_dashboard}/{'' if page == 'overview' else page}{run}window=all")
    _settled(browser)
    assert not [e.text for e in browser.find_elements(By.CSS_SELECTOR, EXCEPTION)]
    assert browser.find_elements(By.CSS_SELECTOR, CHART)
    body = browser.find_element(By.TAG_NAME, "body").text
    assert not re.search(r"\bNone\b|<NA>|\bnan\b", body)  # tables are canvas: see AppTests
    SCREENSHOTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"nulls_{page}.png"))


def _runs_tile(driver) -> int | None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        values = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')
        text = values[0].text if values else ""
    except StaleElementReferenceException:
        return None
    return int(text.replace(",", "")) if re.fullmatch(r"[\d,]+", text) else None


def test_live_overview_shows_new_runs_while_another_process_writes(browser, tmp_path):
    from selenium.webdriver.common.by import By

    db = tmp_path / "live.duckdb"
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
    with write_connection(db) as conn:
        write_runs(conn, [run_rows(f"seed-{index}", start_utc=start) for index in range(5)])
    writer = subprocess.Popen(
        [sys.executable, str(HERE / "live_writer.py"), str(db), "--count", "400", "--interval", "0.25"],
        stdout=subprocess.PIPE,
        text=True,
    )
    committed: queue.Queue = queue.Queue()

    def count_commits() -> None:  # one line per committed run
        for _ in writer.stdout or ():
            committed.put(time.monotonic())

    threading.Thread(target=count_commits, daemon=True).start()
    try:
        with dashboard(db) as base:
            browser.get(f"{base}/?refresh=5")
            _settled(browser)
            first = _runs_tile(browser)
            assert first is not None and first >= 5
            seen, latencies = [first], []
            for _ in range(3):  # three times: a run committed now shows up within a bounded wait
                while committed.qsize() < seen[-1] - 5 + 2:
                    time.sleep(0.05)
                target, target_at = 5 + committed.qsize(), time.monotonic()
                deadline = target_at + 30
                while time.monotonic() < deadline:
                    body = browser.find_element(By.TAG_NAME, "body").text
                    assert not LOCK_ERROR.search(body), body
                    assert not browser.find_elements(By.CSS_SELECTOR, EXCEPTION)
                    value = _runs_tile(browser)
                    if value is not None:
                        seen.append(value)
                    if value is not None and value >= target:
                        break
                    time.sleep(0.2)
                assert seen[-1] >= target, f"runs tile stuck at {seen[-5:]}, wanted {target}"
                latencies.append(time.monotonic() - target_at)
            log.info(
                "new runs showed %s s after their commit (tile values %s)",
                [round(x, 1) for x in latencies],
                sorted(set(seen)),
            )
            assert seen == sorted(seen)  # never dropped back to an empty or smaller tile
            SCREENSHOTS.mkdir(exist_ok=True)
            browser.save_screenshot(str(SCREENSHOTS / "live_overview.png"))
    finally:
        writer.kill()
        writer.wait()
