"""Hand-made OTLP protobuf spans for the mapping and decode-worker tests: one span with its
attributes, and a chat call's GenAI attributes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens import semconv as sc


def span(
    trace: bytes,
    span_id: bytes,
    parent: bytes | None,
    attrs: dict,
    name: str = "step",
    *,
    kind: int = Span.SPAN_KIND_UNSPECIFIED,
) -> Span:
    """A span of one second (1,700,000,000 s after the epoch) with ``attrs`` (int or string)."""
    made = Span(trace_id=trace, span_id=span_id, parent_span_id=parent or b"", name=name, kind=kind)
    made.start_time_unix_nano = 1_700_000_000_000_000_000
    made.end_time_unix_nano = 1_700_000_001_000_000_000
    for key, value in attrs.items():
        kv = made.attributes.add()
        kv.key = key
        if isinstance(value, int):
            kv.value.int_value = value
        else:
            kv.value.string_value = value
    return made


def chat_attrs(inp: int = 100, run_id: str | None = None) -> dict:
    """A gpt-4o chat call's attributes: ``inp`` input and 20 output tokens, under ``run_id``."""
    attrs: dict = {
        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
        sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_USAGE_INPUT_TOKENS: inp,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
    }
    if run_id:
        attrs[sc.BUDGET_RUN_ID] = run_id
    return attrs


def protobuf_body(*spans: Span) -> bytes:
    """An OTLP/HTTP protobuf body: ``spans`` in one resource and one scope."""
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool of ``workers`` that counts the tasks submitted to it (``mapped``)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.mapped = 0

    def submit(self, fn, /, *args, **kwargs):
        self.mapped += 1
        return super().submit(fn, *args, **kwargs)
