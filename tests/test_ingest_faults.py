"""Issue 14 against real subprocess collectors: a torn journal segment then another kill -9, and
a store held open by other processes' readers. 0 acknowledged spans lost in both."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens.ingest.queue import journal_dir
from budgetlens.otlp import PROTOBUF
from budgetlens.store import StoreError, connect, read_connection, write_connection

pytestmark = pytest.mark.system

_READER = """
import sys, time, duckdb
deadline = time.monotonic() + 30
while True:
    try:
        conn = duckdb.connect(sys.argv[1], read_only=True)
        break
    except duckdb.Error:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
conn.execute("SELECT count(*) FROM model_calls").fetchall()
print("holding", flush=True)
sys.stdin.read()
"""


def _batches(prefix: int, count: int, size: int):
    spans = SpanRecorder().chat_calls(count * size, prefix * 1_000_000)
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def _send(url: str, batches) -> list[str]:
    """Export ``batches``; the span ids of those acknowledged (200)."""
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
    acknowledged = []
    for batch in batches:
        if exporter.export(batch) == SpanExportResult.SUCCESS:
            acknowledged += [format(span.context.span_id, "016x") for span in batch]
    exporter.shutdown()
    return acknowledged


def _health(url: str) -> dict:
    return requests.get(f"{url}/healthz", timeout=5).json()


def _wait_loaded(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _health(url)["backlog_spans"]:
        assert time.monotonic() < deadline, f"still not loaded: {_health(url)}"
        time.sleep(0.05)


def _stored(db_path) -> set[str]:
    with read_connection(db_path) as conn:
        return {row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall()}


@contextlib.contextmanager
def _readers(python: str, db_path, count: int = 4):
    """``count`` processes each holding a read-only DuckDB connection on ``db_path`` (a notebook,
    a second dashboard, a ``duckdb -readonly`` shell) until the block ends."""
    processes = [
        subprocess.Popen(
            [python, "-c", _READER, str(db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    try:
        for process in processes:
            assert process.stdout.readline().strip() == "holding"
        yield processes
    finally:
        for process in processes:
            process.stdin.close()
            process.wait(10)


def _kill_9(process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)


def _tear_a_new_segment(journal) -> None:
    """What a crash leaves when it tears the first record of a new segment: the next segment
    file, named after the next sequence number, holding part of a record header."""
    header = struct.Struct("<IIQ")
    last_seq = 0
    for segment in sorted(journal.glob("*.seg")):
        data, offset = segment.read_bytes(), 0
        while offset + header.size <= len(data):
            length, _, seq = header.unpack_from(data, offset)
            last_seq, offset = seq, offset + header.size + length
    if (journal / "loaded").exists():
        last_seq = max(last_seq, int((journal / "loaded").read_text()))
    (journal / f"{last_seq + 1:016d}.seg").write_bytes(header.pack(4096, 0, last_seq + 1)[:11])


def test_a_torn_first_record_then_a_second_kill_9_loses_nothing_acknowledged(tmp_path, python):
    """Issue 14, finding 1, with real kill -9: after a crash tore the first record of a segment,
    the next collector acknowledges spans (readers hold the store, so they wait in the journal),
    is killed again, and the third start loads every one of them."""
    db_path = tmp_path / "store.duckdb"
    acknowledged: list[str] = []
    with collector_process(python, db_path) as (process, url):
        acknowledged += _send(url, _batches(1, 10, 50))
        _wait_loaded(url)
        _kill_9(process)
    _tear_a_new_segment(journal_dir(db_path))
    with _readers(python, db_path), collector_process(python, db_path) as (process, url):
        second = _send(url, _batches(2, 20, 50))
        assert _health(url)["backlog_spans"] >= len(second)  # all waiting in the journal
        _kill_9(process)
    assert len(second) == 20 * 50
    acknowledged += second
    with collector_process(python, db_path) as (process, url):
        _wait_loaded(url)
    missing = set(acknowledged) - _stored(db_path)
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"


def test_readers_holding_the_store_do_not_stop_intake_and_every_row_lands_after(tmp_path, python):
    """Issue 14, finding 4, with issue 25's store process: four read-only connections hold the
    store before the collector starts; exports keep getting 200 (the journal absorbs them),
    /healthz (503 while nothing loads) and the lag metric show the true backlog and its age, and
    once the readers let go the collector takes the file and every row is loaded; then it holds
    the file, and a direct read-only open is refused while reads through the collector succeed."""
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path):
        pass  # the schema, so the readers have a store to hold
    with collector_process(python, db_path) as (process, url):
        with _readers(python, db_path):
            batches = _batches(2, 30, 100)
            acknowledged = _send(url, batches[:15])
            time.sleep(1.5)  # the backlog ages while the readers hold the file
            acknowledged += _send(url, batches[15:])
            deadline = time.monotonic() + 30  # a load attempt waits up to 2 s for the file
            while not (held := _health(url))["store_error"] and time.monotonic() < deadline:
                time.sleep(0.1)
            metrics = requests.get(f"{url}/metrics", timeout=5).text
        _wait_loaded(url)  # the readers let go: the collector takes the file and loads
        with connect(db_path) as conn:  # through the collector, which now holds the file
            through = {row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall()}
        with pytest.raises(StoreError, match="locked"), read_connection(db_path, timeout_s=0.5):
            pass
    assert len(acknowledged) == 30 * 100  # nothing refused
    assert held["status"] == f"store unavailable: {held['store_error']}"  # no ok beside an error
    assert held["backlog_spans"] >= 30 * 100 and held["backlog_bytes"] > 0
    assert held["loader_lag_s"] >= 1.5
    assert held["store_error"] and "lock" in held["store_error"].lower()
    (lag,) = [
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("budgetlens_ingest_loader_lag_seconds ")
    ]
    assert lag >= 1.5
    assert through == set(acknowledged)
    assert _stored(db_path) == set(acknowledged)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_decode_workers_do_not_outlive_a_killed_collector(tmp_path, python):
    """After kill -9 the collector's decode workers and resource tracker exit too
    (they would otherwise keep their memory and, orphaned, never notice)."""
    from benchmarks.ingest import make_body

    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (process, url):
        body = make_body(1)  # over 256 KiB: decoded in a worker
        assert requests.post(f"{url}/v1/traces", data=body, headers={"Content-Type": PROTOBUF}).ok
        helpers = _descendants(process.pid)
        assert len(helpers) >= 2  # the resource tracker + at least one worker
        _kill_9(process)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in helpers if _alive(pid)]
