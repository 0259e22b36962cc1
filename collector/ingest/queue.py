"""The collector's ingest path: journal first (group commit), then load into DuckDB in groups.

``submit`` hands a request's mapped rows to the journal thread, which converts them to Arrow,
appends one record per request to the write-ahead journal (``budgetlens.ingest.journal``, next to the
database in ``<db>.journal/``) and fsyncs once for every group of requests waiting together
(group commit); only then does the request's future resolve and the receiver answer 200. An
acknowledged span is therefore on disk: ``kill -9`` at any moment loses none.

The loader (``budgetlens.ingest.loader.Loader``, its own thread) moves journaled batches into
DuckDB in larger groups (every ``load_interval_s`` seconds or ``max_group_spans`` rows), so a
span is queryable about ``load_interval_s`` after it is acknowledged; on ``start`` it first
replays what the journal holds that was never loaded.

Backpressure is on the journal, not on memory: ``submit`` raises ``QueueFull`` once the journal
bytes acknowledged but not yet loaded reach ``max_journal_bytes`` (the disk budget; the receiver
answers 503 with Retry-After). A store that cannot be written (readers hold the file, it is
broken) does not stop intake: the journal absorbs the backlog up to its budget while the loader
retries. At most ``max_queue_spans`` waiting rows stay in memory; older ones are read back from
the journal. ``IngestClosed`` after ``close``; ``close`` (SIGTERM) stops intake, fsyncs, loads
what it can within ``DEFAULT_DRAIN_TIMEOUT_S`` (the rest stays journaled) and joins both threads.

On a DuckLake the loader stages each group and folds (``budgetlens.ingest.fold``), and
groups are formed every ``DEFAULT_LAKE_LOAD_INTERVAL_S``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from budgetlens.config import ENV_JOURNAL_DIR, apply_collector_settings, is_lake_location, resolve
from budgetlens.ingest.backlog import Backlog, Pending
from budgetlens.ingest.heap import use_system_memory_pool
from budgetlens.ingest.journal import Batch, Encoded, Journal, decode_batch, encode_batch
from budgetlens.ingest.loader import LOADER_WRITE_TIMEOUT_S, CommitFn, Loader, warm_up
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.otlp.mapping import Mapped
from budgetlens.store.host import DEFAULT_CHECKPOINT_INTERVAL_S, DEFAULT_CHECKPOINT_WAL_BYTES, StoreHost

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SPANS = 50_000
DEFAULT_MAX_JOURNAL_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_GROUP_SPANS = 50_000
DEFAULT_LOAD_INTERVAL_S = 0.25
#: Load interval on a DuckLake (s): about one commit per collector per second under load
#: (a PostgreSQL catalog takes some tens of commits a second in total).
DEFAULT_LAKE_LOAD_INTERVAL_S = 1.0
#: How long ``close`` (SIGTERM) keeps loading before it leaves the rest in the journal (s).
DEFAULT_DRAIN_TIMEOUT_S = 30.0


class QueueFull(RuntimeError):
    """The journal backlog (acknowledged, not yet loaded) is at its disk budget; retry later."""


class IngestClosed(RuntimeError):
    """The collector is shutting down and takes no more batches."""


def journal_dir(db_path: str | os.PathLike) -> Path:
    """The journal directory of the database file ``db_path``: ``<db_path>.journal``.

    A DuckLake store is shared by many collectors, each with its own journal:
    ``$BUDGETLENS_JOURNAL_DIR``, else ``budgetlens-lake-<hash of the catalog>.journal`` in the
    working directory.
    """
    if is_lake_location(db_path):
        from budgetlens.store.location import parse_lake

        configured = resolve(None, ENV_JOURNAL_DIR, None)
        return (
            Path(configured) if configured else Path(f"budgetlens-lake-{parse_lake(db_path).key()}.journal")
        )
    path = Path(db_path)
    return path.with_name(path.name + ".journal")


class IngestQueue:
    """Journal + loader for the DuckDB file ``db_path`` (see the module docstring).

    ``metrics`` (``CollectorMetrics``) is updated after each load; ``commit`` replaces the store
    write (tests inject one; metrics are then not counted). ``max_queue_spans``: waiting rows
    held in memory (rows); ``max_journal_bytes``: the journal backlog at which intake answers
    503 (bytes). Raises ValueError for a non-positive ``max_queue_spans``,
    ``max_journal_bytes``, ``max_group_spans`` or ``load_interval_s``.
    """

    def __init__(
        self,
        db_path: str | os.PathLike,
        *,
        metrics: CollectorMetrics | None = None,
        max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
        max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
        max_group_spans: int = DEFAULT_MAX_GROUP_SPANS,
        load_interval_s: float | None = None,
        commit: CommitFn | None = None,
        checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
        checkpoint_wal_bytes: int = DEFAULT_CHECKPOINT_WAL_BYTES,
    ):
        if load_interval_s is None:
            load_interval_s = (
                DEFAULT_LAKE_LOAD_INTERVAL_S if is_lake_location(db_path) else DEFAULT_LOAD_INTERVAL_S
            )
        for name, value in (
            ("max_queue_spans", max_queue_spans),
            ("max_journal_bytes", max_journal_bytes),
            ("max_group_spans", max_group_spans),
            ("load_interval_s", load_interval_s),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0 (got {value})")
        apply_collector_settings()  # before the first rollup of a journaled batch (Acero)
        use_system_memory_pool()  # freed Arrow buffers go back to the OS (``heap``)
        self.db_path: Path | str = str(db_path) if is_lake_location(db_path) else Path(db_path)
        self.metrics = metrics or CollectorMetrics()
        self.max_queue_spans = max_queue_spans
        self.max_journal_bytes = max_journal_bytes
        self.max_group_spans = max_group_spans
        self.load_interval_s = load_interval_s
        self._commit = commit
        self._backlog = Backlog(max_queue_spans)
        self._cond = self._backlog.cond
        self._incoming: list[tuple[Mapped | Encoded, Future, int]] = []  # waiting for the journal
        self._started = False
        self._journal: Journal | None = None
        self._loader: Loader | None = None
        self._journal_thread = threading.Thread(
            target=self._journal_loop, name="budgetlens-journal", daemon=True
        )
        #: a file store's one long-lived connection (None on a lake or with an injected commit)
        self.store_host: StoreHost | None = None
        if commit is None and not is_lake_location(db_path):
            self.store_host = StoreHost(
                self.db_path,
                checkpoint_interval_s=checkpoint_interval_s,
                checkpoint_wal_bytes=checkpoint_wal_bytes,
                open_timeout_s=LOADER_WRITE_TIMEOUT_S,
            )

    # --- state ----------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Rows accepted but not yet loaded into DuckDB (the backlog, rows)."""
        return self._backlog.rows

    @property
    def backlog_bytes(self) -> int:
        """Journal bytes acknowledged but not yet loaded into DuckDB."""
        return self._backlog.bytes

    @property
    def lag_s(self) -> float:
        """Seconds since the oldest batch not yet loaded was journaled (0 when none), counting
        a group the loader is committing or retrying."""
        with self._cond:
            oldest = self._backlog.oldest()
        return time.monotonic() - oldest if oldest is not None else 0.0

    @property
    def alive(self) -> bool:
        """True while the journal and loader threads run."""
        loader = self._loader
        return self._journal_thread.is_alive() and loader is not None and loader.thread.is_alive()

    @property
    def store_error(self) -> str | None:
        """Why the store could not be written at the last attempt, or None (on a lake: the
        last stage, else the last fold)."""
        error = self._backlog.store_error
        folder = self._loader.folder if self._loader is not None else None
        if error is None and folder is not None and folder.error is not None:
            error = folder.error
            return f"fold failed: {type(error).__name__}: {error}"
        return None if error is None else f"{type(error).__name__}: {error}"

    # --- intake ---------------------------------------------------------------------------
    def start(self, *, replay_in_background: bool = False) -> IngestQueue:
        """Open the journal, replay what it holds into the store, start both threads
        (idempotent); return self. ``replay_in_background``: queue the journaled batches and
        return at once, the loader thread loads them (the collector serves and journals
        meanwhile); else they are loaded before this returns. A store that cannot be written is
        logged, not raised: the replayed batches stay queued and the loader retries. Raises
        ``budgetlens.ingest.journal.JournalError`` when the journal directory is a file or
        another collector holds it, OSError when it cannot be created."""
        with self._cond:
            if self._started:
                return self
            self._journal = Journal(journal_dir(self.db_path))
            self._loader = Loader(
                self.db_path,
                self._journal,
                self._backlog,
                self.metrics,
                commit=self._commit,
                max_group_spans=self.max_group_spans,
                load_interval_s=self.load_interval_s,
                intake_alive=lambda: bool(self._incoming) or self._journal_thread.is_alive(),
                host=self.store_host,
            )
            self._started = True
        warm_up()
        if replay_in_background:
            self._loader.queue_unloaded()
        else:
            self._loader.replay()
        self._journal_thread.start()
        self._loader.thread.start()
        return self

    def submit(self, mapped: Mapped | Encoded) -> Future:
        """Queue ``mapped`` rows (or rows already encoded as a journal payload); the future
        resolves (None) once they are journaled and fsynced.

        Raises QueueFull when the journal backlog is at ``max_journal_bytes`` (a batch is
        accepted whenever nothing waits), IngestClosed after ``close``. The future fails with
        the journal's error.
        """
        spans = max(1, mapped.rows)
        future: Future = Future()
        backlog = self._backlog
        with self._cond:
            if backlog.closing or not self._started:
                raise IngestClosed("the collector is shutting down")
            if backlog.rows and backlog.bytes >= self.max_journal_bytes:
                raise QueueFull(
                    f"{backlog.rows} spans ({backlog.bytes} journal bytes, the budget is "
                    f"{self.max_journal_bytes}) are waiting to be loaded"
                )
            self._incoming.append((mapped, future, spans))
            backlog.rows += spans
            self.metrics.queue_spans.set(backlog.rows)
            self._cond.notify_all()
        return future

    def close(self, timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S) -> None:
        """Stop intake, fsync the journal, load what is journaled for up to ``timeout_s``
        seconds (the drain bound: what is not loaded by then stays in the journal and loads at
        the next start), join both threads (idempotent)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._backlog.closing = True
            if self._loader is not None:
                self._loader.drain_deadline = deadline
            self._cond.notify_all()
        threads = [self._journal_thread] + ([self._loader.thread] if self._loader else [])
        for thread in threads:
            if thread.is_alive():
                # the loader stops at the deadline between commits; one commit in flight may
                # end a few seconds past it
                thread.join(max(0.0, deadline - time.monotonic()) + 5.0)
                if thread.is_alive():
                    log.error(
                        "%s did not finish within %.0f s; %d spans not loaded (they stay "
                        "in the journal and load at the next start)",
                        thread.name,
                        timeout_s,
                        self._backlog.rows,
                    )
        if self._journal is not None:
            self._journal.close()
        if self.store_host is not None:
            self.store_host.close()

    # --- the journal thread -------------------------------------------------------------------
    def _journal_loop(self) -> None:
        while True:
            with self._cond:
                while not self._incoming and not self._backlog.closing:
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

    def _journal_group(self, group: list[tuple[Mapped | Encoded, Future, int]]) -> None:
        """Append ``group`` to the journal, fsync once, then resolve the futures.

        A request whose rows cannot be converted fails alone (ValueError: a value outside the
        store's types; the mapping should have rejected it). When an append or the fsync fails
        (disk full, I/O), every request of the group fails (the receiver answers 503) and the
        journal abandons its segment, so later records never follow a torn one.
        """
        journal = self._journal
        assert journal is not None  # started
        started = time.perf_counter()
        ready: list[tuple[Batch, bytes, Future, int]] = []
        failed: list[tuple[Future, int, BaseException]] = []
        for mapped, future, spans in group:
            try:
                ready.append((*_to_batch(mapped), future, spans))
            except Exception as error:
                failed.append((future, spans, error))
        done = []
        try:
            for batch, payload, future, spans in ready:
                batch.seq = journal.append(payload)
                done.append((batch, future, spans))
            if done:
                journal.sync()
        except Exception as error:
            journal.abandon_segment()
            self.metrics.journal_failures.inc(len(ready))
            failed += [(future, spans, error) for _, _, future, spans in ready]
            done = []
        self.metrics.journal_fsync_duration.observe(time.perf_counter() - started)
        now = time.monotonic()
        with self._cond:
            for batch, _, spans in done:
                nbytes = journal.record_bytes(batch.seq)
                self._backlog.add(Pending(batch.seq, batch.spans, nbytes, now, batch))
                self._backlog.rows += batch.spans - spans  # counted as ``spans`` at submit
            self._cond.notify_all()
        for _, future, _ in done:
            future.set_result(None)
        self._fail_requests(failed)

    def _fail_requests(self, failed: list[tuple[Future, int, BaseException]]) -> None:
        """Take ``failed`` requests' rows off the backlog and fail their futures."""
        with self._cond:
            for _, spans, _ in failed:
                self._backlog.rows -= spans
            self.metrics.queue_spans.set(self._backlog.rows)
            self._cond.notify_all()
        for future, _, error in failed:
            log.error("could not journal a batch: %s: %s", type(error).__name__, error)
            if not future.done():
                future.set_exception(error)


def _to_batch(rows: Mapped | Encoded) -> tuple[Batch, bytes]:
    """The batch (sequence number not yet set) and its journal payload."""
    if isinstance(rows, Encoded):
        return decode_batch(0, rows.payload), rows.payload
    tables = rows.tables()
    return Batch(0, *tables), encode_batch(*tables)
