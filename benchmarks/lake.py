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
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchmarks import queries
from benchmarks._report import machine, publish
from budgetlens import semconv as sc
from budgetlens.config import ENV_JOURNAL_DIR
from budgetlens.store import latest_snapshot, read_connection, write_connection
from budgetlens.store.copy import copy_store
from budgetlens.store.lake import LAKE_ALIAS, close_all, compact

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres import PostgresServer

log = logging.getLogger(__name__)


def _bodies(count: int, spans_per_request: int, tag: str, runs_per_request: int = 10) -> list[bytes]:
    """``count`` OTLP/protobuf request bodies of distinct model-call spans (real SDK spans),
    ``runs_per_request`` runs in each (run ids ``<tag>-<n>``)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("benchmarks.lake")
    for index in range(count * spans_per_request):
        with tracer.start_as_current_span("chat gpt-4o") as span:
            span.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                    sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                    sc.GEN_AI_USAGE_INPUT_TOKENS: 1000 + index % 500,
                    sc.GEN_AI_USAGE_OUTPUT_TOKENS: 100,
                    sc.BUDGET_RUN_ID: f"{tag}-{index // max(1, spans_per_request // runs_per_request)}",
                    sc.BUDGET_TASK_TYPE: "bench",
                }
            )
    spans = list(memory.get_finished_spans())
    return [
        encode_spans(spans[i : i + spans_per_request]).SerializeToString()
        for i in range(0, len(spans), spans_per_request)
    ]


def _start_collector(lake: str, journal: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, **{ENV_JOURNAL_DIR: str(journal)})
    process = subprocess.Popen(
        [sys.executable, "-m", "budgetlens.cli", "collector", "--db", lake, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    ready = select.select([process.stdout], [], [], 120)[0]
    line = process.stdout.readline() if ready else ""
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"collector did not start: {line!r}")
    return process, line.rsplit(" ", 1)[1].strip()


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
    bodies = [_bodies(pool, spans_per_request, f"c{n}-{i}") for i in range(n)]
    collectors = [_start_collector(lake, work / f"journal-{n}-{i}") for i in range(n)]
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
        row = conn.execute("SELECT count(*), count(DISTINCT span_id) FROM model_calls").fetchone()
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


def _send_timed(slot: list, bodies: list[tuple[str, bytes]], until: float, acked: dict[str, float]) -> None:
    """Post ``(run id, body)`` requests to the collector whose URL is ``slot[0]`` (it changes when
    the collector is restarted) until ``until``; ``acked[run id]`` = monotonic time of the 200."""
    session = requests.Session()
    headers = {"Content-Type": "application/x-protobuf"}
    for run_id, body in bodies:
        while time.monotonic() < until:
            try:
                response = session.post(f"{slot[0]}/v1/traces", data=body, headers=headers, timeout=10)
            except requests.RequestException:  # killed, not yet started again
                time.sleep(0.1)
                continue
            if response.status_code == 200:
                acked[run_id] = time.monotonic()
                break
            time.sleep(0.05)
        if time.monotonic() >= until:
            return


def _poll_runs(lake: str, prefix: str, seen: dict[str, float], stop: threading.Event) -> None:
    """Every 0.25 s, note when each run id starting with ``prefix`` first shows in ``runs``."""
    while not stop.is_set():
        try:
            with read_connection(lake) as conn:
                rows = conn.execute(
                    "SELECT run_id FROM runs WHERE starts_with(run_id, ?)", [prefix]
                ).fetchall()
        except Exception as error:  # the lake not created yet, a catalog hiccup: poll again
            log.debug("poll: %s", error)
            rows = []
        now = time.monotonic()
        for (run_id,) in rows:
            seen.setdefault(run_id, now)
        stop.wait(0.25)


def lag_round(pg: PostgresServer, n: int, seconds: float, spans_per_request: int, work: Path) -> dict:
    """``n`` collectors for ``seconds``, one request = one run; collector 0 is killed with -9 at a
    third of the window and started again on its journal. Lag of each acknowledged run."""
    lake = pg.location("bench_lag", work / "lake-lag")
    pool = max(50, int(seconds * 40))
    bodies = [
        list(zip((f"lag-{i}-{k}" for k in range(pool)), _bodies(pool, spans_per_request, f"lag-{i}", 1)))
        for i in range(n)
    ]
    collectors = [_start_collector(lake, work / f"journal-lag-{i}") for i in range(n)]
    slots = [[url] for _, url in collectors]
    acked: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()
    poller = threading.Thread(target=_poll_runs, args=(lake, "lag-", seen, stop))
    poller.start()
    started = time.monotonic()
    until = started + seconds
    senders = [
        threading.Thread(target=_send_timed, args=(slots[i], bodies[i], until, acked)) for i in range(n)
    ]
    for sender in senders:
        sender.start()
    time.sleep(seconds / 3)
    killed = collectors[0][0]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(10)
    restart_started = time.monotonic()
    collectors[0] = _start_collector(lake, work / "journal-lag-0")
    restart_s = time.monotonic() - restart_started
    slots[0][0] = collectors[0][1]
    for sender in senders:
        sender.join()
    deadline = time.monotonic() + 120  # the collectors keep running: the lag includes the catch-up
    while time.monotonic() < deadline and not set(acked) <= set(seen):
        time.sleep(0.25)
    stop.set()
    poller.join()
    for process, _ in collectors:
        process.send_signal(signal.SIGTERM)
    for process, _ in collectors:
        process.wait(600)
    lags = sorted(seen[run] - at for run, at in acked.items() if run in seen)
    close_all()

    def quantile(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else float("nan")

    return {
        "n": n,
        "acked": len(acked),
        "unseen": len(set(acked) - set(seen)),
        "p50": quantile(0.5),
        "p95": quantile(0.95),
        "max": lags[-1] if lags else float("nan"),
        "restart_s": restart_s,
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
        f"--lag-collectors {args.lag_collectors} --runs {args.runs}` on {machine()}, load average "
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
            f"Lag with {lag['n']} collectors, one killed with -9 a third of the way in and started again "
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
            lag = lag_round(pg, args.lag_collectors, args.seconds, args.spans_per_request, work)
            log.info("lag: %s", lag)
        pages = query_round(pg, args.runs, args.repeat, work) if args.runs else None
        if pages:
            log.info("pages: %s", pages)
    publish("lake", report(ingest, lag, pages, args), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
