"""Issue 23: a different span resent under the same ids is rejected on the worker path too."""

from __future__ import annotations

import asyncio

import pytest
import requests
from _collector_helpers import live_collector, otlp_protobuf
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import DecodePool
from budgetlens.otlp import PROTOBUF, SpanMemory
from budgetlens.store import read_connection

_TRACE = 0x5EED_0000_0000_0000_0000_0000_0000_0001
_START = 1_700_000_000_000_000_000


def _calls(tokens: list[int], run_id: str = "run-w") -> list[ReadableSpan]:
    """SDK spans with fixed ids (span i has id i + 1): one call each, ``tokens[i]`` input tokens."""
    return [
        ReadableSpan(
            name="chat gpt-4o",
            context=SpanContext(_TRACE, index + 1, is_remote=False),
            resource=Resource.create({sc.SERVICE_NAME: "worker-test"}),
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                sc.GEN_AI_PROVIDER_NAME: "openai",
                sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                sc.GEN_AI_USAGE_INPUT_TOKENS: inp,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10,
                sc.BUDGET_RUN_ID: run_id,
            },
            kind=SpanKind.CLIENT,
            start_time=_START + index,
            end_time=_START + index + 1_000_000,
        )
        for index, inp in enumerate(tokens)
    ]


def _stored(db_path) -> list[tuple]:
    with read_connection(db_path) as conn:
        return conn.execute("SELECT span_id, input_tokens FROM model_calls ORDER BY span_id").fetchall()


@pytest.mark.system
def test_a_conflicting_resend_decoded_in_a_worker_is_rejected_before_the_acknowledgement(db_path, free_port):
    """Every body goes to a worker process (``inline_bytes=0``), sent by the real OTel exporter."""
    pool = DecodePool(workers=1, inline_bytes=0, memory=SpanMemory())
    with live_collector(db_path, free_port, decode_pool=pool) as live:
        url = f"{live.url}/v1/traces"
        exporter = OTLPSpanExporter(endpoint=url)
        assert exporter.export(_calls([100, 200])) == SpanExportResult.SUCCESS
        assert exporter.export(_calls([100, 200])) == SpanExportResult.SUCCESS  # a retry: fine
        # the same ids, the second span's content changed, and a new third span beside them
        body = otlp_protobuf(_calls([100, 999, 300]))
        response = requests.post(url, data=body, headers={"Content-Type": PROTOBUF}, timeout=30)
        assert exporter.export(_calls([100, 999])) == SpanExportResult.SUCCESS  # again, via the SDK
        exporter.shutdown()
        registry = live.app.state.metrics.registry
        rejected = registry.get_sample_value("budgetlens_spans_rejected_total")
        collisions = registry.get_sample_value(
            "budgetlens_ingest_flagged_spans_total", {"reason": "span_id_collision"}
        )
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1
    assert "span id collision" in partial.error_message and f"{2:016x}" in partial.error_message
    assert (rejected, collisions) == (2, 2)
    # the first version is kept, the conflicting one is not stored, the new span is
    assert _stored(db_path) == [(f"{1:016x}", 100), (f"{2:016x}", 200), (f"{3:016x}", 300)]


def test_a_worker_body_checks_its_fingerprints_against_the_collectors_memory():
    """Unit: ``DecodePool.prepare`` on its worker path, the "worker" a thread (the same code
    as in a process: ``_prepare_in_worker``); the memory filled by an in-process body."""
    from concurrent.futures import ThreadPoolExecutor

    first = otlp_protobuf(_calls([100]))
    memory = SpanMemory()
    pool = DecodePool(workers=1, inline_bytes=len(first), memory=memory)
    new_span = _calls([100, 200], run_id="run-" + "w" * 64)[1:]  # long enough for a worker
    conflicting = otlp_protobuf(new_span + _calls([555]))
    retry = otlp_protobuf(_calls([100]) + new_span)
    assert len(conflicting) > pool.inline_bytes and len(retry) > pool.inline_bytes

    async def run():
        small = await pool.prepare(first, PROTOBUF, None, 1 << 20)  # in-process: remembered
        with ThreadPoolExecutor(1) as executor:
            pool._executor = executor
            worker = await pool.prepare(conflicting, PROTOBUF, None, 1 << 20)
            again = await pool.prepare(retry, PROTOBUF, None, 1 << 20)
        pool._executor = None
        return small, worker, again

    small, worker, again = asyncio.run(run())
    assert small.rejected == 0
    # span 1 under other content: rejected; span 2 (new) accepted and remembered by the worker path
    assert (worker.spans, worker.rejected, worker.rows) == (2, 1, 1)  # span 2 stored, span 1 not
    assert "span id collision" in worker.error_message and worker.flagged.get("span_id_collision") == 1
    assert worker.prints == {}
    assert memory.fingerprint(f"{_TRACE:032x}", f"{2:016x}") is not None
    # an exact repeat of both accepted spans passes (an exporter retry)
    assert (again.rejected, again.rows) == (0, 2)
