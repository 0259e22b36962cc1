"""Issue 23, memory that does not grow with concurrency: each large body is decoded by a fresh
worker process (its heap's peak never stays resident), and freed memory goes back to the OS."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow as pa
import pytest
from _collector_helpers import SpanRecorder, otlp_protobuf

from budgetlens.ingest.decode_pool import DecodePool
from budgetlens.ingest.heap import release_free_memory, use_system_memory_pool
from budgetlens.otlp import PROTOBUF


def _body(runs: int, first: int) -> bytes:
    recorder = SpanRecorder()
    for index in range(first, first + runs):
        recorder.guard_run(f"run-{index}", "triage", [("gpt-4o", 100, 10)] * 3)
    return otlp_protobuf(recorder.spans())


def _large_workers(pool: DecodePool) -> set[int]:
    executor = pool._large_executor
    assert executor is not None
    return {pid for pid, process in executor._processes.items() if process.is_alive()}


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


@pytest.mark.system
def test_each_large_body_is_decoded_by_a_fresh_worker_and_answered_as_usual():
    bodies = [_body(20, 0), _body(20, 100)]
    pool = DecodePool(workers=1, inline_bytes=1000, large_bytes=2000).start()
    try:
        assert all(len(body) > pool.large_bytes for body in bodies)
        seen: list[set[int]] = []

        async def run():
            answers = []
            for body in bodies:
                answers.append(await pool.prepare(body, PROTOBUF, None, 1 << 20))
                deadline = time.monotonic() + 30
                # the worker that decoded it exits; its replacement is started at once
                while not (_large_workers(pool) and _large_workers(pool) not in seen):
                    assert time.monotonic() < deadline, "no fresh large-body worker"
                    await asyncio.sleep(0.05)
                seen.append(_large_workers(pool))
            return answers

        answers = asyncio.run(run())
    finally:
        pool.close()
    assert [(a.spans, a.rejected) for a in answers] == [(80, 0), (80, 0)]
    assert all(a.encoded is not None and a.rows > 0 for a in answers)
    first, second = seen
    assert len(first) == len(second) == 1 and first != second
    assert not any(_alive(pid) for pid in first | second)  # close() stopped every worker


def test_the_collector_allocates_arrow_buffers_from_the_system_allocator_and_trims():
    use_system_memory_pool()
    assert pa.default_memory_pool().backend_name == "system"
    before = pa.default_memory_pool().bytes_allocated()
    table = pa.table({"x": list(range(100_000))})
    assert pa.system_memory_pool().bytes_allocated() >= before + 800_000  # counted there
    del table
    release_free_memory()  # returns; a no-op where there is no glibc
    assert pa.default_memory_pool().bytes_allocated() == before
