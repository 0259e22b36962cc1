"""The collector's loader thread: journaled batches → DuckDB in groups, and replay at start.

The loader half of ``budgetlens.ingest.queue.IngestQueue`` (the journal thread and intake live there).
Journaled batches move into DuckDB in groups (every ``load_interval_s`` seconds or
``max_group_spans`` rows, whichever comes first), each through ``budgetlens.store.write_connection``
+ ``write_batch`` (the file is held only while committing, so dashboard readers get in between).
The Prometheus metrics are counted from the rows actually inserted, then the batches are marked
loaded in the journal (deleting fully loaded segments). A group the store refuses for its data is
loaded around the bad rows (``budgetlens.ingest.dead_letter``).

On ``start`` every journaled batch not yet marked loaded is replayed into DuckDB first (replaying
one already loaded is harmless: primary keys and upserts make it a no-op). While the store cannot
be written the loader retries with a backoff (``_RETRY_MIN_S`` doubling up to ``_RETRY_MAX_S``
seconds) and ``store_error`` says why; the journal keeps the rows meanwhile. The loader thread
runs ``LOADER_NICENESS`` nice steps below the request path.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pyarrow as pa

from budgetlens.ingest.dead_letter import DEAD_LETTER_FILE, is_data_error, load_around_bad_rows
from budgetlens.ingest.journal import Batch
from budgetlens.store import write_batch, write_connection

log = logging.getLogger(__name__)

_RETRY_MIN_S, _RETRY_MAX_S = 0.5, 5.0
#: How much lower than the request path's the loader thread's CPU priority is (nice steps).
LOADER_NICENESS = 10


class Loader:
    """The loader thread and replay of ``IngestQueue`` (a base class; see the module docstring).

    Shares the queue's state, all guarded by ``_cond`` (a ``threading.Condition``): ``db_path``,
    ``metrics`` (``CollectorMetrics``), ``max_group_spans`` (rows), ``load_interval_s`` (s),
    ``_commit`` (injected commit or None), ``_journal`` (``budgetlens.ingest.journal.Journal``, open),
    ``_incoming`` (requests waiting for the journal), ``_journaled`` (deque of
    ``(Batch, journaled_at monotonic s)`` waiting for the loader), ``_backlog`` (rows accepted
    and not yet loaded), ``_store_error`` (exception or None), ``_closing`` and
    ``_journal_thread``.
    """

    # --- replay at start ----------------------------------------------------------------
    def _replay(self) -> None:
        """Queue every journaled batch not yet marked loaded and load it now, in groups.

        Without any, probe the store once (a ``write_connection``; skipped with an injected
        ``commit``). A store that cannot be written is logged and recorded in ``store_error``,
        not raised: the batches stay queued for the loader thread's retry.
        """
        replay = list(self._journal.unloaded())
        now = time.monotonic()
        for batch in replay:
            self._journaled.append((batch, now))
            self._backlog += batch.spans
        if replay:
            log.info(
                "replaying %d journaled batches (%d rows) into %s", len(replay), self._backlog, self.db_path
            )
        group: list = []
        try:
            if replay:
                while self._journaled:
                    with self._cond:
                        group = self._take_group()
                    self._load(group)
                    group = []
            elif self._commit is None:
                with write_connection(self.db_path):
                    pass
        except Exception as error:  # the loader retries; the replayed batches stay queued
            with self._cond:
                self._journaled.extendleft(reversed(group))
            self._failed(error)

    # --- the loader thread ----------------------------------------------------------------
    def _loader_loop(self) -> None:
        _lower_priority()
        retry_s = _RETRY_MIN_S
        while True:
            with self._cond:
                while True:
                    drained = not self._incoming and not self._journal_thread.is_alive()
                    if self._closing and not self._journaled and drained:
                        return
                    if self._journaled and (
                        self._closing
                        or self._store_error is not None
                        or self._pending_rows() >= self.max_group_spans
                        or time.monotonic() - self._journaled[0][1] >= self.load_interval_s
                    ):
                        break
                    if self._store_error is not None and not self._journaled:
                        break  # probe the store so intake can resume
                    wait = self.load_interval_s
                    if self._journaled:
                        wait = max(0.001, self._journaled[0][1] + wait - time.monotonic())
                    self._cond.wait(wait)
                group = self._take_group()
            try:
                if group:
                    self._load(group)
                else:
                    with write_connection(self.db_path):
                        pass
                if self._store_error is not None:
                    log.info("store %s is writable again", self.db_path)
                self._store_error = None
                retry_s = _RETRY_MIN_S
            except Exception as error:
                with self._cond:
                    self._journaled.extendleft(reversed(group))
                if group:
                    self._failed(error)
                else:
                    self._store_error = error
                if self._closing and not self._journal_thread.is_alive():
                    log.error("giving up loading at shutdown: %s (the journal keeps the rows)", error)
                    return
                time.sleep(retry_s)
                retry_s = min(retry_s * 2, _RETRY_MAX_S)

    def _pending_rows(self) -> int:
        return sum(batch.spans for batch, _ in self._journaled)

    def _take_group(self) -> list[tuple[Batch, float]]:
        """Pop journaled batches up to ``max_group_spans`` rows (at least one). Caller locks."""
        group, size = [], 0
        while self._journaled and (not group or size + self._journaled[0][0].spans <= self.max_group_spans):
            item = self._journaled.popleft()
            group.append(item)
            size += item[0].spans
        return group

    def _load(self, group: list[tuple[Batch, float]]) -> None:
        """Commit ``group`` to the store, count metrics, mark it loaded in the journal.

        A group the store refuses for its data is loaded around the bad rows
        (``budgetlens.ingest.dead_letter``); any other error propagates (the caller retries).
        """
        batches = [batch for batch, _ in group]
        started = time.perf_counter()
        try:
            self._observe(
                self._commit_tables(
                    pa.concat_tables([b.calls for b in batches]),
                    pa.concat_tables([b.records for b in batches]),
                    pa.concat_tables([b.events for b in batches]),
                )
            )
        except Exception as error:
            if not is_data_error(error):
                raise
            dead_letter = self._journal.directory / DEAD_LETTER_FILE
            if self._commit is not None:
                dead = load_around_bad_rows(batches, self._commit, dead_letter, self._observe)
            else:  # one connection for the whole retry (a commit per half, not a reopen)
                with write_connection(self.db_path) as conn:
                    conn.execute("SET threads TO 1")
                    dead = load_around_bad_rows(
                        batches, lambda *tables: write_batch(conn, *tables), dead_letter, self._observe
                    )
            if dead:
                self.metrics.dead_lettered.inc(dead)
        self.metrics.commit_duration.observe(time.perf_counter() - started)
        with self._cond:
            # never mark past a batch still waiting (replay order is by sequence number)
            limit = self._journaled[0][0].seq - 1 if self._journaled else None
        last = max(batch.seq for batch in batches)
        self._journal.mark_loaded(last if limit is None else min(last, limit))
        with self._cond:
            self._backlog -= sum(batch.spans for batch in batches)
            self.metrics.queue_spans.set(self._backlog)
            oldest = self._journaled[0][1] if self._journaled else None
        self.metrics.loader_lag.set(time.monotonic() - oldest if oldest is not None else 0.0)

    def _commit_tables(self, calls: pa.Table, records: pa.Table, events: pa.Table):
        """Write one set of tables to the store (or the injected ``commit``); the WriteResult."""
        if self._commit is not None:
            self._commit(calls, records, events)
            return None
        with write_connection(self.db_path) as conn:
            conn.execute("SET threads TO 1")  # one core for loading, the other for intake
            return write_batch(conn, calls, records, events)

    def _observe(self, result) -> None:
        if result is not None:
            self.metrics.observe_write(
                result.new_calls, result.new_events, result.new_records, result.runs_rows
            )

    def _failed(self, error: BaseException) -> None:
        log.error("loading into %s failed (the journal keeps the rows; retrying): %s", self.db_path, error)
        self.metrics.commit_failures.inc()
        self._store_error = error


def _lower_priority() -> None:
    """Lower the calling thread's CPU priority by ``LOADER_NICENESS`` (Linux: nice is per
    thread; DuckDB work the thread runs inherits it). Loading is background work: when the
    cores are busy, acknowledging requests goes first; the backlog bound still applies."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + LOADER_NICENESS)
    except (AttributeError, OSError) as error:  # not Linux, or not permitted: keep the priority
        log.debug("loader priority unchanged: %s", error)
