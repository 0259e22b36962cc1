"""Benchmark: the shared ledger's reserve+settle latency and throughput, 1 / 8 / 32 processes.

For each ledger and each N in ``--workers``, N worker processes (``python -m benchmarks.ledger
--worker``) each make ``--ops`` reserve+settle pairs on one ``SpendTracker`` daily window
(``reserve(0.001 USD)`` then ``settle(..., 0.0009 USD)``, distinct call ids), all against the
same window of the ledger, after a common start time (interpreter start-up is not measured).
Ledgers, all in the same run:

- ``in-process``: the default tracker, one per process (nothing shared: the reference);
- ``collector``: ``budgetlens collector`` serving its ledger on 127.0.0.1 (HTTP, SQLite file);
- ``postgresql``: a PostgreSQL server started for the run (Debian's PostgreSQL, as
  ``tests/_postgres.py``), extra ``fleet``.

Figures per ledger and N: pairs/s over all processes (total pairs / wall time from the common
start to the last worker's end), and the p50 / p95 / p99 latency of one pair in ms; the ratio to
the in-process tracker's p50 at the same N.

Usage: ``python -m benchmarks.ledger [--workers 1 8 32] [--ops 2000] [--ledgers in-process
collector postgresql]``; writes the "ledger" section of BENCHMARKS.md (``--no-write``: print
only). Measure on a quiet machine (style habit 22): the figures of a loaded one are noise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks._report import machine, publish

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

LEDGERS = ("in-process", "collector", "postgresql")


def worker(ops: int, start_at: float, ledger: str) -> None:
    """One process: wait for ``start_at`` (epoch s), make ``ops`` reserve+settle pairs, print
    one JSON line: {"start", "end", "latencies_ns"}."""
    from budgetlens import SpendTracker

    tracker = SpendTracker({"daily": 1e12}, ledger=ledger)
    tracker.reserve(0.001, call_id=f"warm-{os.getpid()}")  # connect before the clock starts
    tracker.settle(0.001, 0.0009, call_id=f"warm-{os.getpid()}")
    time.sleep(max(0.0, start_at - time.time()))
    latencies = []
    begin = time.time()
    for i in range(ops):
        call_id = f"{os.getpid()}-{i}"
        t0 = time.perf_counter_ns()
        tracker.reserve(0.001, call_id=call_id)
        tracker.settle(0.001, 0.0009, call_id=call_id)
        latencies.append(time.perf_counter_ns() - t0)
    print(json.dumps({"start": begin, "end": time.time(), "latencies_ns": latencies}), flush=True)


def run_workers(count: int, ops: int, ledger: str, env: dict) -> dict:
    """``count`` worker processes on ``ledger``; returns pairs/s and latency percentiles (ms)."""
    start_at = time.time() + 3.0 + 0.15 * count  # every worker has started and connected by then
    argv = [sys.executable, "-m", "benchmarks.ledger", "--worker", str(ops), str(start_at), ledger]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parent.parent)
        for _ in range(count)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"a {ledger} worker failed (exit {proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    latencies = sorted(ns / 1e6 for r in results for ns in r["latencies_ns"])
    wall = max(r["end"] for r in results) - max(start_at, min(r["start"] for r in results))
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"pairs_s": len(latencies) / wall, "p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


@contextlib.contextmanager
def ledger_url(name: str, workdir: Path) -> Iterator[str]:
    """The ``BUDGETLENS_LEDGER`` value of ``name``, with its server running."""
    if name == "in-process":
        yield "memory"
    elif name == "postgresql":
        from urllib.parse import quote

        from _postgres import PostgresServer

        with PostgresServer() as pg:
            pg.createdb("ledger")
            yield f"postgresql://{pg.user}@/ledger?host={quote(str(pg.dir), safe='')}&port={pg.port}"
    elif name == "collector":
        from _collector_helpers import collector_process

        with collector_process(sys.executable, workdir / "bench.duckdb") as (_, url):
            yield url
    else:
        raise ValueError(f"unknown ledger {name!r}; use {LEDGERS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 8, 32], help="process counts")
    parser.add_argument("--ops", type=int, default=2000, help="reserve+settle pairs per process")
    parser.add_argument("--ledgers", nargs="+", default=list(LEDGERS), choices=LEDGERS)
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md")
    parser.add_argument("--worker", nargs=3, metavar=("OPS", "START_AT", "LEDGER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(int(args.worker[0]), float(args.worker[1]), args.worker[2])
        return 0
    figures: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory(prefix="budgetlens-ledger-bench-") as tmp:
        for name in ("in-process", *[n for n in args.ledgers if n != "in-process"]):
            with ledger_url(name, Path(tmp)) as url:
                env = dict(os.environ, BUDGETLENS_LEDGER=url, BUDGETLENS_LEDGER_LEASE_S="30")
                for count in args.workers:
                    figures[name, count] = run_workers(count, args.ops, url, env)
                    print(f"{name} x{count}: {figures[name, count]}", file=sys.stderr)
    load = os.getloadavg()[0]
    lines = [
        "## Shared ledger (`benchmarks/ledger.py`)",
        "",
        f"Machine: {machine()}; load average {load:.2f} at the end. {args.ops:,} reserve+settle pairs per "
        "process on one daily window (distinct call ids), processes started together; latency of one pair.",
        "",
        "| ledger | processes | pairs/s (all) | p50 ms | p95 ms | p99 ms | p50 vs in-process |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, count), f in figures.items():
        ratio = f["p50"] / figures["in-process", count]["p50"]
        lines.append(
            f"| {name} | {count} | {f['pairs_s']:,.0f} | {f['p50']:.3f} | {f['p95']:.3f} | {f['p99']:.3f} "
            f"| {ratio:,.0f}x |"
        )
    publish("ledger", "\n".join(lines), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
