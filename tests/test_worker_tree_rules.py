"""Issue 25: every body is mapped in a decode worker, with the rows an in-process mapping gives.

The worker maps against a stand-in of the collector's ``SpanMemory`` (``budgetlens.otlp.asked``);
the collector answers its questions and maps the body again only when its memory knows more.
Each case sends the same bodies in the same order through ``DecodePool.prepare`` on its worker
path (the "worker" a thread running the same ``_prepare_in_worker`` as a process) and through
the in-process ``prepare`` with one shared ``SpanMemory``, and compares everything the receiver
answers and journals.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import DecodePool, prepare
from budgetlens.ingest.journal import decode_batch
from budgetlens.otlp import PROTOBUF, SpanMemory


class _CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(1)
        self.mapped = 0

    def submit(self, fn, /, *args, **kwargs):
        self.mapped += 1
        return super().submit(fn, *args, **kwargs)


def _span(trace: bytes, span_id: bytes, parent: bytes | None, attrs: dict, name: str = "chat gpt-4o") -> Span:
    span = Span(trace_id=trace, span_id=span_id, parent_span_id=parent or b"", name=name)
    span.start_time_unix_nano = 1_700_000_000_000_000_000
    span.end_time_unix_nano = 1_700_000_001_000_000_000
    for key, value in attrs.items():
        kv = span.attributes.add()
        kv.key = key
        if isinstance(value, int):
            kv.value.int_value = value
        else:
            kv.value.string_value = value
    return span


def _chat(inp: int = 100, run_id: str | None = None) -> dict:
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


def _body(*spans: Span) -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def _answer(prepared) -> tuple:
    """Everything the receiver answers and journals for a prepared body."""
    tables = None
    if prepared.encoded is not None:
        batch = decode_batch(0, prepared.encoded.payload)
        tables = (batch.calls.to_pylist(), batch.records.to_pylist(), batch.events.to_pylist())
    counts = (prepared.spans, prepared.rejected, prepared.rows, prepared.flagged)
    return counts, prepared.error_message, tables


def _both_ways(bodies: list[bytes]) -> tuple[list[tuple], list[tuple], int]:
    """(answers in-process, answers on the worker path, mappings done on the worker path)."""
    memory = SpanMemory()
    inline = [_answer(prepare(body, PROTOBUF, None, 1 << 24, memory)) for body in bodies]
    pool = DecodePool(workers=1, inline_bytes=0, memory=SpanMemory())  # every body: the worker path

    async def run():
        with _CountingExecutor() as executor:
            pool._executor = executor  # type: ignore[assignment]
            answers = [_answer(await pool.prepare(body, PROTOBUF, None, 1 << 24)) for body in bodies]
        pool._executor = None
        return answers, executor.mapped

    worker, mapped = asyncio.run(run())
    return inline, worker, mapped


def _ids(count: int) -> list[bytes]:
    return [os.urandom(8) for _ in range(count)]


def test_bodies_the_memory_knows_nothing_about_are_mapped_once():
    trace, (run, a, b) = os.urandom(16), _ids(3)
    first = _body(_span(trace, a, run, _chat(100, "run-1")), _span(trace, b, run, _chat(200, "run-1")))
    second = _body(_span(os.urandom(16), os.urandom(8), None, _chat(300)))
    inline, worker, mapped = _both_ways([first, second])
    assert worker == inline and mapped == 2


def test_an_aggregate_sent_after_its_calls_is_dropped_on_the_worker_path_too():
    trace, (top, a, b) = os.urandom(16), _ids(3)
    calls = _body(_span(trace, a, top, _chat(800)), _span(trace, b, top, _chat(100)))
    aggregate = _body(_span(trace, top, None, {**_chat(900), sc.GEN_AI_OPERATION_NAME: "chat"}, "wrapper"))
    inline, worker, mapped = _both_ways([calls, aggregate])
    assert worker == inline and mapped == 3  # the aggregate's body was mapped again
    assert inline[1][2][0] == []  # not a call


def test_calls_sent_after_their_named_run_span_join_that_run_on_the_worker_path_too():
    trace, (root, step, call) = os.urandom(16), _ids(3)
    rest = _body(
        _span(
            trace,
            root,
            None,
            {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT, sc.BUDGET_RUN_ID: "run-7"},
            "invoke_agent triage",
        ),
        _span(trace, step, root, {}, "step"),
    )
    later = _body(_span(trace, call, step, _chat(70)))
    inline, worker, mapped = _both_ways([rest, later])
    assert worker == inline and mapped == 3
    assert [row["run_id"] for row in inline[1][2][0]] == ["run-7"]


@pytest.mark.parametrize("shape", ["loop without a named run", "two calls on a loop"])
def test_loops_closed_across_requests_map_as_in_process(shape):
    trace, (x, y, z) = os.urandom(16), _ids(3)
    if shape == "loop without a named run":
        bodies = [
            _body(_span(trace, x, y, {}, "a")),
            _body(_span(trace, y, x, {}, "b")),
            _body(_span(trace, z, x, _chat())),
        ]
    else:
        bodies = [_body(_span(trace, x, y, _chat(100, "r"))), _body(_span(trace, y, x, _chat(300, "r")))]
    inline, worker, _ = _both_ways(bodies)
    assert worker == inline


def test_a_rejected_span_marks_the_run_named_in_an_earlier_body_on_the_worker_path_too():
    trace, (root, step, good, bad) = os.urandom(16), _ids(4)
    first = _body(
        _span(
            trace,
            root,
            None,
            {sc.BUDGET_RUN_ID: "run-9", sc.GEN_AI_OPERATION_NAME: "invoke_agent"},
            "invoke_agent x",
        ),
        _span(trace, step, root, {}, "step"),
    )
    bad_call = {**_chat(), sc.GEN_AI_USAGE_OUTPUT_TOKENS: "many"}
    second = _body(_span(trace, good, step, _chat(50)), _span(trace, bad, step, bad_call, "tool"))
    inline, worker, mapped = _both_ways([first, second])
    assert worker == inline and mapped == 3
    assert inline[1][0][1] == 1 and "gen_ai.usage.output_tokens" in inline[1][1]


def test_a_collision_and_a_retry_answer_as_in_process():
    trace, (a, b) = os.urandom(16), _ids(2)
    first = _body(_span(trace, a, None, _chat(100)), _span(trace, b, None, _chat(200)))
    conflicting = _body(_span(trace, a, None, _chat(999)), _span(trace, b, None, _chat(200)))
    inline, worker, mapped = _both_ways([first, first, conflicting])
    assert worker == inline and mapped == 4  # only the conflicting body twice
    assert inline[2][0][1] == 1 and "span id collision" in inline[2][1]
