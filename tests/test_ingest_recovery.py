"""The ingest path recovers: a journal failure, a store refusing rows, a failed replay at start,
a second collector on the same database, values the store cannot hold."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from budgetlens.ingest.journal import Journal, encode_batch
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import IngestQueue, journal_dir
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection

pytestmark = pytest.mark.system


def _calls(prefix: str, count: int):
    """``Mapped`` rows of ``count`` model-call spans of run ``prefix`` (real SDK spans)."""
    return map_request(encode_spans(SpanRecorder().chat_calls(count, 10, run_id=prefix)), price=False)


def _wait_loaded(queue: IngestQueue, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while queue.depth and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queue.depth == 0, f"{queue.depth} rows still not loaded"


def _stored_runs(db_path) -> dict:
    with read_connection(db_path) as conn:
        return dict(conn.execute("SELECT run_id, count(*) FROM model_calls GROUP BY run_id").fetchall())


def test_a_journal_write_failure_fails_that_request_and_the_next_one_is_journaled(db_path):
    queue = IngestQueue(db_path, load_interval_s=0.05).start()
    real_append = queue._journal.append
    calls = {"n": 0}

    def disk_full_once(payload):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(payload)

    queue._journal.append = disk_full_once
    try:
        with pytest.raises(OSError, match="No space left"):
            queue.submit(_calls("run-full", 2)).result(10)
        assert queue.alive and queue.depth == 0
        queue.submit(_calls("run-after", 3)).result(10)
        _wait_loaded(queue)
        assert queue.metrics.registry.get_sample_value("budgetlens_journal_failures_total") == 1
    finally:
        queue.close()
    assert _stored_runs(db_path) == {"run-after": 3}


def test_records_acknowledged_after_a_journal_failure_survive_replay(tmp_path):
    journal = Journal(tmp_path / "j")
    first = journal.append(encode_batch(*_calls("r1", 1).tables()))
    journal.sync()
    journal._file.write(b"\xff\x00\x00\x00torn")  # a record cut short by a full disk
    journal.abandon_segment()  # what the journal thread does after a failed append/fsync
    later = journal.append(encode_batch(*_calls("r2", 1).tables()))
    journal.sync()
    journal.close()
    replayed = list(Journal(tmp_path / "j").unloaded())
    assert first in [b.seq for b in replayed] and later in [b.seq for b in replayed]
    assert {b.calls["run_id"][0].as_py() for b in replayed} >= {"r1", "r2"}


def test_a_segment_whose_first_append_finds_the_disk_full_is_not_left_empty(tmp_path, monkeypatch):
    import budgetlens.ingest.journal as journal_module

    journal = Journal(tmp_path / "j")
    kept = journal.append(encode_batch(*_calls("r1", 1).tables()))
    journal.sync()
    journal.abandon_segment()  # the next append starts a segment of its own
    real_open = open

    class _Full:
        def __init__(self, file):
            self._file = file

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._file, name)

    monkeypatch.setattr(journal_module, "open", lambda *a, **k: _Full(real_open(*a, **k)), raising=False)
    for _ in range(3):  # three refused batches
        with pytest.raises(OSError, match="No space left"):
            journal.append(encode_batch(*_calls("r2", 1).tables()))
        journal.abandon_segment()
    monkeypatch.undo()
    segments = sorted(p for p in (tmp_path / "j").iterdir() if p.suffix == ".seg")
    assert [p.stat().st_size > 0 for p in segments] == [True]  # only the one with r1's record
    later = journal.append(encode_batch(*_calls("r3", 1).tables()))
    journal.sync()
    journal.close()
    assert [b.seq for b in Journal(tmp_path / "j").unloaded()] == [kept, later]


def test_a_replay_that_fails_at_start_is_retried_and_nothing_acknowledged_is_lost(db_path):
    journal = Journal(journal_dir(db_path))
    for run in ("run-1", "run-2", "run-3"):
        journal.append(encode_batch(*_calls(run, 4).tables()))
    journal.sync()
    journal.close()
    db_path.mkdir()  # the store cannot be opened: the replay at start fails
    queue = IngestQueue(db_path, load_interval_s=0.05).start()
    try:
        assert queue.store_error is not None and queue.depth == 12
        db_path.rmdir()  # writable again: the loader's retry loads the replayed batches
        _wait_loaded(queue)
        queue.submit(_calls("run-new", 1)).result(10)  # marks seq 4 loaded: 1-3 were loaded
        _wait_loaded(queue)
    finally:
        queue.close()
    assert _stored_runs(db_path) == {"run-1": 4, "run-2": 4, "run-3": 4, "run-new": 1}


def test_a_background_replay_loads_at_once_not_a_load_interval_later(db_path):
    """Issue 23: the batches replayed at start are due at once; a new batch waits its interval."""
    journal = Journal(journal_dir(db_path))
    for run in ("run-1", "run-2"):
        journal.append(encode_batch(*_calls(run, 3).tables()))
    journal.sync()
    journal.close()
    queue = IngestQueue(db_path, load_interval_s=3600).start(replay_in_background=True)
    try:
        _wait_loaded(queue)  # well before the hour-long load interval
        queue.submit(_calls("run-new", 1)).result(10)
        time.sleep(0.5)
        assert queue.depth == 1  # a new batch still waits for its group (or for the drain)
    finally:
        queue.close()
    assert _stored_runs(db_path) == {"run-1": 3, "run-2": 3, "run-new": 1}


def test_a_row_the_store_refuses_is_dead_lettered_and_the_rest_loads(db_path):
    bad = _calls("run-bad", 5)
    bad.call_rows[2]["turn"] = 3_000_000_000  # bypass the mapping's range check: INTEGER overflows in DuckDB
    metrics = CollectorMetrics()
    queue = IngestQueue(db_path, metrics=metrics, load_interval_s=0.05).start()
    try:
        queue.submit(bad).result(10)
        queue.submit(_calls("run-good", 2)).result(10)
        _wait_loaded(queue)
        queue.submit(_calls("run-later", 1)).result(10)  # intake was never blocked
        _wait_loaded(queue)
        assert queue.store_error is None
    finally:
        queue.close()
    assert _stored_runs(db_path) == {"run-bad": 4, "run-good": 2, "run-later": 1}
    (line,) = (journal_dir(db_path) / "dead-letter.jsonl").read_text().splitlines()
    dead = json.loads(line)
    assert dead["table"] == "model_calls" and dead["row"]["turn"] == 3_000_000_000
    assert "Conversion" in dead["error"] or "range" in dead["error"].lower()
    assert metrics.registry.get_sample_value("budgetlens_spans_dead_lettered_total") == 1


def _doc(attributes: dict) -> dict:
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": "chat gpt-4o",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": k, "value": v} for k, v in attributes.items()],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


_CHAT = {
    "gen_ai.operation.name": {"stringValue": "chat"},
    "gen_ai.request.model": {"stringValue": "gpt-4o"},
    "gen_ai.usage.input_tokens": {"intValue": "10"},
    "gen_ai.usage.output_tokens": {"intValue": "5"},
}


def test_poison_values_are_rejected_and_the_collector_keeps_serving_and_stops(db_path, python):
    poison = [
        {"gen_ai.usage.input_tokens": {"doubleValue": 1e30}},
        {"gen_ai.usage.input_tokens": {"stringValue": "1" * 30}},
        {"budgetlens.turn": {"intValue": "3000000000"}},
        {"gen_ai.usage.input_tokens": {"intValue": str(2**63 - 1)}},
    ]
    with collector_process(python, db_path) as (process, url):
        for attributes in poison:
            response = requests.post(f"{url}/v1/traces", json=_doc({**_CHAT, **attributes}), timeout=10)
            # a request whose every span is rejected is a 400 naming the field and the rule
            # (test_edges_round3); with a good span beside it, it would be a partial success
            assert response.status_code == 400
            (field,) = attributes
            message = response.json()["message"]
            assert f"attribute {field} must be a non-negative integer of at most" in message, message
        good = requests.post(f"{url}/v1/traces", json=_doc(_CHAT), timeout=10)
        assert good.status_code == 200 and good.json() == {}
        assert requests.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) in (0, -signal.SIGTERM)
    with read_connection(db_path) as conn:
        assert conn.execute("SELECT span_id, input_tokens FROM model_calls").fetchall() == [("cd" * 8, 10)]


def test_a_second_collector_on_the_same_database_refuses_to_start(db_path, python):
    with collector_process(python, db_path) as (process, url):
        second = subprocess.run(
            [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stderr
        # the store names the running collector that holds it, with its PID
        assert "held by a running collector" in second.stderr
        assert f"PID {process.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200


def test_past_the_memory_bound_batches_wait_in_the_journal_only_and_all_load(db_path):
    """While the store cannot be written, rows beyond ``max_queue_spans`` are not held in
    memory: their batches are read back from the journal when the loader gets to them."""
    db_path.mkdir()  # the store cannot be opened
    queue = IngestQueue(db_path, max_queue_spans=5, load_interval_s=0.05).start()
    try:
        runs = {f"run-{i}": 3 for i in range(6)}
        for run, count in runs.items():
            queue.submit(_calls(run, count)).result(10)  # acknowledged although the store fails
        backlog = queue._backlog
        with backlog.cond:  # the loader may be retrying a group right now
            every = list(backlog.loading) + list(backlog.waiting)
        held = sum(p.rows for p in every if p.batch is not None)
        spilled = [p for p in every if p.batch is None]
        assert len(every) == 6
        assert held <= 5 + 3 and len(spilled) >= 4  # one batch may pass the bound when alone
        assert queue.depth == 18 and queue.backlog_bytes > 0 and queue.store_error is not None
        db_path.rmdir()  # writable again
        _wait_loaded(queue)
        assert queue.backlog_bytes == 0 and queue.lag_s == 0.0
    finally:
        queue.close()
    assert _stored_runs(db_path) == runs
