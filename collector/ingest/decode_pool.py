"""Decode and map OTLP bodies off the event loop, in worker processes (both cores).

The span mapping takes about 90 µs a span on this machine, and ``json.loads`` of a 15 MB body
holds the interpreter for about a second: on the event loop (or in a thread, under the GIL) they
would stall ``/healthz`` and every other request, and use one core. ``DecodePool`` maps a body
of at most ``inline_bytes`` (default 64 KiB: about a hundred spans, a few ms) in the collector,
and every larger one in a ``concurrent.futures.ProcessPoolExecutor`` (``workers`` processes,
started by ``spawn`` so they inherit no threads and no open files such as the journal's lock;
bodies over ``large_bytes`` one at a time, each in a fresh worker that exits after it). A
protobuf body that arrives while no other is in the workers is mapped by all of them at once,
each the traces of its shard (``budgetlens.ingest.shards``: one client's bodies use both cores).
It returns a ``Prepared``: the counts the receiver answers with and the rows already encoded as
journal record payloads (``budgetlens.ingest.journal.encode_batch``), so the collector never
holds the decoded protobuf or the row objects of a body; the receiver journals them and answers
only after the fsync, as for a body mapped in-process.

The collector's ``SpanMemory`` (the tree rules and span identity across requests) stays in the
collector: a worker maps with a stand-in that records what the mapping asked of it
(``budgetlens.otlp.asked``); the collector checks those questions and the fingerprints against
its memory on the event loop, remembers the body's spans, and in the rare case where its memory
knows something the stand-in did not (a span id collision, a run named by an ancestor sent
earlier, a call below that came earlier) has the body mapped again with the part of its
memory the body's rules read. Either way the rows are those an in-process mapping gives.

A large body's memory (15 MB of protobuf, about 200 MB decoded): the parsed request (about 3×
the wire size), the rows as Python objects (the largest part), the Arrow tables and their IPC
encoding, all in the worker; the collector keeps the body and the payload. A worker's heap keeps
much of a freed peak resident (``malloc_trim`` returns only whole free pages), so each large body
gets a fresh worker: it peaks at one body's size however many come in a row.
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

from budgetlens.ingest.heap import TRIM_AFTER_BYTES, release_free_memory
from budgetlens.ingest.journal import Encoded, encode_batch
from budgetlens.ingest.shards import is_protobuf, map_in_shards
from budgetlens.ingest.worker_process import (
    init_worker,
    load_prices,
    log_failed_start,
    warm_up,
)
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
    remembered (``budgetlens.otlp.asked.AskedMemory``), for the collector's memory;
    ``more_encoded``: the further journal payloads of the same body (its other shards' rows:
    ``budgetlens.ingest.shards``); ``record_runs``: a shard's run ids of its run records.
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
    more_encoded: list[Encoded] = field(default_factory=list, repr=False)
    record_runs: frozenset[str] = field(default_factory=frozenset, repr=False)

    @property
    def payloads(self) -> list[Encoded]:
        """Every journal payload of the body (none when it has no rows)."""
        return [] if self.encoded is None else [self.encoded, *self.more_encoded]


def prepare(
    body: bytes | bytearray,
    content_type: str | None,
    content_encoding: str | None,
    max_bytes: int,
    memory: Memory | None = None,
    now_ns: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Prepared:
    """Inflate, decode, map and encode one request body (pure; runs in any process); ``now_ns``
    and ``shard`` (only the spans of the traces of shard k of n): as for ``map_request``.

    Raises ``budgetlens.otlp.OtlpError`` (415, 413 or 400) for a body refused as a whole.
    """
    # bytes-like is fine for every decoder here (protobuf, json, zlib): no copy of the body
    kind, decoded = decode(cast(bytes, body), content_type, content_encoding, max_bytes)
    del body
    try:
        mapped = map_spans(decoded, memory=memory, now_ns=now_ns, shard=shard)
    except RecursionError:
        raise OtlpError(400, "request is nested too deeply") from None
    del decoded
    encoded = None
    if mapped.rows:
        encoded = Encoded(encode_batch(*mapped.tables()), mapped.rows)
    message = mapped.error_message() if mapped.rejected else ""
    short = mapped.error_message(2) if mapped.rejected else ""
    runs = frozenset(row["run_id"] for row in mapped.record_rows) if shard is not None else frozenset()
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
        record_runs=runs,
    )


def _prepare_in_worker(
    body,
    content_type,
    content_encoding,
    max_bytes,
    seed: Seed | None = None,
    remember: bool = True,
    now_ns: int | None = None,
    shard: tuple[int, int] | None = None,
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
        result: Prepared | tuple[int, str] = prepare(
            body, content_type, content_encoding, max_bytes, memory, now_ns, shard
        )
    except OtlpError as error:
        result = error.status, error.reason
    del body
    if memory is not None and isinstance(result, Prepared):
        result.prints, result.asked, result.remembered = memory.prints, memory.runs, memory.remembered
    if large:
        release_free_memory()
    return result


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
        #: bodies (or shards) in the workers now; a body arriving when none is gets sharded
        self._busy = 0

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
            warm = self._large_executor.submit(warm_up)  # its first task (see _new_executor)
            warm.add_done_callback(log_failed_start)
        return self

    def _new_executor(self, large: bool = False) -> ProcessPoolExecutor:
        """``workers`` processes, started when first needed; ``large``: one process that exits
        after each body, its replacement started at once (issue 23: a worker's heap after a
        15 MB body keeps much of that body's peak resident, and a few such bodies in a row left
        it larger than any one body needs; a fresh worker peaks at one body's size). Each
        large-body worker's first task is a warm-up (``start``: ``warm_up``; its replacements:
        ``load_prices``), so the warm-up
        does not use up the life of the worker started with the pool (it would be replaced at
        once: a second worker start, a second or two of CPU, with every collector start)."""
        # "spawn": each worker is the collector's own child. A forkserver would be a second,
        # long-lived process that outlives a collector killed with -9 (the workers watch the
        # collector's pid and exit with it; a forkserver does not).
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(
            max_workers=1 if large else self.workers,
            mp_context=context,
            initializer=init_worker,
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
        if self.workers > 1 and not self._busy and work <= self.large_bytes and is_protobuf(content_type):
            joined = await map_in_shards(
                lambda now_ns, shard: self._in_worker(
                    executor, *args, None, memory is not None, work, now_ns, shard
                ),
                self.workers,
                memory,
            )
            if joined is not None:
                return joined
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
        now_ns: int | None = None,
        shard: tuple[int, int] | None = None,
    ) -> Prepared:
        """``_prepare_in_worker`` in ``executor``; bodies whose ``work`` (bytes, at least their
        length) is over ``large_bytes`` one at a time, in the large-body worker."""
        loop = asyncio.get_running_loop()
        if self._large is None:
            self._large = asyncio.Semaphore(1)
        args = (body, content_type, content_encoding, max_bytes, seed, remember, now_ns, shard)
        large = max(len(body), work) > self.large_bytes and self._large_executor is not None
        self._busy += 1
        try:
            if large:
                async with self._large:
                    executor = self._large_executor or executor
                    result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
                    # the worker exits now; its replacement's first task (before the next body)
                    with contextlib.suppress(RuntimeError):  # the pool is closing
                        executor.submit(load_prices)
            else:
                result = await loop.run_in_executor(executor, _prepare_in_worker, *args)
        except BrokenProcessPool:
            log.error("a decode worker died; restarting the pool")
            if self._executor is executor:
                self._executor = self._new_executor()
                executor.shutdown(wait=False, cancel_futures=True)
            elif self._large_executor is executor:
                self._large_executor = self._new_executor(large=True)
                self._large_executor.submit(load_prices)
                executor.shutdown(wait=False, cancel_futures=True)
            raise DecodeUnavailable("a decode worker died; retry") from None
        finally:
            self._busy -= 1
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
