"""Benchmark: N collectors on one DuckLake, and the dashboard's page queries on a lake vs a file.

1. Ingest: a PostgreSQL server is started for the run (Debian's PostgreSQL, see
   ``tests/_postgres.py``); for each N in ``--collectors`` a fresh lake (local data directory)
   gets N ``budgetlens collector`` subprocesses, each with its own journal, and one sender
   thread per collector posts pre-encoded OTLP/protobuf requests (``--spans-per-request``
   distinct model-call spans each, real OTel SDK spans) for ``--seconds``. Figures: acknowledged
   spans/s per collector and their sum, the time the collectors take (SIGTERM) to load what they
   acknowledged, the stored spans/s over the whole run (window + drain), and the lake commits it
   caused (snapshots: stages and folds) per second.
2. Lag: ``--lag-collectors`` collectors (default 3) take requests of one run each for
   ``--seconds``; one of them is killed with -9 a third of the way in and started again on its
   journal. A reader polls the lake's ``runs`` every 0.25 s; lag = first seen - acknowledged,
   per request. Figures: p50, p95 and max lag, and whether every acknowledged run was stored.
3. Queries: the generated store of ``benchmarks.queries`` (``--runs`` runs, cached) is copied
   into a lake with ``budgetlens store copy``; every dashboard page's analysis calls are timed
   on both (median of ``--repeat`` rounds, each call on its own read connection).

Usage: ``python -m benchmarks.lake [--collectors 1 2 4] [--seconds 20] [--runs 1000000]``;
writes the "lake" section of BENCHMARKS.md (``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchmarks import queries
from benchmarks._lake_fleet import lag_round, request_bodies, start_collector, warm_collectors, warm_lake
from benchmarks._report import machine, publish
from budgetlens.store import latest_snapshot, read_connection, write_connection
from budgetlens.store.copy import copy_store
from budgetlens.store.lake import LAKE_ALIAS, close_all
from budgetlens.store.lake_compact import compact

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres import PostgresServer

log = logging.getLogger(__name__)


def _send(url: str, bodies: list[bytes], spans_per_request: int, until: float, acked: list[int]) -> None:
    session = requests.Session()
    headers = {"Content-Type": "application/x-protobuf"}
    for body in bodies:
        if time.monotonic() >= until:
            return
        while time.monotonic() < until:
            response = session.post(f"{url}/v1/traces", data=body, headers=headers, timeout=30)
            if response.status_code == 200:
                acked[0] += spans_per_request
                break
            time.sleep(0.05)  # 429/503: the collector's backlog is full


def ingest_round(pg: PostgresServer, n: int, seconds: float, spans_per_request: int, work: Path) -> dict:
    """One lake, ``n`` collectors, ``seconds`` of sending; the figures of that round."""
    lake = pg.location(f"bench_ingest_{n}", work / f"lake-{n}")
    pool = max(50, int(seconds * 40))  # requests per collector, more than one can take in the window
    bodies = [request_bodies(pool, spans_per_request, f"c{n}-{i}") for i in range(n)]
    warm_lake(lake)
    collectors = [start_collector(lake, work / f"journal-{n}-{i}") for i in range(n)]
    warm_collectors(lake, [url for _, url in collectors], spans_per_request)
    first_snapshot = latest_snapshot(lake) or 0
    acked = [[0] for _ in range(n)]
    started = time.monotonic()
    until = started + seconds
    senders = [
        threading.Thread(target=_send, args=(url, bodies[i], spans_per_request, until, acked[i]))
        for i, (_, url) in enumerate(collectors)
    ]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    window = time.monotonic() - started
    for process, _ in collectors:
        process.send_signal(signal.SIGTERM)
    for process, _ in collectors:
        process.wait(600)
    total = time.monotonic() - started
    with read_connection(lake) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT span_id) FROM model_calls WHERE NOT starts_with(run_id, 'warm-')"
        ).fetchone()
        fold_row = conn.execute("SELECT folds FROM lake_fold").fetchone()
    stored, distinct = (int(row[0]), int(row[1])) if row else (0, 0)
    commits = (latest_snapshot(lake) or 0) - first_snapshot
    folds = int(fold_row[0]) if fold_row else 0
    files_before = _data_files(lake)
    compact_started = time.perf_counter()
    with write_connection(lake) as conn:
        compact(conn, expire_older_than_s=0)
    compact_s = time.perf_counter() - compact_started
    files_after = _data_files(lake)
    close_all()
    return {
        "n": n,
        "rates": [a[0] / window for a in acked],
        "acked": sum(a[0] for a in acked),
        "stored": stored,
        "distinct": distinct,
        "drain_s": total - window,
        "stored_rate": stored / total,
        "commits_per_s": commits / total,
        "folds_per_s": folds / total,
        "compact_s": compact_s,
        "files": (files_before, files_after),
    }


def _data_files(lake: str) -> int:
    """Parquet data files of the lake's current snapshot (all budgetlens tables)."""
    with read_connection(lake) as conn:
        tables = [row[0] for row in conn.execute("SHOW TABLES").fetchall()]
        return sum(
            int(
                conn.execute(
                    "SELECT count(*) FROM ducklake_list_files(?, ?)", [LAKE_ALIAS, table]
                ).fetchone()[0]
            )
            for table in tables
        )


def query_round(pg: PostgresServer, runs: int, repeat: int, work: Path) -> dict:
    path = queries.build_store(runs)
    lake = pg.location("bench_queries", work / "lake-queries")
    started = time.perf_counter()
    result = copy_store(path, lake)
    copy_s = time.perf_counter() - started
    if not result.equal:
        raise RuntimeError(f"copy counts differ: {result}")
    file_pages = queries.time_pages(path, repeat)
    lake_pages = queries.time_pages(lake, repeat)  # type: ignore[arg-type]  (a lake location)
    close_all()
    return {
        "runs": runs,
        "copy_s": copy_s,
        "calls": result.source["model_calls"],
        "file": file_pages,
        "lake": lake_pages,
    }


def report(ingest: list[dict], lag: dict | None, pages: dict | None, args) -> str:
    lines = [
        "## DuckLake: collectors on one lake, page queries lake vs file",
        "",
        f"`python -m benchmarks.lake --collectors {' '.join(map(str, args.collectors))} --seconds {args.seconds:g} "
        f"--lag-collectors {args.lag_collectors} --lag-spans-per-s {args.lag_spans_per_s:g} --runs {args.runs}` "
        f"on {machine()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end; PostgreSQL 15 catalog on a unix socket and a local data "
        "directory on the same machine, collectors and senders sharing its cores.",
        "",
        "| collectors | acknowledged spans/s per collector | sum | drain after SIGTERM (s) | stored spans/s (window + drain) | lake commits/s (of which folds) | stored once | compact: s, data files before -> after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in ingest:
        per = ", ".join(f"{rate:,.0f}" for rate in r["rates"])
        once = (
            "yes" if r["stored"] == r["distinct"] == r["acked"] else f"{r['stored']} rows, {r['acked']} acked"
        )
        lines.append(
            f"| {r['n']} | {per} | {sum(r['rates']):,.0f} | {r['drain_s']:.1f} | {r['stored_rate']:,.0f} "
            f"| {r['commits_per_s']:.1f} ({r['folds_per_s']:.1f}) | {once} "
            f"| {r['compact_s']:.1f} s, {r['files'][0]} -> {r['files'][1]} |"
        )
    lines += [
        "",
        "Each collector stages its groups (insert-only commits, which never conflict) about once a second "
        "under load, and about one fold a second moves every collector's staged rows into the store "
        "(docs/store-and-ducklake-fleet.md); a collector acknowledges once its journal holds the spans, so "
        "the acknowledged sum runs ahead of the stored rate and the backlog drains after the window.",
    ]
    if lag:
        lines += [
            "",
            f"Lag with {lag['n']} collectors taking {lag['spans_per_s']:,.0f} spans/s in all, one killed "
            "with -9 a third of the way in and started again "
            f"(listening again after {lag['restart_s']:.1f} s): acknowledged -> in `runs`, over "
            f"{lag['acked']:,} requests of one run each: p50 {lag['p50']:.1f} s, p95 {lag['p95']:.1f} s, "
            f"max {lag['max']:.1f} s; acknowledged but never stored: {lag['unseen']}.",
        ]
    if pages:
        lines += [
            "",
            f"Page queries on {pages['runs']:,} runs ({pages['calls']:,} model calls; copied file -> lake in "
            f"{pages['copy_s']:.0f} s), seconds per page on a cold cache, median of {args.repeat}:",
            "",
            "| page | file | lake | lake/file |",
            "|---|---|---|---|",
        ]
        for page, file_s in pages["file"].items():
            lake_s = pages["lake"][page]
            lines.append(f"| {page} | {file_s:.3f} | {lake_s:.3f} | {lake_s / file_s:.1f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--collectors", type=int, nargs="*", default=[1, 2, 4], help="collector counts (none: skip)"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lag-collectors", type=int, default=3, help="collectors of the lag round (0: skip)")
    parser.add_argument("--lag-spans-per-s", type=float, default=1000.0, help="offered load of the lag round")
    parser.add_argument("--spans-per-request", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs for the page queries (0: skip)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="budgetlens-lake-bench-") as tmp, PostgresServer() as pg:
        work = Path(tmp)
        ingest = []
        for n in args.collectors:
            ingest.append(ingest_round(pg, n, args.seconds, args.spans_per_request, work))
            log.info("%d collectors: %s", n, ingest[-1])
        lag = None
        if args.lag_collectors:
            lag = lag_round(
                pg, args.lag_collectors, args.seconds, args.spans_per_request, args.lag_spans_per_s, work
            )
            log.info("lag: %s", lag)
        pages = query_round(pg, args.runs, args.repeat, work) if args.runs else None
        if pages:
            log.info("pages: %s", pages)
    publish("lake", report(ingest, lag, pages, args), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
