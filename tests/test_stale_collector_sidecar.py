"""A collector killed with -9 leaves ``<store>.collector.json`` behind: a zombie or a reused PID in
it must not pass for a running collector (breaker finding F1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from budgetlens.store.lock_holder import running_collector
from budgetlens.store.readers import discover, sidecar_paths
from tests._collector_helpers import SpanRecorder, collector_process, otlp_protobuf


def _sidecar(db_path: Path, pid: int, written_at: float) -> None:
    info, token = sidecar_paths(db_path)
    info.write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": pid}))
    token.write_text("t0ken")
    os.utime(info, (written_at, written_at))


def test_a_pid_that_started_after_the_sidecar_was_written_is_not_its_collector(tmp_path):
    db_path = tmp_path / "store.duckdb"
    _sidecar(db_path, os.getpid(), written_at=0.0)  # 1970: this process started long after
    assert discover(db_path) is None


def test_the_publisher_itself_is_still_found(tmp_path):
    db_path = tmp_path / "store.duckdb"
    _sidecar(db_path, os.getpid(), written_at=time.time())
    endpoint = discover(db_path)
    assert endpoint is not None and endpoint.url == "http://127.0.0.1:9"


@pytest.mark.system  # reason: starts a real collector subprocess and leaves it a zombie
def test_a_collector_killed_and_not_yet_reaped_does_not_block_the_next_start(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    recorder = SpanRecorder()
    body = otlp_protobuf(recorder.chat_calls(3, run_id="zombie-run"))
    first = subprocess.Popen(
        [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = first.stdout.readline().rsplit(" ", 1)[1].strip()
        answer = httpx.post(
            f"{url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}, timeout=60
        )
        assert answer.status_code == 200
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and Path(f"/proc/{first.pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
        ):
            time.sleep(0.05)
        assert Path(f"/proc/{first.pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        assert running_collector(db_path) is None
        with collector_process(python, db_path) as (process, _):  # raises when it does not start
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    finally:
        first.kill()
        first.wait(10)
    from budgetlens.store.connection import read_connection

    with read_connection(db_path) as conn:
        stored = conn.execute("SELECT count(*) FROM model_calls WHERE run_id = 'zombie-run'").fetchone()[0]
    assert stored == 3
