"""The large-body answer deadline (``budgetlens.ingest.admission``) with a hand-driven clock:
a large body behind a queue that would answer it too late is refused with a Retry-After, one
with nothing ahead is always admitted, the rate is the one measured."""

from __future__ import annotations

import asyncio
import gzip
from concurrent.futures import ThreadPoolExecutor

import pytest
from _collector_helpers import SpanRecorder, otlp_protobuf

from budgetlens.ingest.admission import LargeBodyQueue, TooLate, work_bytes
from budgetlens.ingest.decode_pool import DecodePool
from budgetlens.otlp import PROTOBUF

MB = 1_000_000


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _queue(clock: Clock, rate: float = 2 * MB, deadline: float = 7.0) -> LargeBodyQueue:
    return LargeBodyQueue(4 * MB, deadline, rate, clock)


def test_a_large_body_with_nothing_ahead_is_admitted_however_long_it_takes_alone():
    clock = Clock()
    queue = _queue(clock, rate=0.5 * MB)  # 16 MB alone: 32 s, past the deadline
    queue.check(16 * MB, clock.now)  # admitted: a retrying client is always served in the end


def test_a_large_body_that_would_be_answered_past_the_deadline_behind_others_is_refused():
    async def scenario():
        clock = Clock()
        queue = _queue(clock)  # 2 MB/s, 7 s
        async with queue.slot(10 * MB, clock.now):  # 5 s of work in the slot
            clock.now += 1.0  # 4 s of it left
            queue.check(6 * MB, clock.now)  # 4 + 3 = 7 s: within the deadline
            with pytest.raises(TooLate, match="past the answer deadline of 7 s") as refused:
                queue.check(8 * MB, clock.now - 0.5)  # arrived 0.5 s ago: 0.5 + 4 + 4 s
            assert refused.value.retry_after_s == 4  # when the body ahead is done
            assert queue.refused == 1

    asyncio.run(scenario())


def test_small_bodies_pass_the_slot_without_waiting_or_counting():
    async def scenario():
        clock = Clock()
        queue = _queue(clock)
        async with queue.slot(10 * MB, clock.now):
            async with queue.slot(4 * MB, clock.now):  # not over large_bytes: no wait, no check
                assert queue.queued == 10 * MB
            queue.check(3 * MB, clock.now - 60)  # small: never refused

    asyncio.run(scenario())


def test_the_rate_follows_the_measured_slot_times_and_ignores_failed_bodies():
    async def scenario():
        clock = Clock()
        queue = _queue(clock, rate=2 * MB)
        async with queue.slot(8 * MB, clock.now):
            clock.now += 1.0  # 8 MB/s measured
        assert queue.rate_bytes_s == pytest.approx(5 * MB)  # halfway from 2 to 8
        with pytest.raises(ValueError):
            async with queue.slot(8 * MB, clock.now):
                clock.now += 100.0
                raise ValueError("400: a malformed body says nothing of the rate")
        assert queue.rate_bytes_s == pytest.approx(5 * MB)
        assert queue.queued == 0 and queue.serving == 0

    asyncio.run(scenario())


def test_bodies_queued_for_the_slot_count_ahead_of_a_newcomer():
    async def scenario():
        clock = Clock()
        queue = _queue(clock, rate=1 * MB, deadline=20.0)
        gate = asyncio.Event()

        async def hold(nbytes: int):
            async with queue.slot(nbytes, clock.now):
                await gate.wait()

        tasks = [asyncio.create_task(hold(5 * MB)) for _ in range(2)]
        await asyncio.sleep(0)
        assert queue.queued == 10 * MB and queue.ahead_s() == pytest.approx(10.0)
        with pytest.raises(TooLate) as refused:  # 10 s ahead + 11 s of its own > 20 s
            queue.check(11 * MB, clock.now)
        assert refused.value.retry_after_s == 10
        gate.set()
        await asyncio.gather(*tasks)
        assert queue.queued == 0 and queue.ahead_s() == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("deadline, rate", [(0, 1.0), (-1, 1.0), (7.0, 0)])
def test_a_deadline_or_rate_not_above_zero_is_refused(deadline, rate):
    with pytest.raises(ValueError, match="must be > 0"):
        LargeBodyQueue(4 * MB, deadline, rate)


def test_a_gzip_body_counts_its_inflated_size_and_an_identity_body_its_length():
    raw = b"\0" * 3_000_000
    packed = gzip.compress(raw)
    assert work_bytes(packed, "gzip") == len(raw) and work_bytes(packed, " GZIP ") == len(raw)
    assert work_bytes(raw, None) == work_bytes(raw, "identity") == len(raw)
    assert work_bytes(b"\x1f\x8b", "gzip") == 2  # too short for a trailer: its length


class _Recording(ThreadPoolExecutor):
    """A decode "worker" in a thread, counting the tasks it ran."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.ran: list[str] = []

    def submit(self, fn, /, *args, **kwargs):
        self.ran.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


def test_a_small_gzip_body_that_inflates_past_large_bytes_is_decoded_in_the_large_body_worker():
    recorder = SpanRecorder()
    for index in range(30):
        recorder.guard_run(f"run-{index}", "triage", [("gpt-4o", 100, 10)] * 3)
    raw = otlp_protobuf(recorder.spans())
    packed = gzip.compress(raw)
    pool = DecodePool(workers=1, inline_bytes=100, large_bytes=len(packed) + 1)
    workers, large = _Recording(), _Recording()
    pool._executor, pool._large_executor = workers, large
    try:
        answer = asyncio.run(pool.prepare(packed, PROTOBUF, "gzip", 1 << 24, work_bytes(packed, "gzip")))
        assert large.ran[:1] == ["_prepare_in_worker"] and workers.ran == []
        small = asyncio.run(pool.prepare(packed, PROTOBUF, "gzip", 1 << 24))  # routed by its length
        assert workers.ran == ["_prepare_in_worker"] and large.ran.count("_prepare_in_worker") == 1
    finally:
        pool.close()
    assert (answer.spans, answer.rejected) == (small.spans, small.rejected) == (120, 0)
    assert answer.rows == small.rows > 0
