"""Decode and map OTLP bodies off the event loop, in worker processes (both cores).

``json.loads`` of a 15 MB body holds the interpreter for about a second, and the span mapping
takes about 25 µs a span (25 ms for a 1,000-span body), so on the event loop (or in a thread,
under the GIL) it would stall ``/healthz`` and every other request, and use one core.
``DecodePool`` maps a body of at most ``inline_bytes`` (default 64 KiB: an exporter's small
batch, about a hundred spans, a few ms) in the collector, and every larger one in a small
``concurrent.futures.ProcessPoolExecutor`` (``workers`` processes, started by ``spawn`` so they
inherit no threads and no open files such as the journal's lock, when the first body needs
them; bodies over ``large_bytes`` one at a time, each in a fresh worker of its own that exits
after it) and returns a
``Prepared``: the counts the receiver answers with and the rows already encoded as a journal
record payload
(``budgetlens.ingest.journal.encode_batch``), so the collector process never holds the decoded
protobuf or the row objects of a body. The receiver journals that payload and answers only after
the fsync, as for a body mapped in-process.

The collector's ``SpanMemory`` (the tree rules and span identity across requests) stays in the
collector: a worker maps with a stand-in that records what the mapping asked of it
(``budgetlens.otlp.asked``); the collector checks those questions and the fingerprints against
its memory on the event loop, remembers the body's spans, and in the rare case where its memory
knows something the stand-in did not (a span id collision, a run named by an ancestor sent
earlier, a call below that came earlier) has the body mapped again with the part of its
memory the body's rules read. Either way the rows are those an in-process mapping gives.

Where a large body's memory goes (15 MB of protobuf, about 200 MB when decoded in-process):
the parsed ``ExportTraceServiceRequest`` (the upb arena, about 3× the wire size), the mapped
rows as Python objects (the largest part: one object per value), the Arrow tables and their IPC
encoding. In a worker all of that lives and dies in the worker; the collector keeps the body
and the encoded payload (about the size of the Arrow tables). A worker's heap keeps much of a
freed peak resident (``malloc_trim`` returns only whole free pages), and it grew with each large
body; a fresh worker per large body peaks at one body's size however many come in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import cast

from budgetlens.ingest.heap import TRIM_AFTER_BYTES, release_free_memory, use_system_memory_pool
from budgetlens.ingest.journal import Encoded, encode_batch
from budgetlens.otlp import OtlpError, SpanMemory, decode, map_spans
from budgetlens.otlp.asked import AskedMemory, questions, seed_keys
from budgetlens.otlp.memory import Excerpt, Key, Memory, Remembered

log = logging.getLogger(__name__)

#: Bodies up to this size (bytes) are mapped in the collector process, on the event loop: about
#: a hundred guard spans, a few ms. A worker would cost more for them: the round trip, and for
#: the first body a worker started then (seconds on a busy machine: the first small body waited
#: 8-10 s, past the exporters' 10 s timeout, when every body went to a worker). Larger bodies
#: are mapped in the workers, on both cores.
DEFAULT_INLINE_BYTES = 64 * 1024
#: Worker processes (one a core of a 2-core machine).
DEFAULT_WORKERS = 2
#: Bodies over this size (bytes) are decoded one at a time: a worker's memory while decoding
#: one is about 15× its size, so two at once would double the collector's peak.
DEFAULT_LARGE_BYTES = 4 * 1024 * 1024
#: How much lower than the collector's the workers' CPU priority is (nice steps). 0: every body
#: is mapped there, so they are the request path (at +10, a busy machine starved them until the
#: exporters timed out); the event loop still answers at once (it mostly sleeps, and the
#: scheduler runs a waking sleeper first). The loader thread keeps its +10.
WORKER_NICENESS = 0
#: Tasks a large-body worker runs before it exits: the warm-up it gets when it starts (so it is
#: known to work, and is ready, before its body arrives), then one body.
_LARGE_WORKER_TASKS = 2
#: What a worker is given of the collector's memory for a second mapping: the excerpt its tree
#: rules read and the earlier fingerprints of its span id collisions (``SpanMemory.from_excerpt``).
Seed = tuple[Excerpt, dict[Key, int]]


class DecodeUnavailable(RuntimeError):
    """A worker process died (killed, out of memory); the pool was restarted. Retry later."""


@dataclass
class Prepared:
    """A decoded and mapped request.

    ``kind``: the response media type (``PROTOBUF`` or ``JSON``); ``spans``: spans seen;
    ``rejected``: invalid spans; ``error_message``: the ``partial_success`` message;
    ``log_message``: a shorter one for the log; ``rows``: store rows (calls + records + events);
    ``encoded``: the rows as a journal payload, None when there are none; ``flagged``: spans
    kept after a repair, by quality flag (the Prometheus counter's reason label); ``prints``: the
    content fingerprints of the accepted spans (``budgetlens.otlp.Mapped.prints``), filled by a
    worker only: the collector checks them against its ``SpanMemory`` before it acknowledges;
    ``asked`` and ``remembered``: what a worker's mapping asked of its memory and would have
    remembered (``budgetlens.otlp.asked.AskedMemory``), for the collector's memory.
    """

    kind: str
    spans: int
    rejected: int
    error_message: str
    log_message: str
    rows: int
    encoded: Encoded | None
    flagged: dict[str, int] = field(default_factory=dict)
    prints: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    asked: list[Key] = field(default_factory=list, repr=False)
    remembered: list[Remembered] = field(default_factory=list, repr=False)


def prepare(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    max_bytes: int,
    memory: Memory | None = None,
) -> Prepared:
    """Inflate, decode, map and encode one request body (pure; runs in any process).

    Raises ``budgetlens.otlp.OtlpError`` (415, 413 or 400) for a body refused as a whole.
    """
    # bytes-like is fine for every decoder here (protobuf, json, zlib): no copy of the body
    kind, decoded = decode(cast(bytes, body), content_type, content_encoding, max_bytes)
    del body
    try:
        mapped = map_spans(decoded, memory=memory)
    except RecursionError:
        raise OtlpError(400, "request is nested too deeply") from None
    del decoded
    encoded = None
    if mapped.rows:
        encoded = Encoded(encode_batch(*mapped.tables()), mapped.rows)
    message = mapped.error_message() if mapped.rejected else ""
    short = mapped.error_message(2) if mapped.rejected else ""
    return Prepared(
        kind,
        mapped.spans,
        mapped.rejected,
        message,
        short,
        mapped.rows,
        encoded,
        mapped.flagged,
        mapped.prints,
    )


def _prepare_in_worker(
    body, content_type, content_encoding, max_bytes, seed: Seed | None = None, remember: bool = True
) -> Prepared | tuple[int, str]:
    """``prepare`` in a worker; an OtlpError comes back as ``(status, reason)`` (it does not
    pickle with its two arguments). With ``remember`` the body is mapped against an
    ``AskedMemory`` answering from ``seed`` (None: an empty memory), and what it asked and
    would remember comes back in ``Prepared`` (``prints``, ``asked``, ``remembered``)."""
    memory = None
    if remember:
        memory = AskedMemory(None if seed is None else SpanMemory.from_excerpt(*seed))
    large = len(body) > TRIM_AFTER_BYTES
    try:
        result: Prepared | tuple[int, str] = prepare(body, content_type, content_encoding, max_bytes, memory)
    except OtlpError as error:
        result = error.status, error.reason
    del body
    if memory is not None and isinstance(result, Prepared):
        result.prints, result.asked, result.remembered = memory.prints, memory.runs, memory.remembered
    if large:
        release_free_memory()
    return result


def _exit_with(pid: int) -> None:
    """Block until process ``pid`` ends, then end this process. A pool's workers hold the
    write end of their own task pipe, so they never see it close when the collector is
    killed; without this they (and the forkserver) would outlive it."""
    import os
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3): poll
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass
            time.sleep(1.0)
    select.select([fd], [], [])
    os._exit(0)


def _warm_up() -> int:
    return 0


def _log_failed_start(warm) -> None:
    if not warm.cancelled() and warm.exception() is not None:
        log.error("a decode worker did not start: %s", warm.exception())


def _warm_prices() -> int:
    """A large-body worker's first task after the first one's: load the price data while it
    waits for its body. (Not in the initializer: the worker started with the pool would load
    it while the collector loads it for its first in-process body, the two on a 2-core machine;
    the first small body waited 1.9-2.2 s instead of 0.8-1.1 s. That first worker loads it with
    its first body.)"""
    from budgetlens.pricing import warm_prices

    warm_prices()
    return 0


def _init_worker(collector_pid: int) -> None:
    """In each worker: ignore SIGINT (a Ctrl-C reaches the whole process group; the collector
    handles it and stops the workers itself), exit with the collector (even after ``kill -9``),
    lower the CPU priority (``WORKER_NICENESS``), let Arrow hand freed memory back to the OS."""
    import os
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(collector_pid,), daemon=True).start()
    use_system_memory_pool()
    try:
        if WORKER_NICENESS:
            os.nice(WORKER_NICENESS)
    except OSError as error:  # not permitted: keep the priority
        log.debug("decode worker priority unchanged: %s", error)


class DecodePool:
    """Runs ``prepare`` for bodies over ``inline_bytes`` in ``workers`` processes, smaller ones
    in-process.

    ``start`` creates the workers (without waiting for them), ``close`` stops them.
    Raises ValueError for ``workers`` < 1 or a negative ``inline_bytes``.
    """

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        inline_bytes: int = DEFAULT_INLINE_BYTES,
        large_bytes: int = DEFAULT_LARGE_BYTES,
        memory: SpanMemory | None = None,
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (got {workers})")
        if inline_bytes < 0:
            raise ValueError(f"inline_bytes must be >= 0 (got {inline_bytes})")
        if large_bytes < inline_bytes:
            raise ValueError(f"large_bytes must be >= inline_bytes (got {large_bytes} < {inline_bytes})")
        self.workers = workers
        self.inline_bytes = inline_bytes
        self.large_bytes = large_bytes
        #: The collector's span memory (issue 15's tree rules across requests, issue 23's span
        #: identity). Bodies mapped in-process use it; a body mapped in a worker is checked
        #: against it and remembered in it (``prepare``; ``budgetlens.otlp.asked``), with the
        #: same rows as in-process.
        self.memory = memory
        self._executor: ProcessPoolExecutor | None = None
        #: bodies over ``large_bytes``: one worker, a fresh one for each body (see ``_new_executor``)
        self._large_executor: ProcessPoolExecutor | None = None
        self._large: asyncio.Semaphore | None = None  # created on the serving event loop

    def start(self) -> DecodePool:
        """Start the worker processes (idempotent); return self without waiting for them: a
        body under ``inline_bytes`` never needs one, and a larger one waits for its worker
        (under load a worker takes seconds to start, and the collector would listen that much
        later). A worker that cannot start is logged, and its body answered 503."""
        if self._executor is None:
            # the large-body worker is the one started now (as many processes at rest as one
            # pool had); the others start with the first body between the two sizes
            self._executor = self._new_executor()
            self._large_executor = self._new_executor(large=True)
            warm = self._large_executor.submit(_warm_up)  # its first task (see _new_executor)
            warm.add_done_callback(_log_failed_start)
        return self

    def _new_executor(self, large: bool = False) -> ProcessPoolExecutor:
        """``workers`` processes, started when first needed; ``large``: one process that exits
        after each body, its replacement started at once (issue 23: a worker's heap after a
        15 MB body keeps much of that body's peak resident, and a few such bodies in a row left
        it larger than any one body needs; a fresh worker peaks at one body's size). Each
        large-body worker's first task is a warm-up (``start``: ``_warm_up``; its replacements:
        ``_warm_prices``), so the warm-up
        does not use up the life of the worker started with the pool (it would be replaced at
        once: a second worker start, a second or two of CPU, with every collector start)."""
        # "spawn": each worker is the collector's own child. A forkserver would be a second,
        # long-lived process that outlives a collector killed with -9 (the workers watch the
        # collector's pid and exit with it; a forkserver does not).
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(
            max_workers=1 if large else self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(),),
            max_tasks_per_child=_LARGE_WORKER_TASKS if large else None,
        )

    async def prepare(
        self,
        body: bytes | bytearray,
        content_type: str | None,
        content_encoding: str | None,
        max_bytes: int,
        work_bytes: int | None = None,
    ) -> Prepared:
        """``prepare`` for ``body``: in a worker, or in-process when it is at most
        ``inline_bytes`` or the pool is not started; one at a time in the large-body worker
        when ``work_bytes`` (the bytes its decode works through, default its length:
        ``budgetlens.ingest.admission.work_bytes`` counts a gzip body inflated) is over
        ``large_bytes``. Raises OtlpError as ``prepare`` does, DecodeUnavailable when the
        worker died (the pool restarts)."""
        executor = self._executor
        memory = self.memory
        work = max(len(body), work_bytes or 0)
        if executor is None or len(body) <= self.inline_bytes:
            prepared = prepare(body, content_type, content_encoding, max_bytes, memory)
            prepared.prints = {}  # remembered by the mapping already
            return prepared
        args = (body, content_type, content_encoding, max_bytes)
        result = await self._in_worker(executor, *args, None, memory is not None, work)
        if memory is not None:
            # Check and remember in one step, on the event loop (no other body is checked in
            # between): a span received earlier with other content is a span id collision,
            # rejected in this answer, not acknowledged and then lost to the store's primary
            # key (issue 23); and the tree rules' questions get the collector's answers
            # (``budgetlens.otlp.asked``). When the memory knows more than the worker's empty
            # stand-in, the body is mapped again with the part of it the body reads.
            conflicts = memory.claim_prints(result.prints) if result.prints else {}
            if conflicts or memory.knows_any(*questions(result.asked, result.remembered)):
                if conflicts:
                    log.info(
                        "%d span id collisions in a worker-mapped body; mapping it again", len(conflicts)
                    )
                seed = (memory.excerpt(seed_keys(result.asked, result.remembered)), conflicts)
                result = await self._in_worker(executor, *args, seed, True, work)
                memory.remember_prints(result.prints)
            memory.remember(result.remembered)
        result.prints, result.asked, result.remembered = {}, [], []
        return result

    async def _in_worker(
        self,
        executor: ProcessPoolExecutor,
        body: bytes | bytearray,
        content_type: str | None,
        content_encoding: str | None,
        max_bytes: int,
        seed: Seed | None,
        remember: bool,
        work: int = 0,
    ) -> Prepared:
        """``_prepare_in_worker`` in ``executor``; bodies whose ``work`` (bytes, at least their
        length) is over ``large_bytes`` one at a time, in the large-body worker."""
        loop = asyncio.get_running_loop()
        if self._large is None:
            self._large = asyncio.Semaphore(1)
        args = (body, content_type, content_encoding, max_bytes, seed, remember)
        large = max(len(body), work) > self.large_bytes and self._large_executor is not None
        try:
            if large:
                async with self._large:
                    executor = self._large_executor or executor
                    result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
                    # the worker exits now; its replacement's first task (before the next body)
                    with contextlib.suppress(RuntimeError):  # the pool is closing
                        executor.submit(_warm_prices)
            else:
                result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
        except BrokenProcessPool:
            log.error("a decode worker died; restarting the pool")
            if self._executor is executor:
                self._executor = self._new_executor()
                executor.shutdown(wait=False, cancel_futures=True)
            elif self._large_executor is executor:
                self._large_executor = self._new_executor(large=True)
                self._large_executor.submit(_warm_prices)
                executor.shutdown(wait=False, cancel_futures=True)
            raise DecodeUnavailable("a decode worker died; retry") from None
        if isinstance(result, tuple):
            raise OtlpError(*result)
        return result

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        executors = self._executor, self._large_executor
        self._executor = self._large_executor = None
        for executor in executors:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
