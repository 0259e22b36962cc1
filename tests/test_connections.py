"""Connections against hostile and careless clients (issue 23): stalled request heads are timed
out, open connections are capped in all and per client address (the oldest waiting ones closed
first), and a flood of them or of failed accepts logs a bounded number of lines."""

from __future__ import annotations

import asyncio
import errno
import logging
import select
import socket
import threading
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens.ingest.connections import (
    ACCEPT_ERROR,
    ConnectionGuard,
    ConnectionLimits,
    RateLimitedLog,
    limit_accept_errors,
)

ATTACKER = "127.0.0.2"  # another loopback address: the collector tells the clients apart by it
STALLED_HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n"  # and then nothing (issue 23's repro)


class _Connection:
    """What the guard sees of a connection: its client address; ``drop`` closes it."""

    def __init__(self, guard: ConnectionGuard, client_host: str):
        self.guard = guard
        self.client_host = client_host
        self.dropped = False

    def drop(self, reason: str) -> None:
        self.dropped = True
        self.guard.forget(self)


def _admit(guard: ConnectionGuard, client: str, waiting: bool = True) -> _Connection:
    connection = _Connection(guard, client)
    assert guard.admit(connection)
    if waiting:
        guard.wait(connection)
    return connection


def test_a_full_client_cap_closes_that_clients_oldest_waiting_connection():
    guard = ConnectionGuard(ConnectionLimits(max_connections=10, max_client_connections=3))
    first, second, third = (_admit(guard, ATTACKER) for _ in range(3))
    honest = _admit(guard, "127.0.0.1")
    guard.serve(second)  # its request head arrived: not a candidate
    _admit(guard, ATTACKER)
    assert first.dropped and not second.dropped and not third.dropped and not honest.dropped
    _admit(guard, ATTACKER)
    assert third.dropped and not second.dropped
    assert guard.by_client == {ATTACKER: 3, "127.0.0.1": 1} and guard.evicted == 2


def test_a_full_total_cap_closes_the_oldest_waiting_connection_of_any_client():
    guard = ConnectionGuard(ConnectionLimits(max_connections=3, max_client_connections=3))
    oldest = _admit(guard, ATTACKER)
    served = _admit(guard, "127.0.0.1", waiting=False)
    _admit(guard, ATTACKER)
    _admit(guard, "127.0.0.3")
    assert oldest.dropped and not served.dropped and guard.open == 3


def test_a_cap_with_every_connection_serving_refuses_the_new_one():
    guard = ConnectionGuard(ConnectionLimits(max_connections=2, max_client_connections=2))
    _admit(guard, ATTACKER, waiting=False)
    _admit(guard, "127.0.0.1", waiting=False)
    assert not guard.admit(_Connection(guard, "127.0.0.3"))
    assert guard.refused == 1 and guard.open == 2


def test_a_client_cap_above_the_total_or_a_zero_timeout_is_refused():
    with pytest.raises(ValueError, match="max_client_connections"):
        ConnectionLimits(max_connections=10, max_client_connections=11)
    with pytest.raises(ValueError, match="header timeouts"):
        ConnectionLimits(header_timeout_s=0)


def test_a_repeated_warning_is_one_line_per_interval_with_its_count(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("tests.connections"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="tests.connections"):
        for step in range(1000):  # 1000 failures over 20 s
            now[0] = step * 0.02
            limited.warning("accept", "accept failed")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["accept failed", "accept failed (500 times in the last 10 s)"]


def test_failed_accepts_log_one_line_per_interval_and_other_errors_the_default_way(caplog):
    loop = asyncio.new_event_loop()
    try:
        limit_accept_errors(loop, interval_s=60.0)
        error = OSError(errno.EMFILE, "Too many open files")
        with caplog.at_level(logging.WARNING):
            for _ in range(5000):
                loop.call_exception_handler({"message": ACCEPT_ERROR, "exception": error})
            loop.call_exception_handler({"message": "something else"})
    finally:
        loop.close()
    accept_lines = [r.getMessage() for r in caplog.records if ACCEPT_ERROR in r.getMessage()]
    assert len(accept_lines) == 1 and "Too many open files" in accept_lines[0]
    assert any(r.getMessage() == "something else" for r in caplog.records)


def _stalled(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), source_address=(ATTACKER, 0))
    sock.sendall(STALLED_HEAD)
    return sock


def _closed_by_server(sock: socket.socket) -> bytes | None:
    """What the collector sent before closing ``sock`` (b"" for nothing), None while open."""
    if not select.select([sock], [], [], 0)[0]:
        return None
    try:
        answer = sock.recv(4096)
    except ConnectionResetError:
        return b""
    while answer and (more := sock.recv(4096)):
        answer += more
    return answer


def _attack(port: int, count: int, stop: threading.Event, held: list, answers: list) -> None:
    """Keep ``count`` stalled-head sockets open from ATTACKER, reopening each one the collector
    closes (its answer goes to ``answers``), until ``stop``; the last ones stay in ``held``."""
    held.extend(_stalled(port) for _ in range(count))
    while not stop.is_set():
        readable = select.select(held, [], [], 0.2)[0]
        for sock in readable:
            answer = _closed_by_server(sock)
            if answer is None:
                continue
            answers.append(answer)
            sock.close()
            held[held.index(sock)] = _stalled(port)


def _all_answered(held: list, answers: list) -> bool:
    for sock in list(held):
        answer = _closed_by_server(sock)
        if answer is not None:
            answers.append(answer)
            sock.close()
            held.remove(sock)
    return not held


@pytest.mark.system
def test_stalled_request_heads_leave_healthz_and_an_otel_export_served(tmp_path, python):
    recorder = SpanRecorder()
    recorder.guard_run("r1", "code_generation", [("gpt-4o", 1000, 100)])
    spans = recorder.spans()
    flags = ["--max-connections", "200", "--max-client-connections", "50"]
    flags += ["--header-timeout", "3", "--idle-timeout", "2"]
    stop = threading.Event()
    held: list[socket.socket] = []
    answers: list[bytes] = []
    with collector_process(python, tmp_path / "store.duckdb", 0, *flags) as (process, url):
        port = int(url.rsplit(":", 1)[1])
        attacker = threading.Thread(target=_attack, args=(port, 300, stop, held, answers))
        attacker.start()
        try:
            time.sleep(1.0)  # 300 stalled heads, 250 over the attacker's cap, are in first
            with requests.Session() as honest:  # its connections are closed on leaving
                healths = [honest.get(f"{url}/healthz", timeout=10) for _ in range(5)]
                exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
                exports = [exporter.export(spans) for _ in range(5)]
                exporter.shutdown()
                during = honest.get(f"{url}/healthz", timeout=10).json()
        finally:
            stop.set()
            attacker.join(30)
        # the last stalled sockets are left open by the attacker: the header timeout closes them
        deadline = time.monotonic() + 30
        while not _all_answered(held, answers) and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(50):  # the honest clients' closes reach the collector soon after
            after = requests.get(f"{url}/healthz", timeout=10).json()
            if after["connections"] == 1:
                break
            time.sleep(0.2)
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert [r.status_code for r in healths] == [200] * 5
    assert exports == [SpanExportResult.SUCCESS] * 5
    assert during["connections"] <= 200 and after["connections"] == 1  # this /healthz only
    assert not held, f"{len(held)} stalled sockets still open"
    assert len(answers) >= 300  # at least the 250 over the cap and the last 50
    # 408 once part of the head arrived (closed to make room, or by the header timeout), else
    # closed silently; never served, never refused while stalled ones could make room
    assert {answer.split(b"\r\n")[0] for answer in answers} <= {b"", b"HTTP/1.1 408 Request Timeout"}
    assert b"HTTP/1.1 408 Request Timeout" in {answer.split(b"\r\n")[0] for answer in answers}
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) <= 12, lines  # one line per kind and 10 s, not one per connection
