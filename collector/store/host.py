"""The store process: one long-lived DuckDB connection to a store file while a collector runs.

DuckDB lets one process write a file, and a read-write open conflicts with every other open of
it. Opening the file per commit (and closing it: a checkpoint each time) made readers in other
processes and the collector's loader take turns for the lock, and four busy readers kept new
data out for over a minute. So while a collector runs on a file store it holds the file for its
whole life in a ``StoreHost``:

- the loader writes through ``write()`` (one commit per group of journaled batches, as before);
- a checkpoint runs when the WAL passes ``checkpoint_wal_bytes`` (DuckDB's own
  ``checkpoint_threshold``) or every ``checkpoint_interval_s`` seconds when the WAL is not
  empty (``checkpoint_if_due``, called by the loader thread between commits), and once at close;
- readers query through ``query()``: a cursor of the same database, each statement in a
  ``READ ONLY`` transaction, so they read the last commit and never wait for the writer
  (DuckDB's MVCC inside one process). The collector serves this over HTTP
  (``budgetlens.ingest.store_api``); readers find it with ``budgetlens.store.readers``.

External file access (``read_csv('/etc/...')``, ``COPY``, ``ATTACH``) is disabled on the
connection, so SQL sent by a reader cannot reach other files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from budgetlens.store import lake, open_hosts
from budgetlens.store.connection import _connect_with_retry, migrate
from budgetlens.store.open_hosts import host_in_process as host_in_process  # the old home

log = logging.getLogger(__name__)

#: Seconds between two timed checkpoints (when the WAL holds anything).
DEFAULT_CHECKPOINT_INTERVAL_S = 60.0
#: WAL size (bytes) past which DuckDB checkpoints on commit. Rows not yet checkpointed stay in
#: memory (DuckDB's in-memory row groups), so this bounds that memory too: with 64 MiB a run of
#: 15 MB bodies kept two bodies' rows resident at once, with 16 MiB one.
DEFAULT_CHECKPOINT_WAL_BYTES = 16 * 1024 * 1024
#: Reader sessions kept at once (a session holds its temp tables), and their idle expiry (s).
MAX_SESSIONS = 32
SESSION_IDLE_S = 120.0
#: Statement types a reader may send: SELECT (and WITH ... SELECT, FROM ..., PRAGMA read
#: functions, which DuckDB's parser turns into SELECTs); in a session also CREATE and DROP,
#: which the READ ONLY transaction limits to temp tables.
_READ_TYPES = frozenset({duckdb.StatementType.SELECT})
_SESSION_TYPES = _READ_TYPES | {duckdb.StatementType.CREATE, duckdb.StatementType.DROP}

Params = Sequence[Any] | dict[str, Any] | None


class QueryTimeout(TimeoutError):
    """A reader's statement ran past its time limit and was interrupted (``StoreHost.query``)."""


class NotReadOnly(ValueError):
    """A statement sent to ``StoreHost.query`` is not one read-only statement (the message
    names the rule and the statement types seen)."""


def check_read_only(sql: str, *, session: bool = False) -> None:
    """Raise NotReadOnly unless ``sql`` is exactly one SELECT statement (or, with ``session``,
    one SELECT, CREATE or DROP, for temp tables), as DuckDB's own parser classifies it.

    Raises NotReadOnly for empty text, several statements, another statement type or text
    DuckDB cannot parse (its parser's message is included).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as error:
        raise NotReadOnly(f"sql: cannot be parsed: {error}") from None
    if len(statements) != 1:
        raise NotReadOnly(f"sql: exactly one statement is allowed (got {len(statements)})")
    allowed = _SESSION_TYPES if session else _READ_TYPES
    kind = statements[0].type
    if kind not in allowed:
        names = ", ".join(sorted(t.name for t in allowed))
        raise NotReadOnly(f"sql: only {names} statements are allowed here (got {kind.name})")


class StoreHost:
    """The collector's one read-write connection to the DuckDB file ``path``.

    Opened lazily by the first ``write()`` (waiting up to ``open_timeout_s`` for other
    processes to let go of the file; StoreError after that, which the loader retries), closed
    by ``close()`` (with a last checkpoint). ``checkpoints`` counts the checkpoints taken
    (timed, sized or at close). Thread-safe: one writer at a time, readers concurrently.
    Raises ValueError for a non-positive interval or size.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
        checkpoint_wal_bytes: int = DEFAULT_CHECKPOINT_WAL_BYTES,
        open_timeout_s: float = 2.0,
    ):
        if checkpoint_interval_s <= 0 or checkpoint_wal_bytes <= 0:
            raise ValueError(
                "checkpoint_interval_s and checkpoint_wal_bytes must be > 0 "
                f"(got {checkpoint_interval_s}, {checkpoint_wal_bytes})"
            )
        self.path = Path(path)
        self.wal_path = Path(f"{self.path}.wal")
        self.checkpoint_interval_s = checkpoint_interval_s
        self.checkpoint_wal_bytes = checkpoint_wal_bytes
        self.open_timeout_s = open_timeout_s
        self.checkpoints = 0
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._write_lock = threading.Lock()
        self._last_checkpoint = time.monotonic()
        self._sessions: dict[str, tuple[duckdb.DuckDBPyConnection, threading.Lock, float]] = {}
        self._sessions_lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def _open(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = _connect_with_retry(self.path, read_only=False, timeout_s=self.open_timeout_s)
            try:
                migrate(conn)
                conn.execute("SET threads TO 1")  # one core for DuckDB work, the other for intake
                conn.execute(f"SET checkpoint_threshold = '{int(self.checkpoint_wal_bytes)}B'")
                conn.execute("SET enable_external_access = false")
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._last_checkpoint = time.monotonic()
            open_hosts.register(self.path, self)
            log.info("store %s held open by this collector", self.path)
        return self._conn

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection for one writer at a time (the loader); opens the file on first use.
        Raises StoreError as ``write_connection`` does when the file cannot be opened."""
        with self._write_lock:
            conn = self._open()
            try:
                yield conn
            except duckdb.Error as error:
                if isinstance(error, duckdb.FatalException) or "invalidated" in str(error):
                    log.error("store connection lost (reopened at the next write): %s", error)
                    self._conn = None
                    conn.close()
                raise

    def checkpoint_due(self, now: float | None = None) -> bool:
        """True when the timed checkpoint is due (the loader then calls ``checkpoint_if_due``)."""
        now = time.monotonic() if now is None else now
        return self._conn is not None and now - self._last_checkpoint >= self.checkpoint_interval_s

    def wal_bytes(self) -> int:
        """Size of the store's WAL file (bytes; 0 when there is none)."""
        try:
            return self.wal_path.stat().st_size
        except FileNotFoundError:
            return 0

    def checkpoint_if_due(self, now: float | None = None) -> bool:
        """Checkpoint when ``checkpoint_interval_s`` has passed since the last one and the WAL
        is not empty; True when one ran. Never raises (a failed checkpoint is logged and tried
        again at the next call)."""
        now = time.monotonic() if now is None else now
        if self._conn is None or now - self._last_checkpoint < self.checkpoint_interval_s:
            return False
        self._last_checkpoint = now
        if not self.wal_bytes():
            return False
        return self.checkpoint()

    def checkpoint(self) -> bool:
        """Checkpoint now (the WAL is folded into the file); True on success, never raises."""
        with self._write_lock:
            if self._conn is None:
                return False
            try:
                self._conn.execute("CHECKPOINT")
            except duckdb.Error as error:
                log.warning("checkpoint of %s failed (retried later): %s", self.path, error)
                return False
            self.checkpoints += 1
            self._last_checkpoint = time.monotonic()
            return True

    def query(
        self, sql: str, params: Params = None, *, session: str | None = None, timeout_s: float | None = None
    ) -> pa.Table:
        """Run one read-only statement (``check_read_only``) on the last committed data; its
        result as a pyarrow table (empty, no columns, for CREATE/DROP in a session).

        ``session``: an id from ``open_session``; its cursor keeps temp tables between calls.
        ``timeout_s``: a statement still running (or fetching) after that many seconds is
        interrupted (DuckDB's ``interrupt``) and QueryTimeout raised; None: no limit.
        Raises NotReadOnly for a refused statement, KeyError for an unknown session,
        StoreError/duckdb.Error when the store cannot be opened or the statement fails.
        """
        check_read_only(sql, session=session is not None)
        if session is not None:
            cursor, lock, _ = self._session(session)
            with lock:
                return self._timed(cursor, sql, params, timeout_s)
        with self._write_lock:
            conn = self._open()  # opened under the writer's lock; cursors need no lock
        cursor = conn.cursor()
        try:
            return self._timed(cursor, sql, params, timeout_s)
        finally:
            cursor.close()

    @classmethod
    def _timed(
        cls, cursor: duckdb.DuckDBPyConnection, sql: str, params: Params, timeout_s: float | None
    ) -> pa.Table:
        if timeout_s is None:
            return cls._run(cursor, sql, params)
        fired = threading.Event()

        def interrupt() -> None:
            fired.set()
            cursor.interrupt()

        timer = threading.Timer(timeout_s, interrupt)
        timer.daemon = True
        timer.start()
        try:
            return cls._run(cursor, sql, params)
        except duckdb.InterruptException:
            if fired.is_set():
                raise QueryTimeout(
                    f"the query ran past the read timeout of {timeout_s:g} s and was stopped"
                ) from None
            raise
        finally:
            timer.cancel()

    @staticmethod
    def _run(cursor: duckdb.DuckDBPyConnection, sql: str, params: Params) -> pa.Table:
        # READ ONLY: the transaction cannot write the store, only temp objects; committed so
        # that a session's temp table outlives the statement that created it
        cursor.execute("BEGIN TRANSACTION READ ONLY")
        try:
            result = cursor.execute(sql, params) if params else cursor.execute(sql)
            table = result.to_arrow_table() if result.description else pa.table({})
        except BaseException:
            lake.rollback(cursor)
            raise
        cursor.execute("COMMIT")
        return table

    def open_session(self) -> str:
        """A new reader session (its own cursor; temp tables live until ``close_session`` or
        ``SESSION_IDLE_S`` of disuse); its id. The oldest session is closed past
        ``MAX_SESSIONS``."""
        with self._write_lock:
            conn = self._open()
        session = uuid.uuid4().hex
        with self._sessions_lock:
            self._expire_sessions()
            self._sessions[session] = (conn.cursor(), threading.Lock(), time.monotonic())
        return session

    def close_session(self, session: str) -> None:
        """Close a session and its temp tables (an unknown id is ignored)."""
        with self._sessions_lock:
            entry = self._sessions.pop(session, None)
        if entry is not None:
            entry[0].close()

    def _session(self, session: str) -> tuple[duckdb.DuckDBPyConnection, threading.Lock, float]:
        with self._sessions_lock:
            entry = self._sessions.pop(session, None)
            if entry is None:
                raise KeyError(f"session {session!r} is unknown or expired")
            entry = (entry[0], entry[1], time.monotonic())
            self._sessions[session] = entry  # last: the dict is in order of last use
            return entry

    def _expire_sessions(self) -> None:
        """Drop sessions idle for ``SESSION_IDLE_S`` and, past ``MAX_SESSIONS``, the least
        recently used; never one whose statement is running (its lock is held). Caller holds
        ``_sessions_lock``."""
        now = time.monotonic()
        for key, (cursor, lock, used) in list(self._sessions.items()):  # least recently used first
            if lock.locked():
                continue
            if now - used > SESSION_IDLE_S or len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(key, None)
                cursor.close()

    def close(self) -> None:
        """Checkpoint and close the connection (idempotent); sessions end with it."""
        with self._sessions_lock:
            for cursor, _, _ in self._sessions.values():
                cursor.close()
            self._sessions.clear()
        if self._conn is not None:
            self.checkpoint()
            with self._write_lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
            open_hosts.unregister(self.path, self)

    @contextmanager
    def snapshot_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor in one READ ONLY transaction (every query reads the same commit; temp
        tables allowed), for readers in this process (``read_connection``)."""
        with self._write_lock:
            conn = self._open()
        cursor = conn.cursor()
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")
            try:
                yield cursor
            finally:
                cursor.execute("ROLLBACK")
        finally:
            cursor.close()
