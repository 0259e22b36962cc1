"""Every body gets its answer in time (issue 23): a declared length over the cap is answered
413 from the header with the connection closed, and large bodies that would be answered past
the answer deadline behind others get 503 + Retry-After at once, while real OTel SDK exporters
that retry store all their spans (real collector subprocess)."""

from __future__ import annotations

import socket
import threading

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process, live_collector
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens.otlp import PROTOBUF
from budgetlens.store import read_connection


def _raw_answer(url: str, head: str) -> tuple[bytes, bool]:
    """Send ``head`` on a raw socket; (the answer, whether the server then closed)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode())
        sock.settimeout(30)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        length = int(
            next(line for line in answer.lower().split(b"\r\n") if line.startswith(b"content-length"))[15:]
        )
        while len(answer.split(b"\r\n\r\n", 1)[1]) < length:
            answer += sock.recv(4096)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
    return answer, closed


def test_a_huge_declared_length_is_answered_413_from_the_header_and_the_connection_closed(db_path, free_port):
    with live_collector(db_path, free_port) as live:
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\n"
            "Content-Length: 99999999999\r\n\r\n"
        )
        answer, closed = _raw_answer(live.url, head)
        assert requests.get(f"{live.url}/healthz").json()["status"] == "ok"
    status_line, rest = answer.split(b"\r\n", 1)
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    # closed at once: a client reading to the end no longer waits for the keep-alive timeout
    assert b"connection: close" in rest.lower() and closed
    message = Status.FromString(answer.split(b"\r\n\r\n", 1)[1]).message
    assert "99999999999 bytes" in message and "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in message


def test_a_long_content_type_is_quoted_short_in_the_415(db_path, free_port):
    with live_collector(db_path, free_port) as live:
        response = requests.post(
            f"{live.url}/v1/traces", data=b"x", headers={"Content-Type": "text/plain; v=" + "s3cr3t" * 500}
        )
    assert response.status_code == 415 and len(response.text) < 160
    assert "s3cr3t" * 12 not in response.text and response.headers["connection"] == "close"


def _big_batch(recorder: SpanRecorder, first: int, count: int) -> list:
    """``count`` chat spans of ~2.6 KB each (a filler attribute the mapping does not keep)."""
    return recorder.chat_calls(count, first, extra={"app.filler": "f" * 2500})


@pytest.mark.system  # a collector subprocess, three 5 MB bodies at once, decode workers
def test_large_bodies_past_the_answer_deadline_get_503_and_retrying_sdk_exporters_store_everything(
    tmp_path, python
):
    store = tmp_path / "store.duckdb"
    batches = [_big_batch(SpanRecorder(f"svc-{i}"), 1000 * i, 2000) for i in range(3)]
    answers: list[tuple[int, str | None, str]] = []  # (status, Retry-After, message)
    results: list = []

    def record(response, *args, **kwargs):
        message = Status.FromString(response.content).message if response.status_code != 200 else ""
        answers.append((response.status_code, response.headers.get("Retry-After"), message))

    def export(url: str, spans: list, start: threading.Barrier) -> None:
        session = requests.Session()
        session.hooks["response"].append(record)
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", session=session)
        start.wait()
        for _ in range(40):  # an honest client: a failed export is sent again (as the OTel Collector does)
            if exporter.export(spans) == SpanExportResult.SUCCESS:
                results.append("stored")
                break
        exporter.shutdown()

    # a 1 s deadline: a second 5 MB body queued behind one in the slot is refused
    with collector_process(python, store, 0, "--answer-deadline", "1") as (_, url):
        start = threading.Barrier(3)
        threads = [threading.Thread(target=export, args=(url, spans, start)) for spans in batches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
    assert results == ["stored"] * 3, answers
    assert {status for status, _, _ in answers} <= {200, 503}, answers
    refused = [(after, message) for status, after, message in answers if status == 503]
    assert refused and any("past the answer deadline of 1 s" in message for _, message in refused), answers
    assert all(after is not None and int(after) >= 1 for after, _ in refused)
    with read_connection(store) as conn:
        stored = conn.execute("SELECT count(*), count(DISTINCT span_id) FROM model_calls").fetchone()
    assert stored == (6000, 6000)
