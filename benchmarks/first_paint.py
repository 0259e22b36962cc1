"""Benchmark: each dashboard page's first numbers in headless Chromium, on the demo store (issue 24).

A demo store is built the way ``budgetlens demo`` builds it (the committed sample, moved to end
now) in a temporary directory, ``budgetlens dashboard`` is started on a free port, and Debian's
headless Chromium (``/usr/bin/chromium`` driven by ``/usr/bin/chromedriver``, as the browser
tests) opens every page by its URL, each load a fresh Streamlit session. Per page and round:

- **first numbers**: seconds from the request until the page shows a number of its own: a KPI
  tile's value with a digit in it, a table, or a drawn Plotly chart (whichever comes first);
- **settled**: seconds until the page is complete: nothing running (no running indicator, no
  skeleton) and no placeholder of a first paint left (``dashboard/app_pages/_paint.py``).

Round 1 meets cold caches (the first visit of each page after the server started); the later
rounds' median is the warm figure. The target is first numbers within 1 s on a quiet machine.

Usage: ``python -m benchmarks.first_paint [--rounds 3] [--pages overview cost ...] [--no-write]``;
writes the "first-paint" section of BENCHMARKS.md (``--no-write``: print only). Measure alone
(style habit 22): figures of a loaded machine are noise; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._report import machine, publish
from tests.browser import chromium  # the capture harness shared with docs/screenshots.py

#: URL path of every page (the entrypoint's ``url_path``; "" is Overview).
PAGES = {
    "overview": "",
    "cost": "cost",
    "hit_rate": "hit_rate",
    "baselines": "baselines",
    "presets": "presets",
    "whatif": "whatif",
    "runs": "runs",
}
TIMEOUT_S = 120.0
POLL_S = 0.02
#: JavaScript: true once the page shows a number of its own (see the module docstring).
FIRST_NUMBERS_JS = """
const tile = [...document.querySelectorAll('[data-testid="stMetricValue"]')]
  .some(e => /[0-9]/.test(e.innerText));
const table = document.querySelector('[data-testid="stDataFrame"], [data-testid="stTable"]');
const chart = document.querySelector('.js-plotly-plot .main-svg');
return Boolean(tile || table || chart);
"""
SETTLED_JS = """
return document.querySelector('h1') !== null && document.querySelector(
  '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stSkeleton"], '
  + '[class*="st-key-paint_pending_"]') === null;
"""


def _until(driver, script: str, started: float) -> float:
    """Seconds from ``started`` until ``script`` returns true in the page (polled every POLL_S)."""
    deadline = started + TIMEOUT_S
    while time.perf_counter() < deadline:
        if driver.execute_script(script):
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise TimeoutError(f"the page did not get there within {TIMEOUT_S:.0f} s")


def measure_page(driver, base: str, path: str) -> tuple[float, float]:
    """One fresh load of ``base/path``: (seconds to first numbers, seconds to settled)."""
    driver.get("about:blank")
    started = time.perf_counter()
    driver.get(f"{base}/{path}")
    first = _until(driver, FIRST_NUMBERS_JS, started)
    time.sleep(0.5)  # a rerun that has not started yet would pass for "settled"
    return first, max(first, _until(driver, SETTLED_JS, started) - 0.5)


def run(pages: list[str], rounds: int, width: int) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """Every page in ``pages``, ``rounds`` times; (per page the (first, settled) of each round, runs)."""
    from budgetlens.sample import ensure_demo_store
    from budgetlens.store import read_connection

    workdir = Path(tempfile.mkdtemp(prefix="budgetlens-first-paint-"))
    db = workdir / "demo.duckdb"
    ensure_demo_store(db)
    with read_connection(db) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    figures: dict[str, list[tuple[float, float]]] = {page: [] for page in pages}
    with chromium.session(db, width, 1000, workdir / "chromium", timeout_s=TIMEOUT_S) as (base, driver):
        for number in range(rounds):
            for page in pages:
                figures[page].append(measure_page(driver, base, PAGES[page]))
                first, settled = figures[page][-1]
                print(f"round {number + 1} {page}: first numbers {first:.2f} s, settled {settled:.2f} s")
    return figures, runs


def report(figures: dict[str, list[tuple[float, float]]], runs: int, load: str) -> str:
    """The BENCHMARKS.md section for ``figures`` (``run``'s result)."""
    lines = [
        "## First paint (`benchmarks/first_paint.py`)",
        "",
        f"`python -m benchmarks.first_paint` on {machine()}, load average {load} at the start; "
        f"the demo store ({runs:,} runs, 14 days ending now), headless Chromium at 1280 px, a fresh "
        "session per load. Seconds from the request to the page's first numbers (a KPI tile's "
        "value, a table or a drawn chart) and until nothing runs; round 1 is cold, warm is the "
        "median of the later rounds. Target: first numbers <= 1 s.",
        "",
        "| page | first numbers, cold (s) | first numbers, warm (s) | settled, cold (s) | settled, warm (s) |",
        "|---|---|---|---|---|",
    ]
    for page, rounds in figures.items():
        warm = rounds[1:] or rounds
        lines.append(
            f"| {page} | {rounds[0][0]:.2f} | {statistics.median(r[0] for r in warm):.2f} | "
            f"{rounds[0][1]:.2f} | {statistics.median(r[1] for r in warm):.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="loads of every page (default 3; round 1 is cold)"
    )
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES))
    parser.add_argument("--width", type=int, default=1280, help="window width in px (default 1280)")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    load = " / ".join(f"{value:.2f}" for value in os.getloadavg())
    figures, runs = run(args.pages, args.rounds, args.width)
    publish("first-paint", report(figures, runs, load), write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
