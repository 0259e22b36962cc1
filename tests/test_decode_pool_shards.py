"""Issue 25: a body that arrives while no other is being mapped is mapped by both workers at once,
each the traces of its shard (``budgetlens.ingest.shards``), with the rows the whole body maps to.

Each case sends the same bodies in the same order through ``DecodePool.prepare`` with two
"workers" (threads running the same ``_prepare_in_worker`` as the processes) and through the
in-process ``prepare`` with one shared ``SpanMemory``, and compares the answers and the journaled
rows (as sets: shards are joined one after the other), and for one case the stored tables.
"""

from __future__ import annotations

import asyncio
import os

import duckdb
import pyarrow as pa
import pytest
from _otlp_spans import CountingExecutor, chat_attrs, protobuf_body, span
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from budgetlens import semconv as sc
from budgetlens.ingest.decode_pool import DecodePool, prepare
from budgetlens.ingest.journal import decode_batch
from budgetlens.ingest.shards import join_shards
from budgetlens.otlp import PROTOBUF, SpanMemory
from budgetlens.otlp.identity import trace_shard
from budgetlens.store import write_batch, write_connection


def _trace(shard: int, salt: int = 0) -> bytes:
    """A trace id of shard ``shard`` of 2 (its last byte's parity)."""
    return os.urandom(14) + bytes([salt % 256, 2 * (salt % 100) + shard])


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted((key, repr(value)) for key, value in row.items())) for row in rows)


def _answer(prepared) -> tuple:
    """What the receiver answers and journals for a prepared body (rows as sets)."""
    tables = None
    if prepared.encoded is not None:
        batches = [decode_batch(0, payload.payload) for payload in prepared.payloads]
        tables = tuple(
            _sorted([row for batch in batches for row in getattr(batch, name).to_pylist()])
            for name in ("calls", "records", "events")
        )
    counts = (prepared.spans, prepared.rejected, prepared.rows, prepared.flagged)
    return counts, prepared.error_message, tables


def _both_ways(bodies: list[bytes], busy: int = 0):
    """(in-process Prepared list, worker-path Prepared list, mappings done on the worker path)."""
    memory = SpanMemory()
    inline = [prepare(body, PROTOBUF, None, 1 << 24, memory) for body in bodies]
    pool = DecodePool(workers=2, inline_bytes=0, memory=SpanMemory())

    async def run():
        with CountingExecutor(2) as executor:
            pool._executor = executor  # type: ignore[assignment]
            pool._busy = busy
            answers = [await pool.prepare(body, PROTOBUF, None, 1 << 24) for body in bodies]
        pool._executor = None
        return answers, executor.mapped

    worker, mapped = asyncio.run(run())
    return inline, worker, mapped


def _guard_run(trace: bytes, run_id: str, calls: int) -> list[Span]:
    root = os.urandom(8)
    run = span(
        trace,
        root,
        None,
        {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT, sc.BUDGET_RUN_ID: run_id},
        "invoke_agent triage",
    )
    run.events.add(name=sc.EVENT_WARNING, time_unix_nano=run.start_time_unix_nano)
    return [run] + [
        span(trace, os.urandom(8), root, chat_attrs(100 + turn, run_id), "chat gpt-4o")
        for turn in range(calls)
    ]


def _foreign_trace(trace: bytes) -> list[Span]:
    """A foreign agent: a root with an agent name, a wrapper with usage above two calls (an
    aggregate), and a tool span."""
    root, wrapper, a, b, tool = (os.urandom(8) for _ in range(5))
    return [
        span(trace, root, None, {sc.GEN_AI_AGENT_NAME: "planner"}, "agent"),
        span(trace, wrapper, root, {**chat_attrs(900), sc.GEN_AI_OPERATION_NAME: "chat"}, "wrapper"),
        span(trace, a, wrapper, chat_attrs(500), "chat gpt-4o"),
        span(trace, b, wrapper, chat_attrs(400), "chat gpt-4o"),
        span(trace, tool, root, {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL}, "execute_tool"),
    ]


def _mixed_body(salt: int) -> bytes:
    spans: list[Span] = []
    for index in range(6):
        trace = _trace(index % 2, salt + index)
        spans += _guard_run(trace, f"run-{salt}-{index}", 3) if index < 4 else _foreign_trace(trace)
    return protobuf_body(*spans)


def _stored(path, prepared_list) -> dict[str, list[str]]:
    with write_connection(path) as conn:
        for prepared in prepared_list:  # one commit per body, as a loader group of its records
            batches = [decode_batch(0, payload.payload) for payload in prepared.payloads]
            tables = [
                pa.concat_tables([getattr(b, name) for b in batches])
                for name in ("calls", "records", "events")
            ]
            write_batch(conn, *tables)
    return _tables(path)


def _tables(path) -> dict[str, list[str]]:
    """Every row of the store's tables (sorted reprs)."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        tables = ("model_calls", "run_records", "budget_events", "runs", "run_model_rollup")
        return {
            table: sorted(map(repr, conn.execute(f"SELECT * FROM {table}").fetchall())) for table in tables
        }
    finally:
        conn.close()


def test_the_traces_of_a_body_are_mapped_in_two_shards_to_the_whole_bodys_rows(tmp_path):
    bodies = [_mixed_body(0), _mixed_body(10)]
    inline, worker, mapped = _both_ways(bodies)
    assert [_answer(p) for p in worker] == [_answer(p) for p in inline]
    assert mapped == 4  # each body once per shard, none mapped whole
    assert all(len(p.payloads) == 2 for p in worker)  # one journal record per shard
    # per guard run: its record, 3 calls, a warning; per foreign trace: the root's record, 2 calls
    # (the wrapper above them is an aggregate), the tool event
    assert worker[0].rows == 4 * 5 + 2 * 4
    assert _stored(tmp_path / "sharded.duckdb", worker) == _stored(tmp_path / "whole.duckdb", inline)


def test_the_shard_of_a_span_is_its_trace_ids_last_byte():
    assert [trace_shard(_trace(k), 2) for k in (0, 1, 0, 1)] == [0, 1, 0, 1]
    assert trace_shard(b"", 2) == 0  # a missing id (the span is rejected in its shard)


def test_a_body_with_a_rejected_span_is_mapped_whole_with_the_same_answer():
    bad = {**chat_attrs(), sc.GEN_AI_USAGE_OUTPUT_TOKENS: "many"}
    spans = _guard_run(_trace(0), "run-a", 2) + _guard_run(_trace(1), "run-b", 2)
    spans.append(span(_trace(1), os.urandom(8), None, bad, "chat gpt-4o"))
    inline, worker, mapped = _both_ways([protobuf_body(*spans)])
    assert [_answer(p) for p in worker] == [_answer(p) for p in inline]
    assert mapped == 3 and inline[0].rejected == 1  # two shards, then the whole body
    assert worker[0].error_message == inline[0].error_message


def test_a_run_named_in_two_traces_of_different_shards_is_mapped_whole():
    spans = _guard_run(_trace(0), "run-shared", 2) + _guard_run(_trace(1), "run-shared", 2)
    inline, worker, mapped = _both_ways([protobuf_body(*spans)])
    assert [_answer(p) for p in worker] == [_answer(p) for p in inline]
    assert mapped == 3  # the store keeps the first record of a run in a batch: the body's order


def test_a_body_whose_traces_the_memory_knows_is_mapped_whole_with_its_seed():
    trace, top, a, b = _trace(1), os.urandom(8), os.urandom(8), os.urandom(8)
    calls = protobuf_body(
        span(trace, a, top, chat_attrs(800), "chat gpt-4o"),
        span(trace, b, top, chat_attrs(100), "chat gpt-4o"),
        *_guard_run(_trace(0), "run-c", 2),
    )
    aggregate = protobuf_body(
        span(trace, top, None, {**chat_attrs(900), sc.GEN_AI_OPERATION_NAME: "chat"}, "wrapper"),
        *_guard_run(_trace(0), "run-d", 2),
    )
    inline, worker, mapped = _both_ways([calls, aggregate])
    assert [_answer(p) for p in worker] == [_answer(p) for p in inline]
    # the second body: its shards, then whole as before (its stand-in, then the memory's answers)
    assert mapped == 2 + 2 + 2
    calls_of_second = [decode_batch(0, payload.payload).calls for payload in worker[1].payloads]
    assert calls_of_second and all(
        900 not in calls.column("input_tokens").to_pylist() for calls in calls_of_second
    )


def test_a_body_arriving_while_another_is_mapped_is_not_sharded():
    inline, worker, mapped = _both_ways([_mixed_body(20)], busy=1)
    assert [_answer(p) for p in worker] == [_answer(p) for p in inline]
    assert mapped == 1


def test_shards_without_rows_join_to_the_other_shards_rows():
    whole = prepare(protobuf_body(*_guard_run(_trace(1), "run-e", 2)), PROTOBUF, None, 1 << 24)
    parts = [
        prepare(
            protobuf_body(*_guard_run(_trace(1), "run-e", 2)), PROTOBUF, None, 1 << 24, None, None, (k, 2)
        )
        for k in (0, 1)
    ]
    joined = join_shards(parts)
    assert joined is not None and parts[0].encoded is None and len(joined.payloads) == 1
    assert (joined.spans, joined.rows) == (whole.spans, whole.rows) == (3, 4)


@pytest.mark.system
def test_the_collector_stores_the_rows_of_a_sharded_body_as_of_a_whole_one(tmp_path, free_port):
    """Two real collectors (worker processes, every body off the event loop), one mapping each
    body in two shards, one in a single worker; the real OTel exporter sends the same spans."""
    from _collector_helpers import SpanRecorder, live_collector
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    recorder = SpanRecorder()
    for index in range(12):
        recorder.guard_run(f"run-{index}", "triage", [("gpt-4o", 100 + index, 10)] * 3, warnings=1)
    spans = recorder.spans()
    stored = {}
    for workers in (2, 1):
        path = tmp_path / f"workers-{workers}.duckdb"
        pool = DecodePool(workers=workers, inline_bytes=0, memory=SpanMemory())
        with live_collector(path, free_port, decode_pool=pool) as live:
            exporter = OTLPSpanExporter(endpoint=f"{live.url}/v1/traces", timeout=120)
            assert exporter.export(spans) == SpanExportResult.SUCCESS
            exporter.shutdown()
        stored[workers] = _tables(path)
    assert stored[2] == stored[1]
    assert len(stored[2]["model_calls"]) == 36 and len(stored[2]["runs"]) == 12
