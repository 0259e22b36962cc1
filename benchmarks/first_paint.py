"""Benchmark: each dashboard page's first numbers in headless Chromium, on the demo store (issue 24),
beside the floor: the smallest Streamlit app that shows a number, served the same way.

A demo store is built the way ``budgetlens demo`` builds it (the committed sample, moved to end
now) in a temporary directory, ``budgetlens dashboard`` is started on a free port, and so is the
floor (``benchmarks/first_paint_floor.py``: one ``st.metric``, run by ``streamlit run`` with the
dashboard's options); Debian's headless Chromium (``/usr/bin/chromium`` driven by
``/usr/bin/chromedriver``, as the browser tests) opens the floor and every page by its URL,
interleaved (each round: the floor, then every page), each load a fresh Streamlit session. Per
load:

- **first numbers**: seconds from the request until the page shows a number of its own: a KPI
  tile's value with a digit in it, a table, or a drawn Plotly chart (whichever comes first);
- **settled**: seconds until the page is complete: nothing running (no running indicator, no
  skeleton) and no placeholder of a first paint left (``dashboard/app_pages/_paint.py``);
- **where the time goes**, from the browser's own clock (``TIMELINE_JS``: Navigation Timing and
  marks that a script installed before the page's own notes, ``MARKS_JS``): *HTML* (request to
  the HTML's last byte), *client start* (to the websocket open: the JS bundle fetched, parsed and
  run), *script* (to the websocket message that carries the first numbers: the script run up to
  them), *render* (to the numbers in the DOM: the client draws every element before them, loading
  their code) and *paint* (to the next frame drawn).

Round 1 meets cold caches (the first visit of each page after the server started); the later
rounds' median is the warm figure. The target is first numbers within 1 s on a quiet machine;
page / floor (warm) is the share of it that is the dashboard's own.

Usage: ``python -m benchmarks.first_paint [--rounds 3] [--pages overview cost ...] [--no-write]``;
writes the "first-paint" section of BENCHMARKS.md (``--no-write``: print only). Measure alone
(style habit 22): figures of a loaded machine are noise; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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
#: The floor's row name and its Streamlit script.
FLOOR = "floor (one st.metric)"
FLOOR_APP = Path(__file__).resolve().parent / "first_paint_floor.py"
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
#: Installed before every document's own scripts (CDP ``Page.addScriptToEvaluateOnNewDocument``):
#: notes ``performance.now()`` at the websocket's open and at each message (with its bytes as
#: text, until the numbers show), when the numbers are first in the DOM (FIRST_NUMBERS_JS's test,
#: tables and tiles) with the first tile's value, and two animation frames later (painted).
MARKS_JS = r"""
(() => {
  const M = window.__firstPaint = { messages: [] };
  const Native = window.WebSocket;
  class Watched extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('open', () => { M.ws_open ??= performance.now(); });
      this.addEventListener('message', (event) => {
        if (M.numbers !== undefined) return;
        const at = performance.now();
        const entry = [at, ''];
        M.messages.push(entry);
        Promise.resolve(event.data instanceof Blob ? event.data.arrayBuffer() : event.data)
          .then((body) => { entry[1] = typeof body === 'string' ? body : new TextDecoder('latin1').decode(body); });
      });
    }
  }
  window.WebSocket = Watched;
  const check = () => {
    if (M.numbers !== undefined) return;
    const tile = [...document.querySelectorAll('[data-testid="stMetricValue"]')]
      .find((e) => /[0-9]/.test(e.textContent));
    const table = document.querySelector('[data-testid="stDataFrame"], [data-testid="stTable"]');
    if (!tile && !table) return;
    M.numbers = performance.now();
    M.needle = tile ? tile.textContent.trim() : '"index_columns"';  // a table: its Arrow schema's pandas metadata
    requestAnimationFrame(() => requestAnimationFrame(() => { M.painted = performance.now(); }));
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true, characterData: true });
})();
"""
#: The phases of one load in ms of the page's clock (``MARKS_JS``' marks, Navigation Timing).
TIMELINE_JS = """
const M = window.__firstPaint || {};
const nav = performance.getEntriesByType('navigation')[0];
const carrier = (M.messages || []).find(([, text]) => M.needle && text.includes(M.needle));
return { html: nav.responseEnd, started: M.ws_open, delta: carrier ? carrier[0] : null,
         numbers: M.numbers, painted: M.painted };
"""
#: Phase columns: (name, mark the phase ends at); each starts where the one before ended.
PHASES = (
    ("HTML", "html"),
    ("client start", "started"),
    ("script", "delta"),
    ("render", "numbers"),
    ("paint", "painted"),
)


@dataclass
class Load:
    """One fresh load: seconds to first numbers and to settled, each phase's seconds."""

    first: float
    settled: float
    phases: dict[str, float | None] = field(default_factory=dict)


def _until(driver, script: str, started: float) -> float:
    """Seconds from ``started`` until ``script`` returns true in the page (polled every POLL_S)."""
    deadline = started + TIMEOUT_S
    while time.perf_counter() < deadline:
        if driver.execute_script(script):
            return time.perf_counter() - started
        time.sleep(POLL_S)
    raise TimeoutError(f"the page did not get there within {TIMEOUT_S:.0f} s")


def _phases(marks: dict[str, float | None]) -> dict[str, float | None]:
    """Seconds of each of PHASES from the page's marks (ms); None where a mark is missing."""
    phases: dict[str, float | None] = {}
    before: float | None = 0.0
    for name, mark in PHASES:
        at = marks.get(mark)
        phases[name] = None if at is None or before is None else (at - before) / 1000
        before = at
    return phases


def measure_page(driver, url: str, settles: bool = True) -> Load:
    """One fresh load of ``url``: first numbers, settled (``settles``: the page has a title to
    wait for; else the first numbers), and the phases (``TIMELINE_JS``)."""
    driver.get("about:blank")
    started = time.perf_counter()
    driver.get(url)
    first = _until(driver, FIRST_NUMBERS_JS, started)
    _until(driver, "return window.__firstPaint && window.__firstPaint.painted !== undefined", started)
    phases = _phases(driver.execute_script(TIMELINE_JS))
    if not settles:
        return Load(first, first, phases)
    time.sleep(0.5)  # a rerun that has not started yet would pass for "settled"
    return Load(first, max(first, _until(driver, SETTLED_JS, started) - 0.5), phases)


@contextlib.contextmanager
def floor_app(db: Path) -> Iterator[str]:
    """Serve FLOOR_APP with the dashboard's ``streamlit run`` options; yield its base URL."""
    from budgetlens.cli.dashboard_cmd import streamlit_command

    port = chromium.free_port()
    argv, env = streamlit_command(db, "127.0.0.1", port, entrypoint=FLOOR_APP)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        chromium.wait_healthy(base, process, TIMEOUT_S)
        yield base
    finally:
        chromium.stop(process)


def run(pages: list[str], rounds: int, width: int) -> tuple[dict[str, list[Load]], int]:
    """The floor and every page in ``pages``, ``rounds`` times, interleaved; (per row its loads, runs)."""
    from budgetlens.sample import ensure_demo_store
    from budgetlens.store import read_connection

    workdir = Path(tempfile.mkdtemp(prefix="budgetlens-first-paint-"))
    db = workdir / "demo.duckdb"
    ensure_demo_store(db)
    with read_connection(db) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    figures: dict[str, list[Load]] = {name: [] for name in (FLOOR, *pages)}
    with (
        floor_app(db) as floor,
        chromium.session(db, width, 1000, workdir / "chromium", timeout_s=TIMEOUT_S) as (base, driver),
    ):
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MARKS_JS})
        for number in range(rounds):
            for name in figures:
                if name == FLOOR:
                    load = measure_page(driver, f"{floor}/", settles=False)
                else:
                    load = measure_page(driver, f"{base}/{PAGES[name]}")
                figures[name].append(load)
                split = ", ".join(f"{phase} {_seconds(value)}" for phase, value in load.phases.items())
                print(
                    f"round {number + 1} {name}: first numbers {load.first:.2f} s, "
                    f"settled {load.settled:.2f} s ({split})"
                )
    return figures, runs


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(figures: dict[str, list[Load]], runs: int, load: str) -> str:
    """The BENCHMARKS.md section for ``figures`` (``run``'s result; the floor's row first)."""
    lines = [
        "## First paint (`benchmarks/first_paint.py`)",
        "",
        f"`python -m benchmarks.first_paint` on {machine()}, load average {load} at the start; "
        f"the demo store ({runs:,} runs, 14 days ending now), headless Chromium at 1280 px, a fresh "
        "session per load. Seconds from the request to the page's first numbers (a KPI tile's "
        "value, a table or a drawn chart) and until nothing runs; round 1 is cold, warm is the "
        "median of the later rounds. The floor is one `st.metric` served by `streamlit run` with "
        "the dashboard's options, loaded in the same rounds: what Streamlit's client start costs "
        "here. Target: first numbers <= 1 s.",
        "",
        "| page | first numbers, cold (s) | first numbers, warm (s) | warm / floor | settled, cold (s) "
        "| settled, warm (s) |",
        "|---|---|---|---|---|---|",
    ]
    floor_warm = statistics.median(load.first for load in (figures[FLOOR][1:] or figures[FLOOR]))
    for name, loads in figures.items():
        warm = loads[1:] or loads
        first_warm = statistics.median(load.first for load in warm)
        lines.append(
            f"| {name} | {loads[0].first:.2f} | {first_warm:.2f} | {first_warm / floor_warm:.2f} | "
            f"{loads[0].settled:.2f} | {statistics.median(load.settled for load in warm):.2f} |"
        )
    lines += [
        "",
        "Where the warm first numbers' time goes (median seconds per phase, the browser's clock): "
        "HTML = request to the HTML's last byte; client start = to the websocket open (the JS "
        "bundle fetched, parsed and run); script = to the websocket message carrying the first "
        "numbers; render = to the numbers in the DOM; paint = to the next frame drawn.",
        "",
        "| page | " + " | ".join(phase for phase, _ in PHASES) + " |",
        "|---|" + "---|" * len(PHASES),
    ]
    for name, loads in figures.items():
        warm = loads[1:] or loads
        cells = [_seconds(_median([load.phases.get(phase) for load in warm])) for phase, _ in PHASES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
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
