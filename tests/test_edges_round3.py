"""Issue 22, right at the edges (round three): each row's input through the guard, the collector
mapping, the store and the importers, with its right value computed here."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from budgetlens import semconv as sc
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection, write_batch, write_connection


class _Recorder:
    """A real SDK tracer whose finished spans are kept in memory."""

    def __init__(self, service: str = "agent-service"):
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("tests.issue22")

    def spans(self):
        return list(self.memory.get_finished_spans())


def _chat(model: str, inp: int, out: int, **extra) -> dict:
    return {
        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: model,
        sc.GEN_AI_USAGE_INPUT_TOKENS: inp,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: out,
        **extra,
    }


def _store(tmp_path, *mapped_list):
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        for mapped in mapped_list:
            write_batch(conn, *mapped.tables())
    return db_path


def _run(db_path, columns: str) -> tuple:
    with read_connection(db_path) as conn:
        rows = conn.execute(f"SELECT {columns} FROM runs").fetchall()
    assert len(rows) == 1, rows
    return rows[0]


# --- a recovered call error -------------------------------------------------------------------
def _retried_call(root_status: StatusCode) -> list:
    recorder = _Recorder()
    with recorder.tracer.start_as_current_span("agent run") as root:
        root.set_attribute(sc.GEN_AI_AGENT_NAME, "extractor")
        with recorder.tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as first:
            first.set_attributes(_chat("gpt-4o-mini", 900, 300, **{sc.ERROR_TYPE: "invalid_json_output"}))
            first.set_status(Status(StatusCode.ERROR))
        with recorder.tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as second:
            second.set_attributes(_chat("gpt-4o-mini", 900, 320))
            second.set_status(Status(StatusCode.OK))
        root.set_status(Status(root_status))
    return recorder.spans()


def test_a_call_error_the_run_recovered_from_does_not_fail_the_run(tmp_path):
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    mapped = map_request(encode_spans(_retried_call(StatusCode.OK)))
    db_path = _store(tmp_path, mapped)
    calls, total, cost, stop = _run(db_path, "model_calls, total_tokens, cost_usd, stop_reason")
    expected = sum(
        float(
            calc_price(
                PriceUsage(input_tokens=900, output_tokens=out), "gpt-4o-mini", provider_id="openai"
            ).total_price
        )
        for out in (300, 320)
    )
    assert (calls, total, stop) == (2, 900 + 300 + 900 + 320, sc.STOP_COMPLETED)
    assert cost == pytest.approx(expected)  # the failed attempt's usage still counts


def test_a_root_span_in_error_still_fails_the_run(tmp_path):
    db_path = _store(tmp_path, map_request(encode_spans(_retried_call(StatusCode.ERROR)), price=False))
    assert _run(db_path, "stop_reason") == (sc.STOP_FAILED,)
