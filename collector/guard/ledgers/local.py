"""A ledger in SQLite: in memory (``SqliteLedger()``) or in a file shared by the processes of one
machine (``SqliteLedger("ledger.sqlite3")``, ``BUDGETLENS_LEDGER=sqlite:///path``).

The collector serves one of these over HTTP (:mod:`budgetlens.ingest.ledger_api`), kept in a
file next to its journal, so its state survives a restart. Each operation is one ``BEGIN
IMMEDIATE`` transaction (SQLite's write lock: reservations of all processes on the file are
serialized, so a check and its hold are atomic); WAL journal, ``synchronous=NORMAL`` (a
committed hold or charge survives a crash of the process; a power loss may lose the last ones).
Lease times are read from ``clock`` (seconds since the epoch, injectable).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budgetlens.guard.ledgers.protocol import EPSILON, Balance, LedgerUnavailable, Refusal

__all__ = ["SqliteLedger"]

#: Days a settled call id is remembered (a settle retried later than this would charge again).
SETTLED_RETENTION_S = 3 * 24 * 3600.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ledger_accounts (key TEXT PRIMARY KEY, spent REAL NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS ledger_holds (call_id TEXT NOT NULL, key TEXT NOT NULL,"
    " amount REAL NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (call_id, key))",
    "CREATE INDEX IF NOT EXISTS ledger_holds_by_key ON ledger_holds (key, expires_at)",
    "CREATE TABLE IF NOT EXISTS ledger_settled (call_id TEXT PRIMARY KEY, amount REAL NOT NULL,"
    " keys TEXT NOT NULL, settled_at REAL NOT NULL)",
)
_LIVE_HOLD = "SELECT 1 FROM ledger_holds WHERE call_id = ? AND expires_at > ? LIMIT 1"
_SETTLED = "SELECT 1 FROM ledger_settled WHERE call_id = ?"
_SPENT = "SELECT spent FROM ledger_accounts WHERE key = ?"
_HELD = "SELECT coalesce(sum(amount), 0.0) FROM ledger_holds WHERE key = ? AND expires_at > ?"
_DROP_EXPIRED = "DELETE FROM ledger_holds WHERE key = ? AND expires_at <= ?"
_HOLD = "INSERT OR REPLACE INTO ledger_holds (call_id, key, amount, expires_at) VALUES (?, ?, ?, ?)"
_DROP_HOLDS = "DELETE FROM ledger_holds WHERE call_id = ?"
_MARK_SETTLED = "INSERT OR IGNORE INTO ledger_settled (call_id, amount, keys, settled_at) VALUES (?, ?, ?, ?)"
_CHARGE = (
    "INSERT INTO ledger_accounts (key, spent) VALUES (?, ?)"
    " ON CONFLICT (key) DO UPDATE SET spent = spent + excluded.spent RETURNING spent"
)
_RENEW = "UPDATE ledger_holds SET expires_at = ? WHERE call_id = ? AND expires_at > ?"
_PRUNE_SETTLED = "DELETE FROM ledger_settled WHERE settled_at < ?"


class SqliteLedger:
    """A :class:`budgetlens.guard.ledgers.protocol.Ledger` in SQLite.

    ``path``: a file (created with its directory's permissions), or None / ``":memory:"`` for a
    ledger that lives as long as this object. ``clock``: seconds since the epoch (leases).
    ``busy_timeout_s``: how long an operation waits for another process's write lock before it
    raises LedgerUnavailable. Thread-safe.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = 5.0,
    ) -> None:
        target = ":memory:" if path in (None, ":memory:") else str(path)
        self._target, self._busy_timeout_s, self._pid = target, busy_timeout_s, os.getpid()
        self._db = self._connect()
        self._clock = clock
        self._lock = threading.Lock()
        self._settles = 0
        with self._lock:
            if target != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                self._db.execute(statement)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self._target, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
        )

    def _transaction(self, body: Callable[[sqlite3.Connection, float], object]) -> Any:
        with self._lock:
            if self._pid != os.getpid() and self._target != ":memory:":
                self._pid, self._db = os.getpid(), self._connect()  # a forked child: its own
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise LedgerUnavailable(f"ledger file is busy or unreadable: {exc}") from exc
            try:
                result = body(db, self._clock())
            except BaseException:
                if db.in_transaction:  # SQLite ends a transaction itself on some errors (full disk)
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    def reserve(
        self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float, lease_s: float
    ) -> Refusal | None:
        def body(db: sqlite3.Connection, now: float) -> Refusal | None:
            if (
                db.execute(_LIVE_HOLD, (call_id, now)).fetchone()
                or db.execute(_SETTLED, (call_id,)).fetchone()
            ):
                return None  # a retried reserve: this call already holds (or was settled)
            for key, limit in accounts:
                row = db.execute(_SPENT, (key,)).fetchone()
                spent = row[0] if row else 0.0
                held = db.execute(_HELD, (key, now)).fetchone()[0]
                if spent >= limit or spent + held + amount > limit + EPSILON:
                    return Refusal(key, limit, spent, held)
            for key, _ in accounts:
                db.execute(_DROP_EXPIRED, (key, now))
                if amount > 0:
                    db.execute(_HOLD, (call_id, key, amount, now + lease_s))
            return None

        return self._transaction(body)

    def settle(self, call_id: str, keys: Sequence[str], amount: float) -> dict[str, float] | None:
        def body(db: sqlite3.Connection, now: float) -> dict[str, float] | None:
            db.execute(_DROP_HOLDS, (call_id,))
            if not keys or not amount:
                return {}  # a release: nothing charged, nothing to remember
            if db.execute(_MARK_SETTLED, (call_id, amount, "\n".join(keys), now)).rowcount == 0:
                return None
            spent = {key: db.execute(_CHARGE, (key, amount)).fetchone()[0] for key in keys}
            self._settles += 1
            if self._settles % 1000 == 0:
                db.execute(_PRUNE_SETTLED, (now - SETTLED_RETENTION_S,))
            return spent

        return self._transaction(body)

    def renew(self, call_ids: Sequence[str], lease_s: float) -> int:
        def body(db: sqlite3.Connection, now: float) -> int:
            return sum(db.execute(_RENEW, (now + lease_s, call_id, now)).rowcount for call_id in call_ids)

        return self._transaction(body)

    def balances(self, keys: Sequence[str]) -> dict[str, Balance]:
        def body(db: sqlite3.Connection, now: float) -> dict[str, Balance]:
            result = {}
            for key in keys:
                row = db.execute(_SPENT, (key,)).fetchone()
                result[key] = Balance(row[0] if row else 0.0, db.execute(_HELD, (key, now)).fetchone()[0])
            return result

        return self._transaction(body)

    def close(self) -> None:
        with self._lock:
            self._db.close()
