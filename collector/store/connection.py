"""The connection protocol of the DuckDB store (design §5).

DuckDB lets one process write a file, and a read-write open conflicts with any other open of the
same file. So:

- a running collector holds the file for its life on one connection
  (``budgetlens.store.host.StoreHost``) and readers query through it
  (``budgetlens.store.readers.connect``); in the collector's own process ``read_connection``
  reads through that connection;
- other writers (an import, the sample loader) hold the file only for the length of one batch:
  ``write_connection`` opens, migrates, yields, commits and closes;
- readers without a collector open it read-only for the length of one query
  (``read_connection``);
- both retry with a short backoff while another process holds a conflicting lock, up to a
  timeout, so no lock error reaches a user unless the file stays locked for that long.

A DuckLake location (``ducklake:...``, see ``budgetlens.store.location``) has none of these
limits: many processes write it at once and readers never block writers. Both functions then
yield a cursor on the process's one attachment of the lake (``budgetlens.store.lake``); a read
connection holds one transaction, so every query in it reads the same snapshot.
"""

from __future__ import annotations

import logging
import os
import random
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from budgetlens.store import lake, sql
from budgetlens.store.location import LakeLocation, store_location
from budgetlens.store.lock_holder import collector_holder, collector_message, lock_message, running_collector
from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

DEFAULT_WRITE_TIMEOUT_S = 60.0
#: DuckDB errors about the rows themselves (the attachment is fine).
_DATA_ERRORS = (duckdb.DataError, duckdb.ConversionException, duckdb.ConstraintException)
DEFAULT_READ_TIMEOUT_S = 20.0


class StoreError(RuntimeError):
    """The store cannot be used: missing file, a path DuckDB cannot open (a directory, a file
    that is not a DuckDB database, no permission), newer schema, or a lock held past the
    timeout."""


class StoreMissing(StoreError):
    """The DuckDB file does not exist yet (nothing was ingested, imported or generated)."""


def is_lock_conflict(error: BaseException) -> bool:
    """True when ``error`` is DuckDB's "could not set lock on file" conflict between processes."""
    text = str(error)
    return isinstance(error, duckdb.Error) and ("Could not set lock" in text or "Conflicting lock" in text)


def _connect_with_retry(
    path: Path, read_only: bool, timeout_s: float, *, collector_is_final: bool = False
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` retried while another process holds the file, for up to
    ``timeout_s``; ``collector_is_final``: a running collector holding it (it holds the file
    for its whole life) is a StoreError at once, naming it and what to do."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as error:
            if not is_lock_conflict(error):
                raise _cannot_open(path, read_only, error) from error
            holder = collector_holder(path, error) if collector_is_final else None
            if holder is not None:
                raise StoreError(collector_message(path, holder)) from error
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"still locked after {timeout_s:.0f} s: {lock_message(path, error)}"
                ) from error
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)


def _cannot_open(path: Path, read_only: bool, error: duckdb.Error) -> StoreError:
    """A StoreError naming ``path``, what was expected there, and DuckDB's reason."""
    reason = str(error).removeprefix("IO Error: ").strip()
    if path.is_dir():
        expected = "a DuckDB database file, not a directory"
    elif path.exists():
        expected = "a DuckDB database file (a budgetlens store) it can " + (
            "read" if read_only else "read and write"
        )
    else:
        expected = "a path where a new DuckDB file can be created"
    return StoreError(f"{path}: cannot open the store: expected {expected} ({reason})")


def migrate(conn: duckdb.DuckDBPyConnection) -> int:
    """Apply the migrations not yet recorded; return the schema version now in force.

    On a DuckLake the DDL drops primary keys (``lake.lake_ddl``), the staged tables and the
    fold token are created after the migrations (``lake_ingest.ensure_tables``), and a step
    that loses a conflict with a concurrent one (two collectors starting at once) is retried. Raises StoreError when the store has a newer
    schema than this code knows.
    """
    if lake.is_lake_connection(conn):
        from budgetlens.store import lake_ingest

        version = lake.retry_on_conflict(lambda: _migrate(conn, on_lake=True), what="migrate")
        lake.retry_on_conflict(lambda: lake_ingest.ensure_tables(conn), what="create the staged tables")
        return version
    return _migrate(conn, on_lake=False)


def _migrate(conn: duckdb.DuckDBPyConnection, *, on_lake: bool) -> int:
    adapt = lake.lake_ddl if on_lake else (lambda script: script)
    conn.execute(adapt(sql.CREATE_MIGRATIONS_TABLE))
    applied = {row[0] for row in conn.execute(sql.SELECT_APPLIED_VERSIONS).fetchall()}
    if applied and max(applied) > SCHEMA_VERSION:
        raise StoreError(
            f"store schema version {max(applied)} is newer than this budgetlens "
            f"({SCHEMA_VERSION}); upgrade budgetlens"
        )
    for version, script in MIGRATIONS:
        if version in applied:
            continue
        if on_lake:
            script = adapt(script)
        conn.execute("BEGIN TRANSACTION")
        try:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(sql.RECORD_MIGRATION, [version])
            conn.execute("COMMIT")
        except Exception:
            lake.rollback(conn)
            raise
        log.info("store migrated to schema version %d", version)
    return SCHEMA_VERSION


_migrated_lakes: set[LakeLocation] = set()


@contextmanager
def _lake_connection(location: LakeLocation, *, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    try:
        with lake.lake_cursor(location, create=write) as conn:
            if write and location not in _migrated_lakes:
                migrate(conn)
                _migrated_lakes.add(location)
            if write:
                yield conn
                return
            conn.execute("BEGIN TRANSACTION")  # one snapshot for every query of this reader
            try:
                yield conn
            finally:
                conn.execute("ROLLBACK")
    except lake.LakeMissing as error:
        raise StoreMissing(str(error)) from error
    except lake.LakeError as error:
        raise StoreError(str(error)) from error
    except duckdb.Error as error:
        # a writer (the collector's loader) attaches anew after an error that is neither a lost
        # conflict nor about the data: the catalog connection may be gone (PostgreSQL
        # restarted), and a fresh attach is how it comes back
        if write and not lake.is_conflict(error) and not isinstance(error, _DATA_ERRORS):
            lake.forget(location)
        raise


@contextmanager
def write_connection(
    path: str | os.PathLike | LakeLocation, *, timeout_s: float = DEFAULT_WRITE_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``path`` for writing (creating and migrating it), yield the connection, close it.

    ``path`` is a DuckDB file or a DuckLake location (``ducklake:...``, created on first write
    when it has a data path).

    The caller runs its statements inside one transaction (see ``budgetlens.store.writer``).
    Raises StoreError when DuckDB cannot open ``path`` (a directory, not a DuckDB file, no
    permission), another process holds the file for longer than ``timeout_s`` seconds, or a
    running collector holds it (at once: it would hold it for its whole life), OSError when the
    parent directory cannot be created.
    """
    location = store_location(path)
    if isinstance(location, LakeLocation):
        with _lake_connection(location, write=True) as conn:
            yield conn
        return
    path = _checked_file(location)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    collector = running_collector(path)
    if collector is not None:
        raise StoreError(collector_message(path, collector))
    conn = _connect_with_retry(path, read_only=False, timeout_s=timeout_s, collector_is_final=True)
    try:
        migrate(conn)
        yield conn
    finally:
        conn.close()


def _checked_file(path: Path) -> Path:
    """``path`` when it can name a store file: it has a name and is a regular file, a directory
    (DuckDB refuses it with its own message) or nothing yet. Raises StoreError for an empty name
    and for a FIFO, socket or device, which DuckDB would block on or misread (breaker round of
    2026-12-03: a FIFO as --db hung every command)."""
    if not path.name or path.name in (".", ".."):
        raise StoreError(f"store path {str(path)!r} names no file: give a file such as budgetlens.duckdb")
    try:
        mode = path.stat().st_mode
    except OSError:
        return path  # missing (created on write, StoreMissing on read) or unreadable (DuckDB says)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise StoreError(f"store {path} is not a regular file (a FIFO, socket or device): give a DuckDB file")
    return path


@contextmanager
def read_connection(
    path: str | os.PathLike | LakeLocation, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``path`` read-only for one query or a few, retrying while a writer commits.

    On a DuckLake location every query of the connection reads one snapshot, and writers are
    never blocked. When a collector in this process holds the file (``budgetlens.store.host``),
    the connection is a cursor of its connection in a READ ONLY transaction (one snapshot too).

    Raises StoreMissing when the file does not exist, StoreError when DuckDB cannot open it (a
    directory, not a DuckDB file, no permission) or it stays locked for longer than
    ``timeout_s`` seconds.
    """
    location = store_location(path)
    if isinstance(location, LakeLocation):
        with _lake_connection(location, write=False) as conn:
            yield conn
        return
    path = _checked_file(location)
    from budgetlens.store.open_hosts import host_in_process

    host = host_in_process(path)
    if host is not None:  # this process holds the file (a collector in it): read through it
        with host.snapshot_cursor() as cursor:
            yield cursor
        return
    if not path.exists():
        raise StoreMissing(
            f"{path}: no budgetlens store here yet; create one with `budgetlens sample`, "
            "`budgetlens import` or `budgetlens collector`"
        )
    conn = _connect_with_retry(path, read_only=True, timeout_s=timeout_s)
    try:
        yield conn
    finally:
        conn.close()


def schema_version(conn: duckdb.DuckDBPyConnection) -> int:
    """Return the highest applied schema version, 0 for a file without budgetlens tables."""
    row = conn.execute(sql.HAS_MIGRATIONS_TABLE).fetchone()
    if row is None or row[0] == 0:
        return 0
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0) if row is not None else 0


def latest_snapshot(location: str | os.PathLike | LakeLocation) -> int | None:
    """The id of a DuckLake store's latest snapshot (every commit raises it), None when the lake
    does not exist yet or cannot be reached. Raises ValueError for a file store."""
    parsed = store_location(location)
    if not isinstance(parsed, LakeLocation):
        raise ValueError(f"{location}: a DuckDB file store has no snapshots")
    try:
        with lake.lake_cursor(parsed, create=False) as conn:
            row = conn.execute(lake.LATEST_SNAPSHOT).fetchone()
    except (lake.LakeError, duckdb.Error) as error:
        log.debug("no snapshot of %s: %s", parsed, error)
        return None
    return None if row is None or row[0] is None else int(row[0])
