"""The group-commit writer: one thread commits what concurrent requests submitted, together.

Requests map their spans to rows and ``submit`` them; the writer thread takes everything pending
(up to ``max_group_spans``), opens the store (``write_connection``: the file is held only for this
commit, so the dashboard can read between commits), inserts only rows not yet stored (retries are
stored once), commits, closes, and only then resolves each request's future. The receiver answers
200 after that, so an acknowledged span survives ``kill -9``.

The queue is bounded by spans waiting (``max_queue_spans``); ``submit`` raises ``QueueFull``
past it (the receiver answers 503 with Retry-After). ``close`` stops intake, commits what is
pending and joins the thread (SIGTERM path).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa

from collector import semconv as sc
from collector.mapping import Mapped
from collector.metrics import CollectorMetrics
from collector.store import write_batch, write_connection

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SPANS = 200_000
DEFAULT_MAX_GROUP_SPANS = 50_000

#: Named statements of the ingest path; request data reaches them only as registered tables.
SELECT_STORED_KEYS = """
SELECT 'call', span_id FROM model_calls
WHERE span_id IN (SELECT key FROM ingest_keys WHERE kind = 'call')
UNION ALL
SELECT 'record', run_id FROM run_records
WHERE run_id IN (SELECT key FROM ingest_keys WHERE kind = 'record')
UNION ALL
SELECT 'event', event_id FROM budget_events
WHERE event_id IN (SELECT key FROM ingest_keys WHERE kind = 'event')
"""
SELECT_RUN_SUMMARIES = (
    "SELECT run_id, task_type, stop_reason, total_tokens FROM runs "
    "WHERE run_id IN (SELECT key FROM ingest_keys)"
)


class QueueFull(RuntimeError):
    """More spans are waiting for the writer than the queue allows; retry later."""


class IngestClosed(RuntimeError):
    """The writer is shutting down and takes no more batches."""


@dataclass
class _Item:
    mapped: Mapped
    future: Future
    spans: int


CommitFn = Callable[[list, list, list], None]


class IngestQueue:
    """Bounded queue + single writer thread doing group commits into the DuckDB file ``db_path``.

    ``commit`` replaces the store write (tests inject one); by default rows go through
    ``collector.store.write_batch``. ``metrics`` (``CollectorMetrics``) is updated after each
    commit. Raises ValueError for a non-positive ``max_queue_spans`` or ``max_group_spans``.
    """

    def __init__(self, db_path: str | os.PathLike, *, metrics: CollectorMetrics | None = None,
                 max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
                 max_group_spans: int = DEFAULT_MAX_GROUP_SPANS,
                 commit: CommitFn | None = None):
        if max_queue_spans < 1:
            raise ValueError(f"max_queue_spans must be >= 1 (got {max_queue_spans})")
        if max_group_spans < 1:
            raise ValueError(f"max_group_spans must be >= 1 (got {max_group_spans})")
        self.db_path = Path(db_path)
        self.metrics = metrics or CollectorMetrics()
        self.max_queue_spans = max_queue_spans
        self.max_group_spans = max_group_spans
        self._commit = commit or self._commit_to_store
        self._pending: list[_Item] = []
        self._queued_spans = 0  # waiting + being committed
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="budgetlens-writer", daemon=True)
        self._started = False

    # --- intake ---------------------------------------------------------------------------
    def start(self) -> "IngestQueue":
        """Start the writer thread (idempotent); return self."""
        with self._cond:
            if not self._started:
                self._started = True
                self._thread.start()
        return self

    @property
    def depth(self) -> int:
        """Spans accepted but not yet committed."""
        return self._queued_spans

    @property
    def alive(self) -> bool:
        """True while the writer thread runs."""
        return self._thread.is_alive()

    def submit(self, mapped: Mapped) -> Future:
        """Queue ``mapped`` rows; the future resolves (None) once they are committed.

        The future fails with the store's exception when the commit fails. Raises QueueFull when
        the queue holds ``max_queue_spans`` spans already (a batch larger than the whole queue is
        accepted when the queue is empty), IngestClosed after ``close``.
        """
        spans = max(1, len(mapped.calls) + len(mapped.records) + len(mapped.events))
        future: Future = Future()
        with self._cond:
            if self._closing or not self._started:
                raise IngestClosed("the collector is shutting down")
            if self._queued_spans and self._queued_spans + spans > self.max_queue_spans:
                raise QueueFull(f"{self._queued_spans} spans are waiting for the writer")
            self._pending.append(_Item(mapped, future, spans))
            self._queued_spans += spans
            self.metrics.queue_spans.set(self._queued_spans)
            self._cond.notify()
        return future

    def close(self, timeout_s: float | None = 60.0) -> None:
        """Stop intake, commit everything pending, join the writer (idempotent)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._started and self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("writer did not finish within %.0f s; %d spans uncommitted",
                          timeout_s, self._queued_spans)

    # --- the writer -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                group, size = [], 0
                while self._pending and (not group or size + self._pending[0].spans
                                         <= self.max_group_spans):
                    item = self._pending.pop(0)
                    group.append(item)
                    size += item.spans
            calls = [row for item in group for row in item.mapped.calls]
            records = [row for item in group for row in item.mapped.records]
            events = [row for item in group for row in item.mapped.events]
            try:
                self._commit(calls, records, events)
            except BaseException as error:  # every waiting request must hear about it
                log.error("commit of %d spans failed: %s", size, error)
                self.metrics.commit_failures.inc()
                for item in group:
                    item.future.set_exception(error)
            else:
                for item in group:
                    item.future.set_result(None)
            finally:
                with self._cond:
                    self._queued_spans -= size
                    self.metrics.queue_spans.set(self._queued_spans)

    def _commit_to_store(self, calls: list, records: list, events: list) -> None:
        started = time.perf_counter()
        with write_connection(self.db_path) as conn:
            calls, records, events = _new_rows(conn, calls, records, events)
            write_batch(conn, calls, records, events)
            wanted = {row["run_id"] for row in records}
            wanted.update(row["run_id"] for row in events if row["name"] != sc.EVENT_TOOL_CALL)
            summaries = _query_keys(conn, SELECT_RUN_SUMMARIES, wanted) if wanted else []
        self.metrics.commit_duration.observe(time.perf_counter() - started)
        record_ids = {row["run_id"] for row in records}
        runs = [dict(zip(("run_id", "task_type", "stop_reason", "total_tokens"), row))
                for row in summaries]
        self.metrics.observe_commit(
            calls, events, [run for run in runs if run["run_id"] in record_ids],
            task_by_run={run["run_id"]: run["task_type"] for run in runs},
        )


def _query_keys(conn, statement: str, keys, kinds=None) -> list[tuple]:
    columns = {"key": pa.array(list(keys), type=pa.string())}
    if kinds is not None:
        columns["kind"] = pa.array(kinds, type=pa.string())
    conn.register("ingest_keys", pa.table(columns))
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.unregister("ingest_keys")


def _new_rows(conn, calls: Sequence[dict], records: Sequence[dict],
              events: Sequence[dict]) -> tuple[list, list, list]:
    """The rows whose key is neither stored yet nor repeated earlier in the batch (one query)."""
    groups = (("call", calls, "span_id"), ("record", records, "run_id"),
              ("event", events, "event_id"))
    keys, kinds = [], []
    for kind, rows, key in groups:
        keys.extend(row[key] for row in rows)
        kinds.extend([kind] * len(rows))
    stored: dict[str, set] = {"call": set(), "record": set(), "event": set()}
    if keys:
        for kind, identity in _query_keys(conn, SELECT_STORED_KEYS, keys, kinds):
            stored[kind].add(identity)
    fresh = []
    for kind, rows, key in groups:
        seen, kept = stored[kind], []
        for row in rows:
            if row[key] not in seen:
                seen.add(row[key])
                kept.append(row)
        fresh.append(kept)
    return fresh[0], fresh[1], fresh[2]
