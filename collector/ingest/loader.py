"""The collector's loader: journaled batches → DuckDB in groups, and replay at start.

``Loader`` holds the ``budgetlens.ingest.backlog.Backlog`` (what intake and the loader share),
the open journal and the metrics as fields and runs the loader thread.

Journaled batches move into DuckDB in groups (every ``load_interval_s`` seconds or
``max_group_spans`` rows, whichever comes first), each one ``write_batch`` on a file store's
long-lived connection (``budgetlens.store.host.StoreHost``: held for the collector's life,
checkpointed between commits by time or WAL size; readers query through the collector), or
through ``budgetlens.store.write_connection`` without a host (a lake, tests).
The Prometheus metrics are counted from the rows actually inserted, then the batches are marked
loaded in the journal (deleting fully loaded segments). A group the store refuses for its data is
loaded around the bad rows (``budgetlens.ingest.dead_letter``).

Memory is bounded by rows, not by the backlog: past ``Backlog.memory_rows`` rows held in memory,
a journaled batch keeps only its sequence number and is read back from the journal when its turn
comes. So while the store cannot be written (other processes hold it open, a full disk under
it), the collector keeps acknowledging until the journal backlog reaches its disk budget
(``IngestQueue.max_journal_bytes``), and the loader retries: each attempt waits up to
``LOADER_WRITE_TIMEOUT_S`` for the file, then backs off (``_RETRY_MIN_S`` doubling up to
``_RETRY_MAX_S`` seconds); ``Backlog.store_error`` says why meanwhile, and the backlog's rows,
bytes and age stay true (a group being retried still counts).

On start every journaled batch not yet marked loaded is queued before any new one and loaded
at once, not a load interval later (replaying one already loaded is harmless: primary keys and
upserts make it a no-op). The loader thread runs ``LOADER_NICENESS`` nice steps below the
request path. ``warm_up`` imports before the threads start what the first commit would
otherwise import in the loader thread (pandas, about 1 s of work that holds the GIL).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from budgetlens.config import is_lake_location
from budgetlens.ingest.backlog import Backlog, Pending
from budgetlens.ingest.dead_letter import DEAD_LETTER_FILE, is_data_error, load_around_bad_rows
from budgetlens.ingest.fold import Folder
from budgetlens.ingest.heap import TRIM_AFTER_BYTES, release_free_memory
from budgetlens.ingest.journal import Batch, Journal
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.store import write_batch, write_connection
from budgetlens.store.host import StoreHost
from budgetlens.store.lake_ingest import STAGE_CONFLICT_TIMEOUT_S, stage_batch, staged_bound

log = logging.getLogger(__name__)

_RETRY_MIN_S, _RETRY_MAX_S = 0.5, 5.0
#: How long one load attempt waits for other processes to let go of the store file (s).
LOADER_WRITE_TIMEOUT_S = 2.0
#: How much lower than the request path's the loader thread's CPU priority is (nice steps).
LOADER_NICENESS = 10
#: Resends with other content (``budgetlens.store.resends``) logged one per line per commit.
_LOGGED_RESENDS = 20

#: ``commit(calls, records, events)`` with pyarrow tables; replaces the store write (tests).
CommitFn = Callable[[pa.Table, pa.Table, pa.Table], None]


class Loader:
    """Moves the ``backlog``'s journaled batches into the DuckDB file ``db_path``.

    ``journal``: the open ``Journal`` the batches are in; ``metrics``: counted from the rows each
    commit inserted; ``commit``: replaces the store write (tests; metrics are then not counted);
    ``max_group_spans`` (rows) and ``load_interval_s`` (s) size the groups; ``intake_alive()``
    tells whether the journal thread may still add batches; ``host``: the long-lived connection
    of a file store (commits go through it, and it checkpoints between them), None to open the
    file per commit. ``thread`` runs ``run``.
    """

    def __init__(
        self,
        db_path: Path | str,
        journal: Journal,
        backlog: Backlog,
        metrics: CollectorMetrics,
        *,
        commit: CommitFn | None,
        max_group_spans: int,
        load_interval_s: float,
        intake_alive: Callable[[], bool],
        host: StoreHost | None = None,
    ):
        self.db_path = db_path
        #: on a file store: the collector's one long-lived connection (``budgetlens.store.host``)
        self.host = host
        self.journal = journal
        self.backlog = backlog
        self.metrics = metrics
        self.commit = commit
        self.max_group_spans = max_group_spans
        self.load_interval_s = load_interval_s
        self.intake_alive = intake_alive
        #: on a DuckLake: groups are staged, and this collector's folds move them into the store
        self.folder = Folder(db_path, self._observe) if commit is None and is_lake_location(db_path) else None
        #: ``time.monotonic()`` past which a shutdown stops loading (set by ``IngestQueue.close``)
        self.drain_deadline: float | None = None
        #: the last sequence number replayed at start: batches up to it are due at once
        self.replay_through = 0
        self.thread = threading.Thread(target=self.run, name="budgetlens-loader", daemon=True)

    # --- replay at start ----------------------------------------------------------------
    def queue_unloaded(self) -> int:
        """Queue every journaled batch not yet marked loaded (oldest first, before any new one);
        return how many. The loader thread loads them (``start(replay_in_background=True)``)."""
        backlog, now = self.backlog, time.monotonic()
        with backlog.cond:
            for batch in self.journal.unloaded():
                backlog.add(Pending(batch.seq, batch.spans, self.journal.record_bytes(batch.seq), now, batch))
                backlog.rows += batch.spans
                self.replay_through = batch.seq
            replayed = len(backlog.waiting)
        if replayed:
            log.info("replaying %d journaled batches (%d rows) into %s", replayed, backlog.rows, self.db_path)
        return replayed

    def replay(self) -> None:
        """Queue every journaled batch not yet marked loaded and load it now, in groups.

        Without any, probe the store once (a ``write_connection``; skipped with an injected
        ``commit``). A store that cannot be written is logged and recorded in
        ``backlog.store_error``, not raised: the batches stay queued for the loader thread's retry.
        """
        replayed = self.queue_unloaded()
        try:
            while self.backlog.waiting:
                self._load_next()
            if not replayed and self.commit is None:
                self._probe()
        except Exception as error:  # the loader retries; the replayed batches stay queued
            self._failed(error)

    # --- the loader thread ----------------------------------------------------------------
    def run(self) -> None:
        """The loader thread: load groups until intake has stopped and the backlog is empty (or
        the drain deadline has passed); on a lake, fold when due and once more at the end."""
        _lower_priority()
        retry_s = _RETRY_MIN_S
        while self._wait_for_work():
            if self._past_drain_deadline():
                return
            loading = bool(self.backlog.waiting)
            if loading or self.backlog.store_error is not None or self.folder is None:
                try:
                    if loading:
                        self._load_next()
                    else:
                        self._probe()
                    if self.backlog.store_error is not None:
                        log.info("store %s is writable again", self.db_path)
                    self.backlog.store_error = None
                    retry_s = _RETRY_MIN_S
                except Exception as error:
                    if loading:
                        self._failed(error)
                    else:
                        self.backlog.store_error = error
                    if self.backlog.closing and not self.intake_alive():
                        log.error("giving up loading at shutdown: %s (the journal keeps the rows)", error)
                        return
                    time.sleep(self._bounded(retry_s))
                    retry_s = min(retry_s * 2, _RETRY_MAX_S)
                    continue
            if self.folder is not None:
                self.folder.fold_if_due()
            if self.host is not None:
                self.host.checkpoint_if_due()
        if self.folder is not None and self.folder.due:  # the last groups this collector staged
            self.folder.fold_until_done(self.drain_deadline)

    def _past_drain_deadline(self) -> bool:
        deadline = self.drain_deadline
        if deadline is None or time.monotonic() < deadline:
            return False
        log.error(
            "shutdown drain deadline passed with %d rows not loaded (they stay in the journal and "
            "load at the next start)",
            self.backlog.rows,
        )
        return True

    def _bounded(self, seconds: float) -> float:
        """``seconds``, cut to what is left before the drain deadline (if one is set)."""
        deadline = self.drain_deadline
        return seconds if deadline is None else max(0.0, min(seconds, deadline - time.monotonic()))

    def _wait_for_work(self) -> bool:
        """Block until a group is due (or the store needs a probe); False when all is done."""
        backlog = self.backlog
        with backlog.cond:
            while True:
                if backlog.closing and not backlog.waiting and not self.intake_alive():
                    return False
                if backlog.waiting and (
                    backlog.closing
                    or backlog.waiting[0].seq <= self.replay_through  # replayed: due at once
                    or backlog.store_error is not None
                    or backlog.waiting_rows() >= self.max_group_spans
                    or time.monotonic() - backlog.waiting[0].journaled_at >= self.load_interval_s
                ):
                    return True
                if backlog.store_error is not None and not backlog.waiting:
                    return True  # probe the store so its error clears
                if self.host is not None and self.host.checkpoint_due():
                    return True
                wait = self.load_interval_s
                if backlog.waiting:
                    wait = max(0.001, backlog.waiting[0].journaled_at + wait - time.monotonic())
                if self.folder is not None and not backlog.closing:
                    fold_in = self.folder.wait_s()
                    if fold_in <= 0:
                        return True  # a fold is due
                    wait = min(wait, fold_in)
                backlog.cond.wait(wait)

    def _load_next(self) -> None:
        """Load the next group; on any error put it back and re-raise."""
        with self.backlog.cond:
            group = self.backlog.take(self.max_group_spans)
        try:
            self._load(group)
        except BaseException:
            with self.backlog.cond:
                self.backlog.put_back()
            raise
        loaded = sum(pending.nbytes for pending in group)
        del group
        if loaded > TRIM_AFTER_BYTES:
            release_free_memory()  # the insert's working memory: one group's, not the largest's

    def _load(self, group: list[Pending]) -> None:
        """Commit ``group`` to the store, count metrics, mark it loaded in the journal.

        A group the store refuses for its data is loaded around the bad rows
        (``budgetlens.ingest.dead_letter``); any other error propagates (the caller retries).
        """
        batches = [p.batch if p.batch is not None else self.journal.read(p.seq) for p in group]
        started = time.perf_counter()
        try:
            result = self._commit_tables(
                pa.concat_tables([b.calls for b in batches]),
                pa.concat_tables([b.records for b in batches]),
                pa.concat_tables([b.events for b in batches]),
            )
        except Exception as error:
            if not is_data_error(error):
                raise
            self._load_around_bad_rows(batches)
        else:  # outside the try: counting never re-runs a commit that succeeded
            self._observe(result)
        self.metrics.commit_duration.observe(time.perf_counter() - started)
        with self.backlog.cond:
            # never mark past a batch still waiting (replay order is by sequence number)
            waiting = self.backlog.waiting
            limit = waiting[0].seq - 1 if waiting else None
        last = max(batch.seq for batch in batches)
        self.journal.mark_loaded(last if limit is None else min(last, limit))
        with self.backlog.cond:
            self.backlog.done()
            self.metrics.queue_spans.set(self.backlog.rows)
            oldest = self.backlog.oldest()
        self.metrics.loader_lag.set(time.monotonic() - oldest if oldest is not None else 0.0)

    def _load_around_bad_rows(self, batches: list[Batch]) -> None:
        dead_letter = self.journal.directory / DEAD_LETTER_FILE
        if self.commit is not None:
            dead = load_around_bad_rows(batches, self.commit, dead_letter, self._observe)
        else:  # one connection for the whole retry (a commit per half, not a reopen)
            with self._connection() as conn:
                dead = load_around_bad_rows(
                    batches, lambda *tables: self._write(conn, *tables), dead_letter, self._observe
                )
        if dead:
            self.metrics.dead_lettered.inc(dead)

    def _commit_tables(self, calls: pa.Table, records: pa.Table, events: pa.Table):
        """Write one set of tables to the store (or the injected ``commit``); the WriteResult."""
        if self.commit is not None:
            self.commit(calls, records, events)
            return None
        with self._connection() as conn:
            return self._write(conn, calls, records, events)

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The host's long-lived connection, else the file (or lake) opened for this commit."""
        if self.host is not None:
            with self.host.write() as conn:
                yield conn
            return
        with write_connection(self.db_path, timeout_s=LOADER_WRITE_TIMEOUT_S) as conn:
            conn.execute("SET threads TO 1")  # one core for loading, the other for intake
            yield conn

    def _write(self, conn, calls: pa.Table, records: pa.Table, events: pa.Table):
        """One commit: ``write_batch`` on a file (its WriteResult), a stage on a lake (None: the
        fold that stores the rows counts them)."""
        if self.folder is None:
            return write_batch(conn, calls, records, events)
        if stage_batch(conn, calls, records, events, timeout_s=self._bounded(STAGE_CONFLICT_TIMEOUT_S)):
            self.folder.staged(staged_bound(conn))
        return None

    def _probe(self) -> None:
        """Open the store for writing once (raises what ``write_connection`` raises)."""
        if self.commit is None:
            with self._connection():
                pass

    def _observe(self, result) -> None:
        """Count the budget metrics of a commit that succeeded. Never raises: the rows are
        committed whatever happens here, so an error is logged (with its traceback) and the
        commit is neither retried nor dead-lettered."""
        if result is None:
            return
        try:
            self.metrics.observe_write(
                result.new_calls, result.new_events, result.new_records, result.runs_rows
            )
            if result.resent is not None:
                self._report_resent(result.resent)
        except Exception:
            log.exception("counting the metrics of a committed group failed (the rows are stored)")

    def _report_resent(self, resent: pa.Table) -> None:
        """Count and log the spans re-sent with other content than the stored ones (issue 23,
        ``budgetlens.store.resends``): ids only, never a value; at most ``_LOGGED_RESENDS`` lines
        per commit."""
        self.metrics.flagged_spans.labels("span_id_collision").inc(len(resent))
        rows = resent.slice(0, _LOGGED_RESENDS).to_pylist()
        for row in rows:
            log.warning(
                "span id collision: span %s of trace %s was stored earlier with other content; "
                "the stored span is kept and its run flagged rejected_span, the resend is not stored",
                row["span_id"],
                row["trace_id"],
            )
        if len(resent) > len(rows):
            log.warning("span id collision: and %d more spans in this commit", len(resent) - len(rows))

    def _failed(self, error: BaseException) -> None:
        log.error("loading into %s failed (the journal keeps the rows; retrying): %s", self.db_path, error)
        self.metrics.commit_failures.inc()
        self.backlog.store_error = error


def warm_up() -> None:
    """Import what the first commit imports lazily: pandas (pyarrow's compute on a chunked
    array and DuckDB's parameter binding look for it), about 1 s of work that holds the GIL.
    Called before the loader thread starts, so that neither the replay at start nor the first
    requests wait behind it in the loader thread (issue 23)."""
    import pandas  # noqa: F401


def _lower_priority() -> None:
    """Lower the calling thread's CPU priority by ``LOADER_NICENESS`` (Linux: nice is per
    thread; DuckDB work the thread runs inherits it). Loading is background work: when the
    cores are busy, acknowledging requests goes first; the backlog bound still applies."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + LOADER_NICENESS)
    except (AttributeError, OSError) as error:  # not Linux, or not permitted: keep the priority
        log.debug("loader priority unchanged: %s", error)
