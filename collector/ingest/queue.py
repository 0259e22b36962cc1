"""The collector's ingest path: journal first (group commit), then load into DuckDB in groups.

``submit`` hands a request's mapped rows to the journal thread, which converts them to Arrow,
appends one record per request to the write-ahead journal (``budgetlens.ingest.journal``, next to the
database in ``<db>.journal/``) and fsyncs once for every group of requests waiting together
(group commit); only then does the request's future resolve and the receiver answer 200. An
acknowledged span is therefore on disk: ``kill -9`` at any moment loses none.

The loader thread moves journaled batches into DuckDB in larger groups (every ``load_interval_s``
seconds or ``max_group_spans`` rows, whichever comes first), each through
``budgetlens.store.write_connection`` + ``write_batch`` (the file is held only while committing, so
dashboard readers get in between), counts the Prometheus metrics from the rows actually inserted,
then marks the batches loaded in the journal (deleting fully loaded segments). On ``start``,
every journaled batch not yet marked loaded is replayed into DuckDB first (replaying one already
loaded is harmless: primary keys and upserts make it a no-op). So a span is queryable in DuckDB
about ``load_interval_s`` after it is acknowledged. The loader thread and the replay live in
``budgetlens.ingest.loader``; this module holds intake, backpressure and the journal thread.

Backpressure: ``submit`` raises ``QueueFull`` while more than ``max_queue_spans`` rows are
accepted but not yet loaded (the receiver answers 503 with Retry-After), ``StoreUnavailable``
while the store cannot be written (the journal keeps what it has; the loader retries with a
backoff), ``IngestClosed`` after ``close``. ``close`` (SIGTERM) stops intake, fsyncs, loads
everything and joins both threads.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa

from budgetlens.config import ENV_JOURNAL_DIR, is_lake_location
from budgetlens.ingest.journal import Batch, Journal, encode_batch
from budgetlens.ingest.loader import Loader
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.otlp.mapping import Mapped

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SPANS = 200_000
DEFAULT_MAX_GROUP_SPANS = 50_000
DEFAULT_LOAD_INTERVAL_S = 0.25


class QueueFull(RuntimeError):
    """More rows are accepted but not yet loaded than the bound allows; retry later."""


class IngestClosed(RuntimeError):
    """The collector is shutting down and takes no more batches."""


class StoreUnavailable(RuntimeError):
    """The DuckDB store cannot be written right now; retry later."""


#: ``commit(calls, records, events)`` with pyarrow tables; replaces the store write (tests).
CommitFn = Callable[[pa.Table, pa.Table, pa.Table], None]


def journal_dir(db_path: str | os.PathLike) -> Path:
    """The journal directory of the database file ``db_path``: ``<db_path>.journal``.

    A DuckLake store is shared by many collectors, each with its own journal:
    ``$BUDGETLENS_JOURNAL_DIR``, else ``budgetlens-lake-<hash of the catalog>.journal`` in the
    working directory.
    """
    if is_lake_location(db_path):
        from budgetlens.store.location import parse_lake

        configured = os.environ.get(ENV_JOURNAL_DIR)
        return (
            Path(configured) if configured else Path(f"budgetlens-lake-{parse_lake(db_path).key()}.journal")
        )
    path = Path(db_path)
    return path.with_name(path.name + ".journal")


class IngestQueue(Loader):
    """Journal + loader for the DuckDB file ``db_path`` (see the module docstring; the loader
    thread and replay are inherited from ``budgetlens.ingest.loader.Loader``).

    ``metrics`` (``CollectorMetrics``) is updated after each load; ``commit`` replaces the store
    write (tests inject one; metrics are then not counted). Raises ValueError for a non-positive
    ``max_queue_spans``, ``max_group_spans`` or ``load_interval_s``.
    """

    def __init__(
        self,
        db_path: str | os.PathLike,
        *,
        metrics: CollectorMetrics | None = None,
        max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
        max_group_spans: int = DEFAULT_MAX_GROUP_SPANS,
        load_interval_s: float = DEFAULT_LOAD_INTERVAL_S,
        commit: CommitFn | None = None,
    ):
        if max_queue_spans < 1:
            raise ValueError(f"max_queue_spans must be >= 1 (got {max_queue_spans})")
        if max_group_spans < 1:
            raise ValueError(f"max_group_spans must be >= 1 (got {max_group_spans})")
        if load_interval_s <= 0:
            raise ValueError(f"load_interval_s must be > 0 (got {load_interval_s})")
        self.db_path = db_path if is_lake_location(db_path) else Path(db_path)
        self.metrics = metrics or CollectorMetrics()
        self.max_queue_spans = max_queue_spans
        self.max_group_spans = max_group_spans
        self.load_interval_s = load_interval_s
        self._commit = commit
        self._journal: Journal | None = None
        self._cond = threading.Condition()
        self._incoming: list[tuple[Mapped, Future, int]] = []  # waiting for the journal
        self._journaled: deque[tuple[Batch, float]] = deque()  # waiting for the loader
        self._backlog = 0  # rows accepted and not yet loaded
        self._store_error: BaseException | None = None
        self._closing = False
        self._started = False
        self._journal_thread = threading.Thread(
            target=self._journal_loop, name="budgetlens-journal", daemon=True
        )
        self._loader_thread = threading.Thread(
            target=self._loader_loop, name="budgetlens-loader", daemon=True
        )

    # --- state ----------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Rows accepted but not yet loaded into DuckDB (the backlog)."""
        return self._backlog

    @property
    def lag_s(self) -> float:
        """Seconds since the oldest journaled batch not yet loaded was journaled (0 when none)."""
        with self._cond:
            oldest = self._journaled[0][1] if self._journaled else None
        return time.monotonic() - oldest if oldest is not None else 0.0

    @property
    def alive(self) -> bool:
        """True while the journal and loader threads run."""
        return self._journal_thread.is_alive() and self._loader_thread.is_alive()

    @property
    def store_error(self) -> str | None:
        """Why the store cannot be written right now, or None."""
        error = self._store_error
        return None if error is None else f"{type(error).__name__}: {error}"

    # --- intake ---------------------------------------------------------------------------
    def start(self) -> IngestQueue:
        """Open the journal, replay what it holds into the store, start both threads
        (idempotent); return self. A store that cannot be written is logged, not raised: the
        replayed batches stay queued and the collector answers 503 until the loader's retry
        succeeds. Raises ``budgetlens.ingest.journal.JournalError`` when the journal directory is a
        file or another collector holds it, OSError when it cannot be created."""
        with self._cond:
            if self._started:
                return self
            self._journal = Journal(journal_dir(self.db_path))
            self._started = True
        self._replay()  # budgetlens.ingest.loader
        self._journal_thread.start()
        self._loader_thread.start()
        return self

    def submit(self, mapped: Mapped) -> Future:
        """Queue ``mapped`` rows; the future resolves (None) once they are journaled and fsynced.

        Raises QueueFull when ``max_queue_spans`` rows are already waiting (a batch larger than
        the bound is accepted when nothing waits), StoreUnavailable while the store cannot be
        written, IngestClosed after ``close``. The future fails with the journal's error.
        """
        spans = max(1, mapped.rows)
        future: Future = Future()
        with self._cond:
            if self._closing or not self._started:
                raise IngestClosed("the collector is shutting down")
            if self._store_error is not None:
                raise StoreUnavailable(f"store unavailable: {type(self._store_error).__name__}")
            if self._backlog and self._backlog + spans > self.max_queue_spans:
                raise QueueFull(f"{self._backlog} spans are waiting to be loaded")
            self._incoming.append((mapped, future, spans))
            self._backlog += spans
            self.metrics.queue_spans.set(self._backlog)
            self._cond.notify_all()
        return future

    def close(self, timeout_s: float | None = 60.0) -> None:
        """Stop intake, fsync the journal, load everything, join both threads (idempotent)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in (self._journal_thread, self._loader_thread):
            if thread.is_alive():
                thread.join(timeout_s)
                if thread.is_alive():
                    log.error(
                        "%s did not finish within %.0f s; %d spans not loaded (they stay "
                        "in the journal and load at the next start)",
                        thread.name,
                        timeout_s,
                        self._backlog,
                    )
        if self._journal is not None:
            self._journal.close()

    # --- the journal thread -------------------------------------------------------------------
    def _journal_loop(self) -> None:
        while True:
            with self._cond:
                while not self._incoming and not self._closing:
                    self._cond.wait()
                if not self._incoming:
                    return  # closing and drained; the loader finishes the rest
                group, self._incoming = self._incoming, []
            try:
                self._journal_group(group)
            except BaseException as error:  # never let the thread die: fail what is left
                log.exception("journal thread error")
                self._fail_requests(
                    [(future, spans, error) for _, future, spans in group if not future.done()]
                )

    def _journal_group(self, group: list[tuple[Mapped, Future, int]]) -> None:
        """Append ``group`` to the journal, fsync once, then resolve the futures.

        A request whose rows cannot be converted fails alone (ValueError: a value outside the
        store's types; the mapping should have rejected it). When an append or the fsync fails
        (disk full, I/O), every request of the group fails (the receiver answers 503) and the
        journal abandons its segment, so later records never follow a torn one.
        """
        started = time.perf_counter()
        ready, failed = [], []
        for mapped, future, spans in group:
            try:
                ready.append((_to_batch(mapped), future, spans))
            except Exception as error:
                failed.append((future, spans, error))
        done = []
        try:
            for batch, future, spans in ready:
                batch.seq = self._journal.append(encode_batch(batch.calls, batch.records, batch.events))
                done.append((batch, future, spans))
            if done:
                self._journal.sync()
        except Exception as error:
            self._journal.abandon_segment()
            self.metrics.journal_failures.inc(len(ready))
            failed += [(future, spans, error) for _, future, spans in ready]
            done = []
        self.metrics.journal_fsync_duration.observe(time.perf_counter() - started)
        now = time.monotonic()
        with self._cond:
            for batch, _, _ in done:
                self._journaled.append((batch, now))
            self._cond.notify_all()
        for _, future, _ in done:
            future.set_result(None)
        self._fail_requests(failed)

    def _fail_requests(self, failed: list[tuple[Future, int, BaseException]]) -> None:
        """Take ``failed`` requests' rows off the backlog and fail their futures."""
        with self._cond:
            for _, spans, _ in failed:
                self._backlog -= spans
            self.metrics.queue_spans.set(self._backlog)
            self._cond.notify_all()
        for future, _, error in failed:
            log.error("could not journal a batch: %s: %s", type(error).__name__, error)
            if not future.done():
                future.set_exception(error)


def _to_batch(mapped: Mapped) -> Batch:
    return Batch(0, *mapped.tables())
