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

import pytest
from _otlp_spans import CountingExecutor, chat_attrs, protobuf_body, span

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import DecodePool, prepare
from budgetlens.ingest.journal import decode_batch
from budgetlens.otlp import PROTOBUF, SpanMemory


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
        with CountingExecutor(1) as executor:
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
    first = protobuf_body(
        span(trace, a, run, chat_attrs(100, "run-1"), "chat gpt-4o"),
        span(trace, b, run, chat_attrs(200, "run-1"), "chat gpt-4o"),
    )
    second = protobuf_body(span(os.urandom(16), os.urandom(8), None, chat_attrs(300), "chat gpt-4o"))
    inline, worker, mapped = _both_ways([first, second])
    assert worker == inline and mapped == 2


def test_an_aggregate_sent_after_its_calls_is_dropped_on_the_worker_path_too():
    trace, (top, a, b) = os.urandom(16), _ids(3)
    calls = protobuf_body(
        span(trace, a, top, chat_attrs(800), "chat gpt-4o"),
        span(trace, b, top, chat_attrs(100), "chat gpt-4o"),
    )
    aggregate = protobuf_body(
        span(trace, top, None, {**chat_attrs(900), sc.GEN_AI_OPERATION_NAME: "chat"}, "wrapper")
    )
    inline, worker, mapped = _both_ways([calls, aggregate])
    assert worker == inline and mapped == 3  # the aggregate's body was mapped again
    assert inline[1][2][0] == []  # not a call


def test_calls_sent_after_their_named_run_span_join_that_run_on_the_worker_path_too():
    trace, (root, step, call) = os.urandom(16), _ids(3)
    rest = protobuf_body(
        span(
            trace,
            root,
            None,
            {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT, sc.BUDGET_RUN_ID: "run-7"},
            "invoke_agent triage",
        ),
        span(trace, step, root, {}, "step"),
    )
    later = protobuf_body(span(trace, call, step, chat_attrs(70), "chat gpt-4o"))
    inline, worker, mapped = _both_ways([rest, later])
    assert worker == inline and mapped == 3
    assert [row["run_id"] for row in inline[1][2][0]] == ["run-7"]


@pytest.mark.parametrize("shape", ["loop without a named run", "two calls on a loop"])
def test_loops_closed_across_requests_map_as_in_process(shape):
    trace, (x, y, z) = os.urandom(16), _ids(3)
    if shape == "loop without a named run":
        bodies = [
            protobuf_body(span(trace, x, y, {}, "a")),
            protobuf_body(span(trace, y, x, {}, "b")),
            protobuf_body(span(trace, z, x, chat_attrs(), "chat gpt-4o")),
        ]
    else:
        bodies = [
            protobuf_body(span(trace, x, y, chat_attrs(100, "r"), "chat gpt-4o")),
            protobuf_body(span(trace, y, x, chat_attrs(300, "r"), "chat gpt-4o")),
        ]
    inline, worker, _ = _both_ways(bodies)
    assert worker == inline


def test_a_rejected_span_marks_the_run_named_in_an_earlier_body_on_the_worker_path_too():
    trace, (root, step, good, bad) = os.urandom(16), _ids(4)
    first = protobuf_body(
        span(
            trace,
            root,
            None,
            {sc.BUDGET_RUN_ID: "run-9", sc.GEN_AI_OPERATION_NAME: "invoke_agent"},
            "invoke_agent x",
        ),
        span(trace, step, root, {}, "step"),
    )
    bad_call = {**chat_attrs(), sc.GEN_AI_USAGE_OUTPUT_TOKENS: "many"}
    second = protobuf_body(
        span(trace, good, step, chat_attrs(50), "chat gpt-4o"), span(trace, bad, step, bad_call, "tool")
    )
    inline, worker, mapped = _both_ways([first, second])
    assert worker == inline and mapped == 3
    assert inline[1][0][1] == 1 and "gen_ai.usage.output_tokens" in inline[1][1]


def test_a_collision_and_a_retry_answer_as_in_process():
    trace, (a, b) = os.urandom(16), _ids(2)
    first = protobuf_body(
        span(trace, a, None, chat_attrs(100), "chat gpt-4o"),
        span(trace, b, None, chat_attrs(200), "chat gpt-4o"),
    )
    conflicting = protobuf_body(
        span(trace, a, None, chat_attrs(999), "chat gpt-4o"),
        span(trace, b, None, chat_attrs(200), "chat gpt-4o"),
    )
    inline, worker, mapped = _both_ways([first, first, conflicting])
    assert worker == inline and mapped == 4  # only the conflicting body twice
    assert inline[2][0][1] == 1 and "span id collision" in inline[2][1]
