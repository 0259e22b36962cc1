"""kill -9 of the collector while the SDK exporter sends: every acknowledged span is stored.

An acknowledged span is in the collector's journal; DuckDB has it once the loader ran, at the
latest after the next start (which replays the journal), so the check restarts the collector.
The collector listens first and replays in its loader thread (it serves while it replays), so
the check waits for the backlog to reach 0 without any SIGTERM: the replay alone loads it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens.store import read_connection

pytestmark = pytest.mark.system


def _batches(count: int, size: int):
    spans = SpanRecorder().chat_calls(count * size)
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def _send_until_killed(url: str, batches, acknowledged: list, stop: threading.Event):
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=2)
    for batch in batches:
        if stop.is_set():
            return
        if exporter.export(batch) == SpanExportResult.SUCCESS:
            acknowledged.extend(format(span.context.span_id, "016x") for span in batch)


def _backlog(url: str) -> int:
    """Rows acknowledged (journaled) but not yet loaded into DuckDB."""
    return requests.get(f"{url}/healthz", timeout=5).json()["backlog_spans"]


def _wait_for_empty_backlog(url: str, timeout_s: float) -> int:
    """Poll /healthz until the backlog is 0 or ``timeout_s`` passed; the last backlog seen."""
    deadline = time.monotonic() + timeout_s
    while (backlog := _backlog(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return backlog


def test_kill_9_loses_no_acknowledged_span(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    acknowledged: list[str] = []
    all_batches = _batches(count=80, size=100)
    rounds = ((all_batches[:40], False), (all_batches[40:], True))
    for round_batches, while_loading in rounds:  # kill, restart on the file, kill while loading
        before = len(acknowledged)
        stop = threading.Event()
        with collector_process(python, db_path) as (process, url):
            sender = threading.Thread(
                target=_send_until_killed, args=(url, round_batches, acknowledged, stop)
            )
            sender.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                len(acknowledged) < before + 500 or (while_loading and _backlog(url) == 0)
            ):
                time.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)  # mid-stream: requests are in flight
            process.wait(10)
            stop.set()
            sender.join(60)
        assert len(acknowledged) >= before + 500
    with collector_process(python, db_path) as (process, url):  # the start replays the journal
        assert _wait_for_empty_backlog(url, 60) == 0
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    with read_connection(db_path) as conn:
        stored = {row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall()}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} acknowledged spans are not in the store"
    assert len(stored) < len(all_batches) * 100  # the kills did cut the stream


def test_sigterm_finishes_in_flight_requests_commits_and_exits(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    acknowledged: list[str] = []
    stop = threading.Event()
    with collector_process(python, db_path) as (process, url):
        sender = threading.Thread(
            target=_send_until_killed, args=(url, _batches(count=30, size=100), acknowledged, stop)
        )
        sender.start()
        while len(acknowledged) < 300 and sender.is_alive():
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal after its graceful shutdown: exit status is -SIGTERM
        assert process.wait(30) in (0, -signal.SIGTERM)
        stop.set()
        sender.join(60)
        errors = process.stderr.read()
    assert "Traceback" not in errors and "uncommitted" not in errors
    with read_connection(db_path) as conn:
        stored = {row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall()}
    assert len(acknowledged) >= 300 and set(acknowledged) <= stored
