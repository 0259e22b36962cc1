"""Issue 14 against real subprocess collectors: large bodies do not stall other clients, stalled
uploads are dropped, request bytes in flight are capped, and every acknowledged span lands."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import requests
from _collector_helpers import collector_process

from benchmarks.ingest import SPANS_PER_BODY, make_body
from budgetlens.otlp import PROTOBUF
from budgetlens.store import read_connection

pytestmark = pytest.mark.system

HEADERS = {"Content-Type": PROTOBUF}


def _body(first_seed: int, parts: int) -> bytes:
    """One protobuf request of ``parts`` × 1,000 spans (serialized requests concatenate into
    one whose resource spans are all of theirs)."""
    return b"".join(make_body(first_seed + i) for i in range(parts))


def _post_until_accepted(url: str, body: bytes, results: list) -> None:
    """POST ``body``, honouring 503 + Retry-After as the OTel exporters do (up to 300 s: one
    client's bodies now go one share at a time)."""
    deadline = time.monotonic() + 300
    while True:
        response = requests.post(f"{url}/v1/traces", data=body, headers=HEADERS, timeout=120)
        if response.status_code != 503 or time.monotonic() > deadline:
            results.append(response.status_code)
            return
        time.sleep(float(response.headers["Retry-After"]))


def _calls(db_path) -> int:
    with read_connection(db_path) as conn:
        return conn.execute("SELECT count(*) FROM model_calls").fetchone()[0]


def test_health_and_small_requests_are_answered_while_a_large_body_is_decoded(tmp_path, python):
    """Issue 14, finding 2: a 16 MB protobuf body is decoded and mapped off the event loop, so
    /healthz and a small export are answered while it is still being processed."""
    db_path = tmp_path / "store.duckdb"
    big, small = _body(1000, 25), _small_body()
    with collector_process(python, db_path) as (process, url):
        done = threading.Event()
        big_status: list = []

        def send_big():
            big_status.append(requests.post(f"{url}/v1/traces", data=big, headers=HEADERS).status_code)
            done.set()

        sender = threading.Thread(target=send_big)
        sender.start()
        while not done.is_set() and not requests.get(f"{url}/healthz").json()["inflight_bytes"]:
            time.sleep(0.01)  # until the collector holds the body
        answered, small_statuses = 0, []
        while not done.is_set():
            if requests.get(f"{url}/healthz", timeout=30).status_code == 200 and not done.is_set():
                answered += 1
            if len(small_statuses) < 3:
                small_statuses.append(
                    requests.post(f"{url}/v1/traces", data=small, headers=HEADERS, timeout=30).status_code
                )
            time.sleep(0.02)
        sender.join()
    assert big_status == [200]
    assert small_statuses and set(small_statuses) == {200}
    assert answered >= 10, f"only {answered} health checks answered while the large body was processed"
    assert _calls(db_path) == 25 * SPANS_PER_BODY * 9 // 10 + 9  # + the small body's calls


def _small_body() -> bytes:
    """A small request: one run of the benchmark's shape cut down to 10 spans."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(make_body(7))
    spans = request.resource_spans[0].scope_spans[0].spans
    del spans[10:]
    return request.SerializeToString()


def test_stalled_uploads_are_dropped_and_concurrent_large_bodies_all_land(tmp_path, python):
    """Issue 14, finding 3: 20 uploads that stall half-way are answered (408, or 503 while the
    byte cap is spent) and dropped within the body timeout; 8 concurrent large bodies are
    refused with Retry-After while the cap is spent and all land once retried."""
    db_path = tmp_path / "store.duckdb"
    parts = 6  # ~3.7 MB bodies, limit 4 MiB, cap 8 MiB: two bodies in flight at most
    stalled_body = _body(9000, parts)
    options = ("--max-body-mib", "4", "--max-inflight-mib", "8", "--body-timeout", "5")
    with collector_process(python, db_path, 0, *options) as (process, url):
        host, port = url.removeprefix("http://").split(":")
        stalled = []
        for _ in range(20):
            sock = socket.create_connection((host, int(port)))
            head = (
                f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
                f"Content-Length: {len(stalled_body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + stalled_body[: len(stalled_body) // 2])
            stalled.append(sock)
        started = time.monotonic()
        results: list = []
        senders = [
            threading.Thread(target=_post_until_accepted, args=(url, _body(100 * (i + 1), parts), results))
            for i in range(8)
        ]
        for sender in senders:
            sender.start()
        cap_seen = []
        while any(sender.is_alive() for sender in senders):
            cap_seen.append(requests.get(f"{url}/healthz").json()["inflight_bytes"])
            time.sleep(0.1)
        answers = []
        for sock in stalled:
            sock.settimeout(max(1.0, 60 - (time.monotonic() - started)))
            answer = sock.recv(64)
            try:
                while sock.recv(1 << 16):  # the rest of the answer, then b"": closed
                    pass
            except ConnectionResetError:  # closed with the unread half of the body pending
                pass
            answers.append(answer.split(b"\r\n")[0])
            sock.close()
        dropped_after = time.monotonic() - started
    assert results == [200] * 8
    assert dropped_after < 60
    assert {answer.split(b" ")[1] for answer in answers} <= {b"408", b"503"}
    assert b"HTTP/1.1 408 Request Timeout" in answers
    assert max(cap_seen) <= 8 * 1024 * 1024
    assert _calls(db_path) == 8 * parts * SPANS_PER_BODY * 9 // 10
