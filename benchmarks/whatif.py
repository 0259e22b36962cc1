"""Benchmark: the what-if for all task types on 100k and 1M generated runs (about 10 model calls
per run: 1M runs = 10M calls), the fast path beside its reference in the same run.

Stores come from ``benchmarks.queries.build_store`` (cached under ``$BUDGETLENS_BENCH_DIR``),
with ``run_totals`` filled as the writer would (the bulk generator inserts ``runs`` directly).
Timed, each on its own read-only connection as the CLI and the dashboard do, median of
``--repeat`` interleaved rounds (each round times every step once, so the fast path and its
reference share the machine's state):

- *replay*: one candidate budget (the presets at P95 x 1.5) for every task type: the full SQL
  replay (``whatif.replay``, the reference) and the fast one from per-run peaks
  (``whatif_peaks.replay_fast``);
- *evidence*: the plain and Kaplan–Meier baselines the presets rest on (``whatif.evidence``);
- *curve*: the trade-off curve, 21 multipliers 1.0–3.0 (``whatif.tradeoff``, full and fast);
- *page*: what the What-if page computes (``whatif.plan_for_target``: evidence, curve, presets
  and their replay; the fast one returns the 500 run rows the page shows), full and fast.

Before timing, the fast results are checked against the full ones (stopped and censored counts
of every multiplier and task type). Usage: ``python -m benchmarks.whatif [--sizes 100000 1000000]
[--repeat 3]``; writes the "whatif" section of BENCHMARKS.md. Target: the What-if page at 1M
runs / 10M calls in <= 2 s.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._report import machine, publish
from benchmarks.queries import build_store
from budgetlens.analysis import whatif, whatif_peaks
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, run_totals, sql, write_connection

log = logging.getLogger(__name__)

SIZES = (100_000, 1_000_000)
TARGET_S = 2.0


def with_run_totals(path: Path) -> Path:
    """Fill the store's ``run_totals`` (the writer's per-run aggregates of calls and events, which
    the replay reads) and the runs' call peaks from it when the bulk generator left it empty;
    the rest of ``runs`` stays as generated."""
    with read_connection(path) as conn:
        filled = conn.execute("SELECT count(*) FROM run_totals").fetchone()[0]
    if not filled:
        started = time.perf_counter()
        with write_connection(path) as conn:
            conn.execute(sql.DELETE_ALL_RUN_TOTALS)
            conn.execute(sql.INSERT_ALL_RUN_TOTALS)
            conn.execute(run_totals.FILL_RUN_PEAKS)  # the runs' call peaks the what-if reads
            conn.execute("CHECKPOINT")
        log.info("filled run_totals of %s in %.1f s", path, time.perf_counter() - started)
    return path


def _cpu_s() -> float:
    """CPU seconds of this process so far (DuckDB's worker threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


#: The rows of the What-if page's run list (``dashboard/app_pages/whatif.py``: ``SHOWN_RUNS``).
SHOWN_RUNS = 500
#: (step, label) in report order; "<step>_fast" beside "<step>_full" where both exist.
STEPS = (
    ("replay_full", "replay of one budget (P95 x 1.5), full SQL replay (reference)"),
    ("replay_fast", "replay of one budget, from per-run peaks"),
    ("evidence", "plain + Kaplan-Meier baselines (numpy KM)"),
    ("curve_full", "trade-off curve, 21 multipliers, full SQL replay (reference)"),
    ("curve_fast", "trade-off curve, 21 multipliers, from per-run peaks"),
    ("page_full", "What-if page (evidence + curve + replay), full replay (reference)"),
    ("page_fast", "What-if page, fast path"),
)


def _interleaved(path: Path, calls: dict[str, Callable], repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds per step over ``repeat`` rounds, every step once per round
    (on a machine shared with other work the CPU time is the steadier figure; wall time is
    what a user waits)."""
    walls: dict[str, list[float]] = {step: [] for step in calls}
    cpus: dict[str, list[float]] = {step: [] for step in calls}
    for _ in range(repeat):
        for step, call in calls.items():
            started, cpu = time.perf_counter(), _cpu_s()
            with read_connection(path) as conn:
                call(conn)
            walls[step].append(time.perf_counter() - started)
            cpus[step].append(_cpu_s() - cpu)
    figures = {step: statistics.median(values) for step, values in walls.items()}
    figures.update({f"{step}_cpu": statistics.median(values) for step, values in cpus.items()})
    return figures


def check_fast_equals_full(path: Path) -> None:
    """Raise AssertionError when the fast curve's counts differ from the full replay's."""
    f = Filters()
    with read_connection(path) as conn:
        ev = whatif.evidence(conn, f)
        fast = whatif.tradeoff(conn, f, ev)
        full = whatif.tradeoff(conn, f, ev, full_replay=True)
    columns = ["multiplier", "task_type", "runs", "stopped", "censored", "avoided_tokens"]
    if not fast[columns].astype(str).equals(full[columns].astype(str)):
        raise AssertionError(f"{path}: the fast curve differs from the full replay")


def time_whatif(path: Path, repeat: int) -> dict[str, float]:
    """Median seconds of every step (``STEPS``) on the store at ``path``."""
    f = Filters()
    with read_connection(path) as conn:
        ev = whatif.evidence(conn, f)
        calls = conn.execute("SELECT count(*) FROM model_calls").fetchone()[0]
    budget = whatif.Budget.from_presets(whatif.evidence_presets(ev, 1.5))
    figures = {"calls": float(calls), "load": os.getloadavg()[0]}
    steps: dict[str, Callable] = {
        "replay_full": lambda c: whatif.replay(c, f, budget),
        "replay_fast": lambda c: whatif_peaks.replay_fast(c, f, budget, run_limit=SHOWN_RUNS),
        "evidence": lambda c: whatif.evidence(c, f),
        "curve_full": lambda c: whatif.tradeoff(c, f, ev, full_replay=True),
        "curve_fast": lambda c: whatif.tradeoff(c, f, ev),
        "page_full": lambda c: whatif.plan_for_target(c, f, full_replay=True),
        "page_fast": lambda c: whatif.plan_for_target(c, f, run_limit=SHOWN_RUNS),
    }
    figures.update(_interleaved(path, steps, repeat))
    return figures


def report(figures: dict[int, dict[str, float]], repeat: int) -> str:
    sizes = sorted(figures)
    lines = [
        "## What-if replay",
        "",
        f"`python -m benchmarks.whatif` on {machine()}. Seconds, each step on its own read-only "
        f"connection, median of {repeat} interleaved rounds; stores generated by "
        "`benchmarks.queries` (about 10 model calls per run); every task type. The fast results "
        "were checked equal to the full replay's before timing.",
        "",
        "| step | "
        + " | ".join(f"{n:,} runs ({figures[n]['calls'] / 1e6:.1f}M calls)" for n in sizes)
        + " |",
        "|---" * (len(sizes) + 1) + "|",
    ]
    for step, label in STEPS:
        cells = []
        for n in sizes:
            cell = f"{figures[n][step]:.3f} (cpu {figures[n][step + '_cpu']:.3f})"
            if step.endswith("_fast"):
                cell += f", {figures[n][step] / figures[n][step[:-5] + '_full']:.2f}x full"
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    largest = sizes[-1]
    wall = figures[largest]["page_fast"]
    verdict = "met" if wall <= TARGET_S else "NOT met"
    loads = ", ".join(f"{figures[n]['load']:.1f}" for n in sizes)
    lines += [
        "",
        "Wall seconds, with the process's CPU seconds (DuckDB's threads included) in brackets; "
        f"1-minute load average at the start of each size: {loads} (on {os.cpu_count()} cores).",
        "",
        f"Target: the What-if page at {largest:,} runs in <= {TARGET_S:.0f} s: "
        f"**{verdict}** ({wall:.3f} s wall, {figures[largest]['page_fast_cpu']:.3f} s CPU; "
        f"{figures[largest]['page_full']:.3f} s with the full replay).",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    figures = {}
    for n in args.sizes:
        path = with_run_totals(build_store(n))
        check_fast_equals_full(path)
        figures[n] = time_whatif(path, args.repeat)
        log.info("%s runs: %s", f"{n:,}", {k: round(v, 3) for k, v in figures[n].items()})
    publish("whatif", report(figures, args.repeat), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
