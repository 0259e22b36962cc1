"""The lag part of the ingest benchmark (``benchmarks.ingest``): bodies offered open-loop at a
rate to a fresh collector subprocess while a reader polls the store as the dashboard does
(``budgetlens.store.connect``: through the collector, which holds the file); p50/p95 of the time
from sending a body until its runs are queryable. ``busy_readers`` more readers can run
meanwhile, each querying for 0.4 s then pausing 0.05 s (issue 23's starvation case).

Usage: ``python -m benchmarks.ingest_lag [--rate 2000] [--seconds 10] [--busy-readers 4]``
(prints; ``benchmarks.ingest`` reports these figures in BENCHMARKS.md). Each collector gets one
warm-up body first, outside the timing (its time to loaded is printed as ``cold_s``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from benchmarks.otlp_bodies import SPANS_PER_BODY, make_body


def start_collector(db_path: Path) -> tuple[subprocess.Popen, str]:
    """Start ``budgetlens collector`` on ``db_path`` at a free port; (process, its base URL)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"collector did not start: {line}{process.stderr.read()}")
    return process, line.rsplit(" ", 1)[1].strip()


def _send_paced(url: str, bodies: list[bytes], rate_spans_s: float, sent_at: dict, failures: list) -> None:
    """POST ``bodies`` open-loop at ``rate_spans_s`` spans/s (4 client threads so a slow answer
    does not slow the offered rate); ``sent_at[seed]`` = when each body was sent (perf_counter)."""
    interval = SPANS_PER_BODY / rate_spans_s
    started = time.perf_counter()
    lock = threading.Lock()
    queue = list(enumerate(bodies))

    def client():
        session = requests.Session()
        while True:
            with lock:
                if not queue:
                    return
                index, body = queue.pop(0)
            delay = started + index * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent_at[index] = time.perf_counter()
            response = session.post(
                f"{url}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
            )
            if response.status_code != 200:
                failures.append(response.status_code)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _poll_queryable(db_path: Path, first_seed: int, count: int, seen_at: dict, stop: threading.Event):
    """Every 0.1 s, one short read-only query (as the dashboard does): when each body's runs
    became queryable (perf_counter), by body index."""
    from budgetlens.store import StoreMissing, connect

    while not stop.is_set() and len(seen_at) < count:
        try:
            with connect(db_path) as conn:
                rows = conn.execute(
                    "SELECT DISTINCT CAST(split_part(run_id, '-', 2) AS INTEGER) FROM run_records "
                    "WHERE run_id LIKE 'bench-%'"
                ).fetchall()
        except StoreMissing:
            rows = []
        now = time.perf_counter()
        for (seed,) in rows:
            index = seed - first_seed
            if 0 <= index < count:
                seen_at.setdefault(index, now)
        time.sleep(0.1)


def _busy_reader(db_path: Path, stop: threading.Event, queries: list) -> None:
    """Until ``stop``: query the store for 0.4 s (one query after another), pause 0.05 s."""
    from budgetlens.store import StoreMissing, connect

    while not stop.is_set():
        try:
            with connect(db_path) as conn:
                ends = time.perf_counter() + 0.4
                while time.perf_counter() < ends:
                    conn.execute(
                        "SELECT run_id, sum(input_tokens), sum(output_tokens) FROM model_calls "
                        "GROUP BY run_id ORDER BY 2 DESC LIMIT 20"
                    ).fetchall()
                    queries.append(1)
        except StoreMissing:
            pass
        time.sleep(0.05)


def _warm(url: str, body: bytes) -> float:
    """POST ``body`` to a collector that has just started and wait until its backlog is empty:
    seconds from sending it until its spans are in DuckDB (a fresh collector's first body
    waits for the start of its decode worker, its price data and the store's creation)."""
    started = time.perf_counter()
    requests.post(
        f"{url}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    ).raise_for_status()
    while requests.get(f"{url}/healthz").json()["backlog_spans"]:
        time.sleep(0.02)
    return time.perf_counter() - started


def lag_at_rate(
    rate_spans_s: float, seconds: float, busy_readers: int = 0, stated_cost: bool = True, warm: bool = True
) -> dict:
    """Offer ``rate_spans_s`` spans/s for ``seconds`` to a fresh collector (with
    ``busy_readers`` readers busy meanwhile; ``stated_cost``: as ``make_body``'s); p50/p95 of the time from sending a body to its
    spans being queryable in DuckDB (s), refused requests, and the busy readers' queries.
    ``warm``: one body shaped as the timed ones is sent and loaded first, outside the timing
    (as ``benchmarks.ingest``'s acknowledged rate does), so the figures are the steady lag, not
    the collector's start; its time to loaded is returned as ``cold_s`` (None without it)."""
    import statistics

    count = max(4, round(rate_spans_s * seconds / SPANS_PER_BODY))
    first_seed = 2 * 10**5
    bodies = [make_body(first_seed + i, stated_cost=stated_cost) for i in range(count)]
    sent_at: dict = {}
    seen_at: dict = {}
    failures: list = []
    queries: list = []
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "lag.duckdb"
        process, url = start_collector(db_path)
        try:
            cold = _warm(url, make_body(10**6, stated_cost=stated_cost)) if warm else None
            poller = threading.Thread(
                target=_poll_queryable, args=(db_path, first_seed, count, seen_at, stop)
            )
            poller.start()
            busy = [
                threading.Thread(target=_busy_reader, args=(db_path, stop, queries))
                for _ in range(busy_readers)
            ]
            for reader in busy:
                reader.start()
            _send_paced(url, bodies, rate_spans_s, sent_at, failures)
            deadline = time.perf_counter() + 120
            while len(seen_at) < len(sent_at) - len(failures) and time.perf_counter() < deadline:
                time.sleep(0.05)
            stop.set()
            poller.join()
            for reader in busy:
                reader.join()
        finally:
            process.terminate()
            process.wait(60)
    lags = sorted(seen_at[i] - sent_at[i] for i in seen_at if i in sent_at)
    quantiles = statistics.quantiles(lags, n=20, method="inclusive")
    return {
        "p50": statistics.median(lags),
        "p95": quantiles[18],
        "bodies": count,
        "refused": len(failures),
        "seen": len(lags),
        "reader_queries": len(queries),
        "cold_s": cold,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="span-to-queryable lag of a collector subprocess")
    parser.add_argument("--rate", type=float, default=2000.0, help="offered spans/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of offered load")
    parser.add_argument("--busy-readers", type=int, default=4, help="readers busy 0.4 s on, 0.05 s off")
    args = parser.parse_args(argv)
    for readers in (0, args.busy_readers):
        result = lag_at_rate(args.rate, args.seconds, busy_readers=readers)
        print(f"busy readers {readers}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
