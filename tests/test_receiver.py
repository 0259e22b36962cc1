"""The OTLP/HTTP receiver served by real uvicorn, driven by the SDK's own OTLP/HTTP exporter."""

from __future__ import annotations

import gzip
import json
import threading
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, live_collector, otlp_json, otlp_protobuf
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import prepare
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import IngestQueue
from budgetlens.otlp import JSON, PROTOBUF
from budgetlens.store import read_connection

pytestmark = pytest.mark.system


def _runs(db_path):
    with read_connection(db_path) as conn:
        return conn.execute(
            "SELECT run_id, task_type, turns, tool_calls, total_tokens, stop_reason FROM runs ORDER BY run_id"
        ).fetchall()


def _recorded_runs():
    recorder = SpanRecorder()
    recorder.guard_run("run-a", "triage", [("gpt-4o", 100, 20), ("gpt-4o", 200, 30)], tools=1)
    recorder.guard_run("run-b", "triage", [("gpt-4o", 900, 100)], stop_reason=sc.STOP_BUDGET_TOKENS)
    return recorder.spans()


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_sdk_exporter_spans_become_runs(db_path, free_port, compression):
    with live_collector(db_path, free_port) as live:
        exporter = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces", compression=compression)
        assert exporter.export(_recorded_runs()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    assert _runs(db_path) == [
        ("run-a", "triage", 2, 1, 350, sc.STOP_COMPLETED),
        ("run-b", "triage", 1, 0, 1000, sc.STOP_BUDGET_TOKENS),
    ]


def test_json_body_is_accepted_and_answered_in_json(db_path, free_port):
    body = json.dumps(otlp_json(_recorded_runs())).encode()
    with live_collector(db_path, free_port) as live:
        response = requests.post(
            f"{live.url}/v1/traces",
            data=gzip.compress(body),
            headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
        )
    assert response.status_code == 200 and response.headers["content-type"].startswith(JSON)
    assert response.json() == {}
    assert [run[0] for run in _runs(db_path)] == ["run-a", "run-b"]


def test_same_spans_sent_twice_are_stored_once(db_path, free_port):
    spans = _recorded_runs()
    with live_collector(db_path, free_port) as live:
        exporter = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces")
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        metrics = live.app.state.metrics
    with read_connection(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM run_records").fetchone()[0] == 2
    assert (
        metrics.registry.get_sample_value(
            "budgetlens_model_calls_total",
            {"task_type": "triage", "model": "gpt-4o", "usage_status": "reported"},
        )
        == 3
    )
    assert metrics.registry.get_sample_value("budgetlens_spans_received_total") == 10


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
def test_invalid_spans_are_rejected_with_partial_success_and_valid_ones_stored(db_path, free_port, kind):
    recorder = SpanRecorder()
    recorder.guard_run("run-p", "triage", [("gpt-4o", 10, 2)])
    with recorder.tracer.start_as_current_span("chat bad") as bad:
        bad.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": -3})
    spans = recorder.spans()
    body = otlp_protobuf(spans) if kind == PROTOBUF else json.dumps(otlp_json(spans)).encode()
    with live_collector(db_path, free_port) as live:
        response = requests.post(f"{live.url}/v1/traces", data=body, headers={"Content-Type": kind})
    assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
    if kind == PROTOBUF:
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        rejected, message = partial.rejected_spans, partial.error_message
    else:
        partial = response.json()["partialSuccess"]
        rejected, message = int(partial["rejectedSpans"]), partial["errorMessage"]
    assert rejected == 1 and "gen_ai.usage.input_tokens must be a non-negative integer" in message
    with read_connection(db_path) as conn:
        runs = conn.execute(
            "SELECT run_id, quality, model_calls, usage_status, total_tokens FROM runs ORDER BY run_id"
        ).fetchall()
    bad_trace = format(spans[-1].context.trace_id, "032x")
    # the valid run is stored whole; the rejected root call keeps its place as a flagged stub
    # run (named by its trace id) with no token count from the rejected span
    assert runs == [
        (bad_trace, "rejected_span", 1, sc.USAGE_UNKNOWN, None),
        ("run-p", None, 1, sc.USAGE_REPORTED, 12),
    ]


@pytest.mark.parametrize(
    "headers, body, status",
    [
        ({"Content-Type": "text/plain"}, b"hello", 415),
        ({"Content-Type": PROTOBUF}, b"\x0a\xff\xff\xff\xff", 400),
        ({"Content-Type": JSON}, b'{"resourceSpans": [', 400),
        ({"Content-Type": PROTOBUF}, b"\0" * 5000, 413),
        ({"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}, gzip.compress(b"\0" * 50_000_000), 413),
        ({"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}, b"\x1f\x8b broken", 400),
    ],
)
def test_bad_requests_get_a_clear_status_and_the_server_keeps_serving(
    db_path, free_port, headers, body, status
):
    with live_collector(db_path, free_port, max_body_bytes=4096) as live:
        response = requests.post(f"{live.url}/v1/traces", data=body, headers=headers)
        assert response.status_code == status and response.text
        assert requests.get(f"{live.url}/healthz").json()["status"] == "ok"
        exporter = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces")
        assert exporter.export(_recorded_runs()) == SpanExportResult.SUCCESS


def test_a_413_suggests_the_fix_that_fits_the_body_encoding(db_path, free_port):
    with live_collector(db_path, free_port, max_body_bytes=4096, max_json_body_bytes=4096) as live:
        url = f"{live.url}/v1/traces"
        proto = requests.post(url, data=b"\0" * 5000, headers={"Content-Type": PROTOBUF})
        as_json = requests.post(url, data=b" " * 5000, headers={"Content-Type": JSON})
    assert proto.status_code == 413 and as_json.status_code == 413
    proto_message = Status.FromString(proto.content).message
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in proto_message and "--max-body-mib" in proto_message
    assert "send protobuf" not in proto_message  # it already is protobuf
    assert "send protobuf" in as_json.json()["message"]


def test_bearer_token_is_required_when_configured(db_path, free_port, monkeypatch):
    with live_collector(db_path, free_port, token="s3cret") as live:
        anonymous = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces")
        assert anonymous.export(_recorded_runs()) == SpanExportResult.FAILURE
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cret")
        authorized = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces")
        assert authorized.export(_recorded_runs()) == SpanExportResult.SUCCESS
        assert requests.get(f"{live.url}/healthz").status_code == 200  # health needs no token
    assert len(_runs(db_path)) == 2


def test_a_journal_backlog_at_its_disk_budget_answers_503_with_retry_after(db_path, free_port):
    release = threading.Event()
    entered = threading.Event()

    def slow_commit(calls, records, events):
        entered.set()
        release.wait(10)

    ingest = IngestQueue(db_path, metrics=CollectorMetrics(), max_journal_bytes=1, commit=slow_commit)
    body = otlp_protobuf(_recorded_runs())
    with live_collector(db_path, free_port, ingest=ingest) as live:
        first = threading.Thread(
            target=requests.post,
            args=(f"{live.url}/v1/traces",),
            kwargs={"data": body, "headers": {"Content-Type": PROTOBUF}},
        )
        first.start()
        assert entered.wait(10)
        busy = requests.post(f"{live.url}/v1/traces", data=body, headers={"Content-Type": PROTOBUF})
        release.set()
        first.join(10)
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
    assert "journal bytes" in Status.FromString(busy.content).message


def test_a_store_that_cannot_be_written_is_absorbed_by_the_journal_then_503_at_its_budget(
    tmp_path, free_port
):
    """The journal keeps acknowledging while the store fails (it is reported in /healthz and
    counted), up to its disk budget; past it, 503 + Retry-After so the exporter retries."""
    blocked = tmp_path / "not-a-file"
    blocked.mkdir()
    body = otlp_protobuf(_recorded_runs())
    headers = {"Content-Type": PROTOBUF}
    with live_collector(blocked, free_port, max_journal_bytes=1) as live:
        first = requests.post(f"{live.url}/v1/traces", data=body, headers=headers)
        deadline = time.monotonic() + 20
        while "budgetlens_commit_failures_total 0.0" in requests.get(f"{live.url}/metrics").text:
            assert time.monotonic() < deadline, "the loader never tried the store"
            time.sleep(0.1)
        second = requests.post(f"{live.url}/v1/traces", data=body, headers=headers)
        answer = requests.get(f"{live.url}/healthz")
        health = answer.json()
    assert answer.status_code == 503 and health["status"].startswith("store unavailable: ")
    assert health["journal_used_pct"] >= 100 and health["refused_in_s"] == 0
    assert first.status_code == 200
    assert second.status_code == 503 and second.headers["Retry-After"] == "1"
    assert health["store_error"] and health["backlog_bytes"] > 0
    # the backlog is counted in store rows, and named so: this body's 5 spans leave 7 rows
    # (calls, run records, events)
    prepared = prepare(body, PROTOBUF, None, len(body))
    assert (prepared.spans, prepared.rows) == (5, 7)
    assert health["queue_rows"] == health["backlog_rows"] == health["backlog_spans"] == prepared.rows
    assert "queue_spans" not in health


def test_bearer_scheme_is_case_insensitive_and_errors_are_a_status_in_the_request_encoding(
    db_path, free_port
):
    from google.rpc.status_pb2 import Status

    body = otlp_protobuf(_recorded_runs())
    with live_collector(db_path, free_port, token="s3cret") as live:
        url = f"{live.url}/v1/traces"
        lower = requests.post(
            url, data=body, headers={"Content-Type": PROTOBUF, "Authorization": "bearer s3cret"}
        )
        wrong = requests.post(
            url, data=body, headers={"Content-Type": PROTOBUF, "Authorization": "Bearer nope"}
        )
        bad_json = requests.post(
            url,
            data=b'{"resourceSpans": [{"scopeSpans": 5}]}',
            headers={"Content-Type": JSON, "Authorization": "BEARER s3cret"},
        )
    assert lower.status_code == 200
    assert wrong.status_code == 401 and wrong.headers["content-type"] == PROTOBUF
    assert Status.FromString(wrong.content).message == "missing or wrong bearer token"
    assert bad_json.status_code == 400 and bad_json.json()["code"] == 3
    assert "scopeSpans must be a list" in bad_json.json()["message"]


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_outside_0_to_65535_is_a_usage_error(db_path, python, port):
    import subprocess

    result = subprocess.run(
        [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"argument --port: must be an integer >= 0 and <= 65535, got {port!r}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db_path.exists() and not db_path.with_name(db_path.name + ".journal").exists()


def test_a_port_in_use_is_one_line_and_leaves_no_journal(db_path, python):
    import socket
    import subprocess

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0]
    assert result.stdout == ""
    assert not db_path.with_name(db_path.name + ".journal").exists() and not db_path.exists()


def test_collector_help_lines_fit_a_terminal(capsys, monkeypatch):
    from budgetlens.cli import main

    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps option help to the terminal width
    with pytest.raises(SystemExit):
        main(["collector", "--help"])
    out = capsys.readouterr().out
    assert "<db>.journal/" in out and max(len(line) for line in out.splitlines()) <= 80
    # the body caps and the flags that change them (issue 23)
    words = " ".join(out.split())
    assert "16 MiB for protobuf (--max-body-mib)" in words
    assert "4 MiB for OTLP/JSON (--max-json-body-mib)" in words
    assert "--max-json-body-mib MAX_JSON_BODY_MIB" in out


def test_a_json_body_cap_above_the_body_cap_is_refused_at_start(db_path, capsys):
    from budgetlens.cli import main

    argv = ["collector", "--db", str(db_path), "--port", "0", "--max-body-mib", "2"]
    assert main([*argv, "--max-json-body-mib", "3"]) == 2
    assert "--max-json-body-mib (3) must be at most --max-body-mib (2)" in capsys.readouterr().err
    assert not db_path.exists()


@pytest.mark.parametrize(("flag", "env"), [(None, ""), (None, "   "), ("", None), (" \t", None)])
def test_an_empty_or_blank_token_is_refused_at_start(db_path, capsys, monkeypatch, flag, env):
    """Issue 14, finding 6: an empty BUDGETLENS_COLLECTOR_TOKEN must not start an open collector."""
    from budgetlens.cli import main

    if env is None:
        monkeypatch.delenv("BUDGETLENS_COLLECTOR_TOKEN", raising=False)
    else:
        monkeypatch.setenv("BUDGETLENS_COLLECTOR_TOKEN", env)
    argv = ["collector", "--db", str(db_path), "--port", "0"]
    if flag is not None:
        argv += ["--token", flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    source = "--token" if flag is not None else "BUDGETLENS_COLLECTOR_TOKEN"
    assert f"{source} is set but empty" in err and "Traceback" not in err
    assert not db_path.exists() and not db_path.with_name(db_path.name + ".journal").exists()
