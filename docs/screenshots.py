"""Screenshots of every dashboard page at 1280 px, for the README: ``docs/<page>.png``.

Usage: ``python docs/screenshots.py [--width 1280]``. Builds the demo store the way ``budgetlens
demo`` does (the committed sample, moved to end now: ``ensure_demo_store``) in a temporary
directory, starts ``budgetlens dashboard`` on a free port, and drives Debian's
headless Chromium (``/usr/bin/chromium``, ``/usr/bin/chromedriver``) through the pages; the Runs
page opens the run that used the most tokens. Nothing is fetched from outside the machine.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from budgetlens.sample import ensure_demo_store
from budgetlens.store import read_connection

DOCS = Path(__file__).resolve().parent
PAGES = ("overview", "cost", "hit_rate", "baselines", "presets", "whatif", "runs")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(base: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the dashboard exited before it answered")
        try:
            with urllib.request.urlopen(base + "/_stcore/health", timeout=1) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("the dashboard did not answer /_stcore/health")


def _settle(driver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, TIMEOUT_S, poll_frequency=0.3)
    wait.until(lambda d: d.find_elements(By.TAG_NAME, "h1"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg"))
    wait.until(
        lambda d: (
            not d.find_elements(
                By.CSS_SELECTOR, '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stSkeleton"]'
            )
        )
    )
    time.sleep(3.0)  # Plotly's last draw


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1280, help="window width in px (default: 1280)")
    parser.add_argument("--height", type=int, default=1500, help="window height in px (default: 1500)")
    args = parser.parse_args(argv)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    workdir = Path(tempfile.mkdtemp(prefix="budgetlens-shots-"))
    db = workdir / "sample.duckdb"
    ensure_demo_store(db)
    with read_connection(db) as conn:
        run_id = conn.execute("SELECT run_id FROM runs ORDER BY total_tokens DESC LIMIT 1").fetchone()[0]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "budgetlens.cli", "dashboard", "--db", str(db), "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={args.width},{args.height}",
        f"--user-data-dir={workdir / 'chromium'}",
    ):
        options.add_argument(flag)
    driver = None
    try:
        _wait_healthy(base, process)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        for page in PAGES:
            path = "" if page == "overview" else page
            query = f"?run={run_id}" if page == "runs" else ""
            driver.get(f"{base}/{path}{query}")
            _settle(driver)
            target = DOCS / f"{page}.png"
            driver.save_screenshot(str(target))
            print(target)
    finally:
        if driver is not None:
            driver.quit()
        process.terminate()
        process.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
