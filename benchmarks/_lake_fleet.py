"""The fleet helpers of ``benchmarks.lake``: request bodies, collector subprocesses, warm-up,
and the lag round (collectors killed and restarted while a reader watches the lake)."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from budgetlens import semconv as sc
from budgetlens.config import ENV_JOURNAL_DIR
from budgetlens.store import read_connection, write_connection
from budgetlens.store.lake import close_all

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _postgres import PostgresServer

log = logging.getLogger(__name__)


def request_bodies(count: int, spans_per_request: int, tag: str, runs_per_request: int = 10) -> list[bytes]:
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


def start_collector(lake: str, journal: Path) -> tuple[subprocess.Popen, str]:
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


def _send_timed(
    slot: list, bodies: list[tuple[str, bytes]], until: float, every_s: float, acked: dict[str, float]
) -> None:
    """Post ``(run id, body)`` requests, one every ``every_s`` seconds, to the collector whose URL
    is ``slot[0]`` (it changes when the collector is restarted) until ``until``; ``acked[run id]``
    = monotonic time of the 200."""
    session = requests.Session()
    headers = {"Content-Type": "application/x-protobuf"}
    due = time.monotonic()
    for run_id, body in bodies:
        due += every_s
        time.sleep(max(0.0, due - time.monotonic()))
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


def lag_round(
    pg: PostgresServer, n: int, seconds: float, spans_per_request: int, spans_per_s: float, work: Path
) -> dict:
    """``n`` collectors for ``seconds`` at ``spans_per_s`` spans/s in all, one request = one run;
    collector 0 is killed with -9 at a third of the window and started again on its journal.
    Lag of each acknowledged run."""
    lake = pg.location("bench_lag", work / "lake-lag")
    pool = max(50, int(seconds * 40))
    bodies = [
        list(
            zip((f"lag-{i}-{k}" for k in range(pool)), request_bodies(pool, spans_per_request, f"lag-{i}", 1))
        )
        for i in range(n)
    ]
    warm_lake(lake)
    collectors = [start_collector(lake, work / f"journal-lag-{i}") for i in range(n)]
    warm_collectors(lake, [url for _, url in collectors], spans_per_request)
    slots = [[url] for _, url in collectors]
    acked: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()
    poller = threading.Thread(target=_poll_runs, args=(lake, "lag-", seen, stop))
    poller.start()
    started = time.monotonic()
    until = started + seconds
    every_s = spans_per_request * n / spans_per_s
    senders = [
        threading.Thread(target=_send_timed, args=(slots[i], bodies[i], until, every_s, acked))
        for i in range(n)
    ]
    for sender in senders:
        sender.start()
    time.sleep(seconds / 3)
    killed = collectors[0][0]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(10)
    restart_started = time.monotonic()
    collectors[0] = start_collector(lake, work / "journal-lag-0")
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
        "spans_per_s": spans_per_s,
    }


def warm_lake(lake: str) -> None:
    """Create and migrate the lake before collectors start (their first start then skips the
    migrations, which all of them would otherwise race for)."""
    with write_connection(lake):
        pass
    close_all()


def warm_collectors(lake: str, urls: list[str], spans_per_request: int) -> None:
    """One request to each collector, waited for until its run shows in ``runs`` (attached,
    staged and folded once), so the timed window starts warm."""
    bodies = request_bodies(len(urls), spans_per_request, "warm", 1)
    for url, body in zip(urls, bodies):
        response = requests.post(
            f"{url}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}, timeout=30
        )
        response.raise_for_status()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with read_connection(lake) as conn:
            row = conn.execute("SELECT count(*) FROM runs WHERE starts_with(run_id, 'warm-')").fetchone()
        if row and row[0] >= len(urls):
            return
        time.sleep(0.25)
    raise RuntimeError("the collectors did not store their warm-up requests within 120 s")
