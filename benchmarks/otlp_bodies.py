"""OTLP bodies for the ingest benchmarks: protobuf ``ExportTraceServiceRequest`` of 1,000 GenAI
spans each, shaped like the guard's telemetry (``make_body``; see ``benchmarks.ingest``)."""

from __future__ import annotations

import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens import semconv as sc

SPANS_PER_BODY = 1000
CALLS_PER_RUN = 9


def _kv(key: str, value) -> KeyValue:
    kv = KeyValue(key=key)
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = value
    return kv


def make_body(seed: int, *, stated_cost: bool = True) -> bytes:
    """One protobuf body of ``SPANS_PER_BODY`` guard-shaped spans with unique ids;
    ``stated_cost=False``: the call spans carry no ``budgetlens.cost_usd`` (the collector prices
    them, as for a guard without a cost limit)."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(_kv(sc.SERVICE_NAME, "bench-agent"))
    spans = resource_spans.scope_spans.add().spans
    now = time.time_ns()
    runs = SPANS_PER_BODY // (CALLS_PER_RUN + 1)
    for run in range(runs):
        trace_id = (seed * 1_000_003 + run + 1).to_bytes(16, "big")
        run_span_id = (seed * 100_000 + run * 16 + 1).to_bytes(8, "big")
        run_id = f"bench-{seed}-{run}"
        task = f"task-{run % 5}"
        used = 0
        for turn in range(1, CALLS_PER_RUN + 1):
            inp, out = 1000 + 37 * turn, 100 + turn
            used += inp + out
            span = Span(
                trace_id=trace_id,
                span_id=(seed * 100_000 + run * 16 + 1 + turn).to_bytes(8, "big"),
                parent_span_id=run_span_id,
                name="chat gpt-4o-mini",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=now + turn * 1000,
                end_time_unix_nano=now + turn * 1000 + 900,
            )
            span.attributes.extend(
                [
                    _kv(sc.GEN_AI_OPERATION_NAME, "chat"),
                    _kv(sc.GEN_AI_PROVIDER_NAME, "openai"),
                    _kv(sc.GEN_AI_REQUEST_MODEL, "gpt-4o-mini"),
                    _kv(sc.GEN_AI_RESPONSE_MODEL, "gpt-4o-mini-2024-07-18"),
                    _kv(sc.GEN_AI_USAGE_INPUT_TOKENS, inp),
                    _kv(sc.GEN_AI_USAGE_OUTPUT_TOKENS, out),
                    _kv(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, inp // 2),
                    _kv(sc.BUDGET_RUN_ID, run_id),
                    _kv(sc.BUDGET_TASK_TYPE, task),
                    _kv(sc.BUDGET_TURN, turn),
                    _kv(sc.BUDGET_RESERVED_TOKENS, 4000),
                    _kv(sc.BUDGET_USED_TOKENS, used),
                    _kv(sc.BUDGET_REMAINING_TOKENS, 100_000 - used),
                    _kv(sc.BUDGET_USAGE_STATUS, "reported"),
                ]
            )
            if stated_cost:
                span.attributes.append(_kv(sc.BUDGET_COST_USD, used * 1.5e-7))
            spans.append(span)
        run_span = Span(
            trace_id=trace_id,
            span_id=run_span_id,
            name=f"invoke_agent {task}",
            start_time_unix_nano=now,
            end_time_unix_nano=now + 20_000,
        )
        run_span.attributes.extend(
            [
                _kv(sc.GEN_AI_OPERATION_NAME, "invoke_agent"),
                _kv(sc.BUDGET_RUN_ID, run_id),
                _kv(sc.BUDGET_TASK_TYPE, task),
                _kv(sc.BUDGET_LIMIT_TOTAL_TOKENS, 100_000),
                _kv(sc.BUDGET_LIMIT_TURNS, 20),
                _kv(sc.BUDGET_TURNS, CALLS_PER_RUN),
                _kv(sc.BUDGET_TOOL_CALLS, 1),
                _kv(sc.BUDGET_USED_TOKENS, used),
                _kv(sc.GEN_AI_USAGE_INPUT_TOKENS, used - 1000),
                _kv(sc.GEN_AI_USAGE_OUTPUT_TOKENS, 1000),
                _kv(sc.BUDGET_COST_USD, used * 1.5e-7),
                _kv(sc.BUDGET_STOP_REASON, "completed"),
                _kv(sc.BUDGET_USAGE_STATUS, "reported"),
                _kv(sc.BUDGET_RETRYABLE, False),
            ]
        )
        for index, name in enumerate((sc.EVENT_TOOL_CALL, sc.EVENT_WARNING)):
            event = run_span.events.add(name=name, time_unix_nano=now + 10_000 + index)
            event.attributes.extend([_kv(sc.BUDGET_USED_TOKENS, used), _kv(sc.BUDGET_PERCENT, 80.0)])
        spans.append(run_span)
    return request.SerializeToString()
