"""Issue 23: a span re-sent under stored ids with other content is reported, not lost to the key.

After a collector restart (a fresh span memory) nothing but the store remembers the first span:
the stored call's content digest (``model_calls.content_digest``) tells a conflicting resend
(flagged metric, the run marked ``rejected_span``, a log line naming the span id) from an
exporter retry (a silent dedupe). Real SDK spans, a real DuckDB file and a real DuckLake.
"""

from __future__ import annotations

import logging
import signal
import time

import pyarrow as pa
import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry
from test_store_rollup import _runs

from budgetlens import semconv as sc
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import IngestQueue
from budgetlens.otlp.mapping import map_request
from budgetlens.otlp.memory import SpanMemory
from budgetlens.store import read_connection, rebuild_runs, write_batch, write_connection
from budgetlens.store.lake import close_all

SECRET_MODEL = "model-name-that-must-not-be-logged"


def _request(run_id: str = "run-resend"):
    """An OTLP request of one guard run with two model calls (real SDK spans)."""
    recorder = SpanRecorder()
    recorder.guard_run(run_id, "resend-task", [("gpt-4o", 100, 10), ("gpt-4o-mini", 50, 5)])
    return encode_spans(recorder.spans())


def _changed(request, output_tokens: int = 999):
    """``request`` with its first model call's output tokens and model changed: the same ids,
    other content. Returns (the request, that span's id in hex)."""
    changed = type(request)()
    changed.CopyFrom(request)
    for rs in changed.resource_spans:
        for scope in rs.scope_spans:
            for span in scope.spans:
                values = {kv.key: kv.value for kv in span.attributes}
                operation = values.get(sc.GEN_AI_OPERATION_NAME)
                if operation is None or operation.string_value != sc.OPERATION_CHAT:
                    continue
                values[sc.GEN_AI_USAGE_OUTPUT_TOKENS].int_value = output_tokens
                values[sc.GEN_AI_REQUEST_MODEL].string_value = SECRET_MODEL
                return changed, span.span_id.hex()
    raise AssertionError("no model call in the request")


def _collector_life(location, request) -> CollectorMetrics:
    """One collector process's life: a fresh span memory, ``request`` journaled and loaded."""
    metrics = CollectorMetrics(CollectorRegistry())
    queue = IngestQueue(location, metrics=metrics, load_interval_s=0.05).start()
    try:
        queue.submit(map_request(request, price=False, memory=SpanMemory())).result(30)
        deadline = time.monotonic() + 30
        while queue.depth and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        queue.close()  # on a lake: folds what it staged
    return metrics


def _collisions(metrics: CollectorMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "budgetlens_ingest_flagged_spans_total", {"reason": "span_id_collision"}
    )
    return value or 0.0


def _stored(location, span_hex: str):
    with read_connection(location) as conn:
        call = conn.execute(
            "SELECT output_tokens, request_model, quality, content_digest FROM model_calls WHERE span_id = ?",
            [span_hex],
        ).fetchone()
        run = conn.execute("SELECT quality, model_calls FROM runs WHERE run_id = 'run-resend'").fetchone()
    return call, run


def _check_resends(location, caplog):
    original = _request()
    changed, span_hex = _changed(original)
    _collector_life(location, original)
    first_call, first_run = _stored(location, span_hex)
    assert first_call[3] is not None  # the digest is stored
    with caplog.at_level(logging.WARNING, logger="budgetlens.ingest.loader"):
        retry = _collector_life(location, original)  # an exporter retry after a restart
        assert _collisions(retry) == 0 and "span id collision" not in caplog.text
        assert _stored(location, span_hex) == (first_call, first_run)  # a silent dedupe
        resend = _collector_life(location, changed)  # same ids, other content, after a restart
    assert _collisions(resend) == 1
    lines = [r.getMessage() for r in caplog.records if "span id collision" in r.getMessage()]
    assert len(lines) == 1 and span_hex in lines[0]
    assert SECRET_MODEL not in caplog.text and "999" not in caplog.text  # ids, never values
    call, run = _stored(location, span_hex)
    assert call[:2] == first_call[:2] and call[3] == first_call[3]  # the stored span is kept
    assert "rejected_span" in call[2].split(",")
    assert "rejected_span" in run[0].split(",") and run[1] == first_run[1]  # marked, not recounted twice
    with caplog.at_level(logging.WARNING, logger="budgetlens.ingest.loader"):
        again = _collector_life(location, changed)  # reported again, flagged once
    assert _collisions(again) == 1 and _stored(location, span_hex) == (call, run)


def test_a_resend_with_other_content_after_a_restart_is_reported_an_identical_one_is_not(db_path, caplog):
    _check_resends(db_path, caplog)
    with write_connection(db_path) as conn:  # the marking kept runs equal to a full rebuild
        incremental = _runs(conn)
        rebuild_runs(conn)
        assert _runs(conn) == incremental


@pytest.mark.system  # DuckLake: seconds
def test_on_a_lake_a_resend_with_other_content_is_reported_when_folded(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("BUDGETLENS_JOURNAL_DIR", str(tmp_path / "lake.journal"))
    try:
        _check_resends(f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/", caplog)
    finally:
        close_all()


def test_a_batch_holding_a_span_twice_with_other_content_reports_the_second(db_path):
    original = map_request(_request(), price=False, memory=SpanMemory())
    changed, span_hex = _changed(_request())
    changed_rows = map_request(changed, price=False, memory=SpanMemory())
    calls = original.tables()[0]
    twice = calls.slice(0, 1)
    other = changed_rows.tables()[0].slice(0, 1)
    other = other.set_column(
        other.schema.get_field_index("call_id"), "call_id", twice.column("call_id")
    ).set_column(other.schema.get_field_index("span_id"), "span_id", twice.column("span_id"))
    with write_connection(db_path) as conn:
        result = write_batch(conn, pa.concat_tables([calls, twice, other]), *original.tables()[1:])
        assert result.calls == len(calls)
        assert result.resent is not None and result.resent.column("call_id").to_pylist() == [
            twice.column("call_id")[0].as_py()
        ]
        quality = conn.execute(
            "SELECT quality FROM model_calls WHERE call_id = ?", [twice.column("call_id")[0].as_py()]
        ).fetchone()[0]
        assert "rejected_span" in quality.split(",")
        incremental = _runs(conn)
        rebuild_runs(conn)
        assert _runs(conn) == incremental


def test_rows_without_a_digest_dedupe_silently(db_path):
    calls, records, events = map_request(_request(), price=False).tables()  # no memory: no digest
    assert calls.column("content_digest").null_count == len(calls)
    with write_connection(db_path) as conn:
        write_batch(conn, calls, records, events)
        again = write_batch(conn, calls, records, events)
    assert again.calls == 0 and again.resent is None


def _collisions_scraped(url: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith('budgetlens_ingest_flagged_spans_total{reason="span_id_collision"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _loaded(url: str) -> None:
    deadline = time.monotonic() + 60
    while requests.get(f"{url}/healthz", timeout=5).json()["backlog_spans"] and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.system  # three collector processes
def test_the_collector_reports_a_conflicting_resend_after_a_restart(db_path, python):
    """The real collector, the real OTel exporter, then the same span ids with other content."""
    recorder = SpanRecorder()
    recorder.guard_run("run-resend", "resend-task", [("gpt-4o", 100, 10), ("gpt-4o-mini", 50, 5)])
    spans = recorder.spans()
    changed, span_hex = _changed(encode_spans(spans))
    for body in (None, None, changed):  # sent, re-sent as is after a restart, then changed
        with collector_process(python, db_path) as (process, url):
            if body is None:
                exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
                assert exporter.export(spans) == SpanExportResult.SUCCESS
            else:
                answer = requests.post(
                    f"{url}/v1/traces",
                    data=body.SerializeToString(),
                    headers={"Content-Type": "application/x-protobuf"},
                    timeout=30,
                )
                assert answer.status_code == 200
            _loaded(url)
            collisions = _collisions_scraped(url)
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        assert collisions == (1 if body is not None else 0)
    call, run = _stored(db_path, span_hex)
    assert call[0] == 10 and "rejected_span" in call[2].split(",") and "rejected_span" in run[0]
