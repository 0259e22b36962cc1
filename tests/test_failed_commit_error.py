"""A transaction that fails reports the error that failed it, not its ROLLBACK's.

DuckDB ends a transaction whose COMMIT failed (a full disk, a lost DuckLake conflict); the
ROLLBACK on the way out then fails with "no transaction is active", and that error used to
replace the real one in the collector's log and in ``/healthz``'s ``store_error``. SQLite ends a
transaction itself on some errors (SQLITE_FULL) the same way.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from budgetlens.guard.ledgers.local import SqliteLedger
from budgetlens.store import lake, write_batch, write_connection
from tests._store_rows import call_row

START = dt.datetime(2026, 11, 20, 9, 0)


class _CommitFindsTheDiskFull:
    """A real DuckDB connection whose COMMIT fails as on a full disk: DuckDB has already ended
    the transaction (rolled it back) when the error reaches the caller."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self._conn = conn

    def execute(self, statement, *args, **kwargs):
        if isinstance(statement, str) and statement.strip().upper() == "COMMIT":
            self._conn.execute("ROLLBACK")
            raise duckdb.IOException("Could not write file: No space left on device")
        return self._conn.execute(statement, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_batch_whose_commit_fails_raises_the_commits_error_and_stores_nothing(store_path):
    with write_connection(store_path) as conn:
        with pytest.raises(duckdb.IOException, match="No space left on device"):
            write_batch(_CommitFindsTheDiskFull(conn), calls=[call_row("r1", 1, START, "gpt-4o")])
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone() == (0,)
        # the connection is usable afterwards: the same batch then commits
        assert write_batch(conn, calls=[call_row("r1", 1, START, "gpt-4o")]).calls == 1


def test_rollback_with_no_transaction_open_is_quiet_and_ends_an_open_one():
    conn = duckdb.connect()
    lake.rollback(conn)  # nothing open: no error of its own
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("BEGIN TRANSACTION")
    conn.execute("INSERT INTO t VALUES (1)")
    lake.rollback(conn)
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_a_ledger_transaction_that_sqlite_ended_raises_its_own_error(tmp_path):
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")

    def body(db, now):
        db.execute("ROLLBACK")  # as SQLite does itself on SQLITE_FULL
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left on device"):
        ledger._transaction(body)
    assert ledger.balances(["team:a"])["team:a"].spent == 0
