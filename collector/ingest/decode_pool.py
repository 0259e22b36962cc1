"""Decode and map OTLP bodies off the event loop: small ones in-process, large ones in workers.

``json.loads`` of a 15 MB body holds the interpreter for about a second, and protobuf parsing
plus the span mapping for several more, so a thread would still stall the event loop (and
``/healthz``). ``DecodePool`` runs bodies larger than ``inline_bytes`` in a small
``concurrent.futures.ProcessPoolExecutor`` (``workers`` processes, started by ``spawn``
so they inherit no threads and no open files such as the journal's lock, at a lower CPU
priority; bodies over ``large_bytes`` one at a time, each in a fresh worker of their own that
exits after it) and returns a ``Prepared``: the counts the receiver answers with and
the rows already encoded as a journal record payload (``budgetlens.ingest.journal.encode_batch``),
so the collector process never holds the decoded protobuf or the row objects of a large body.

Where a large body's memory goes (15 MB of protobuf, about 200 MB when decoded in-process):
the parsed ``ExportTraceServiceRequest`` (the upb arena, about 3× the wire size), the mapped
rows as Python tuples (the largest part: one object per value), the Arrow tables and their IPC
encoding. In a worker all of that lives and dies in the worker; the collector keeps the body
and the encoded payload (about the size of the Arrow tables). A worker's heap keeps much of a
freed peak resident (``malloc_trim`` returns only whole free pages), and it grew with each large
body; a fresh worker per large body peaks at one body's size however many come in a row.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import cast

from budgetlens.ingest.heap import release_free_memory, use_system_memory_pool
from budgetlens.ingest.journal import Encoded, encode_batch
from budgetlens.otlp import OtlpError, SpanMemory, decode, map_spans

log = logging.getLogger(__name__)

#: Bodies up to this size (bytes) are decoded in the collector process (a few ms at most).
DEFAULT_INLINE_BYTES = 1024 * 1024
#: Worker processes for larger bodies.
DEFAULT_WORKERS = 2
#: Bodies over this size (bytes) are decoded one at a time: a worker's memory while decoding
#: one is about 15× its size, so two at once would double the collector's peak.
DEFAULT_LARGE_BYTES = 4 * 1024 * 1024
#: How much lower than the request path's the workers' CPU priority is (nice steps): on a busy
#: machine the event loop (``/healthz``, small requests, acknowledgements) goes first.
WORKER_NICENESS = 10
#: A worker's span memory holds only the fingerprints it is given; its bound just has to hold them.
_WORKER_PRINTS = 1


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
    worker only: the collector checks them against its ``SpanMemory`` before it acknowledges.
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


def prepare(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    max_bytes: int,
    memory: SpanMemory | None = None,
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
    body, content_type, content_encoding, max_bytes, earlier: dict[tuple[str, str], int] | None = None
) -> Prepared | tuple[int, str]:
    """``prepare`` in a worker; an OtlpError comes back as ``(status, reason)`` (it does not
    pickle with its two arguments). The spans are fingerprinted (``Prepared.prints``) against a
    memory holding only ``earlier`` (``(trace hex, span hex) -> fingerprint`` of spans the
    collector received before with other content: they are rejected as span id collisions)."""
    memory = SpanMemory(max_spans=max(len(earlier or ()), 1) + _WORKER_PRINTS)
    if earlier:
        memory.remember_prints(earlier)
    try:
        result: Prepared | tuple[int, str] = prepare(body, content_type, content_encoding, max_bytes, memory)
    except OtlpError as error:
        result = error.status, error.reason
    del body
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


def _init_worker(collector_pid: int) -> None:
    """In each worker: ignore SIGINT (a Ctrl-C reaches the whole process group; the collector
    handles it and stops the workers itself), exit with the collector (even after ``kill -9``),
    lower the CPU priority, let Arrow hand freed memory back to the OS."""
    import os
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(collector_pid,), daemon=True).start()
    use_system_memory_pool()
    import genai_prices.data_snapshot  # noqa: F401  (the prices, before the first body: not on its clock)

    try:
        os.nice(WORKER_NICENESS)
    except OSError as error:  # not permitted: keep the priority
        log.debug("decode worker priority unchanged: %s", error)


class DecodePool:
    """Runs ``prepare`` for bodies over ``inline_bytes`` in ``workers`` processes.

    ``start`` creates the workers (and waits until one answers), ``close`` stops them.
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
        #: The collector's span memory (issue 15's tree rules across requests). Requests mapped
        #: in-process use it; a large body mapped in a worker is taken as self-contained for the
        #: tree rules, but its spans' fingerprints are checked against it and remembered (a
        #: different span under the ids of one received earlier is rejected on both paths).
        self.memory = memory
        self._executor: ProcessPoolExecutor | None = None
        #: bodies over ``large_bytes``: one worker, a fresh one for each body (see ``_new_executor``)
        self._large_executor: ProcessPoolExecutor | None = None
        self._large: asyncio.Semaphore | None = None  # created on the serving event loop

    def start(self) -> DecodePool:
        """Start the worker processes (idempotent); return self."""
        if self._executor is None:
            # the large-body worker is the one started now (as many processes at rest as one
            # pool had); the others start with the first body between the two sizes
            self._executor = self._new_executor()
            self._large_executor = self._new_executor(large=True)
            self._large_executor.submit(_warm_up).result()
        return self

    def _new_executor(self, large: bool = False) -> ProcessPoolExecutor:
        """``workers`` processes, started when first needed; ``large``: one process that exits
        after each body, its replacement started at once (issue 23: a worker's heap after a
        15 MB body keeps much of that body's peak resident, and a few such bodies in a row left
        it larger than any one body needs; a fresh worker peaks at one body's size)."""
        # "spawn": each worker is the collector's own child. A forkserver would be a second,
        # long-lived process that outlives a collector killed with -9 (the workers watch the
        # collector's pid and exit with it; a forkserver does not).
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(
            max_workers=1 if large else self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(),),
            max_tasks_per_child=1 if large else None,
        )

    async def prepare(
        self, body: bytes | bytearray, content_type: str | None, content_encoding: str | None, max_bytes: int
    ) -> Prepared:
        """``prepare`` for ``body``: in-process when it is small or the pool is not started,
        else in a worker. Raises OtlpError as ``prepare`` does, DecodeUnavailable when the
        worker died (the pool restarts)."""
        executor = self._executor
        if executor is None or len(body) <= self.inline_bytes:
            prepared = prepare(body, content_type, content_encoding, max_bytes, self.memory)
            prepared.prints = {}  # remembered by the mapping already
            return prepared
        result = await self._in_worker(executor, body, content_type, content_encoding, max_bytes, None)
        memory = self.memory
        if memory is not None and result.prints:
            # the same rule as in-process (issue 23): a span received earlier with other content
            # is a span id collision, rejected in this answer, not acknowledged and then lost to
            # the store's primary key. Check and remember in one step, on the event loop (so no
            # other body is checked in between); on a conflict the body is mapped again with
            # the earlier fingerprints, so the rejection, its stub rows and flags are the usual.
            conflicts = memory.claim_prints(result.prints)
            if conflicts:
                log.info("%d span id collisions in a worker-decoded body; mapping it again", len(conflicts))
                result = await self._in_worker(
                    executor, body, content_type, content_encoding, max_bytes, conflicts
                )
                memory.remember_prints(result.prints)
        result.prints = {}
        return result

    async def _in_worker(
        self,
        executor: ProcessPoolExecutor,
        body: bytes | bytearray,
        content_type: str | None,
        content_encoding: str | None,
        max_bytes: int,
        earlier: dict[tuple[str, str], int] | None,
    ) -> Prepared:
        """``_prepare_in_worker`` in ``executor``; bodies over ``large_bytes`` one at a time, in
        the large-body worker."""
        loop = asyncio.get_running_loop()
        if self._large is None:
            self._large = asyncio.Semaphore(1)
        args = (body, content_type, content_encoding, max_bytes, earlier)
        large = len(body) > self.large_bytes and self._large_executor is not None
        try:
            if large:
                async with self._large:
                    executor = self._large_executor or executor
                    result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
            else:
                result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
        except BrokenProcessPool:
            log.error("a decode worker died; restarting the pool")
            if self._executor is executor:
                self._executor = self._new_executor()
                executor.shutdown(wait=False, cancel_futures=True)
            elif self._large_executor is executor:
                self._large_executor = self._new_executor(large=True)
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
