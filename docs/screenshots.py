"""Screenshots of every dashboard page at 1280 px, for the README: ``docs/<page>.png``.

Usage: ``python docs/screenshots.py [--width 1280]``. Builds the demo store the way ``budgetlens
demo`` does (the committed sample, moved to end now: ``ensure_demo_store``) in a temporary
directory, starts ``budgetlens dashboard`` on a free port, and drives Debian's
headless Chromium (``/usr/bin/chromium``, ``/usr/bin/chromedriver``) through the pages; the Runs
page opens the run that used the most tokens. Nothing is fetched from outside the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # the checkout root: run as ``python docs/screenshots.py``

from budgetlens.sample import ensure_demo_store  # noqa: E402
from budgetlens.store import read_connection  # noqa: E402
from tests.browser import chromium  # noqa: E402  (the capture harness shared with benchmarks/first_paint.py)

PAGES = ("overview", "cost", "hit_rate", "baselines", "presets", "whatif", "runs")
TIMEOUT_S = 90


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

    workdir = Path(tempfile.mkdtemp(prefix="budgetlens-shots-"))
    db = workdir / "sample.duckdb"
    ensure_demo_store(db)
    with read_connection(db) as conn:
        run_id = conn.execute("SELECT run_id FROM runs ORDER BY total_tokens DESC LIMIT 1").fetchone()[0]
    profile = workdir / "chromium"
    with chromium.session(db, args.width, args.height, profile, ["--hide-scrollbars"], TIMEOUT_S) as (
        base,
        driver,
    ):
        for page in PAGES:
            path = "" if page == "overview" else page
            query = f"?run={run_id}" if page == "runs" else ""
            driver.get(f"{base}/{path}{query}")
            _settle(driver)
            target = DOCS / f"{page}.png"
            driver.save_screenshot(str(target))
            print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
