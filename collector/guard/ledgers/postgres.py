"""The fleet ledger in PostgreSQL (``BUDGETLENS_LEDGER=postgresql://...``; extra ``fleet``: psycopg 3).

Three tables (``budgetlens_ledger_accounts``, ``_holds``, ``_settled``) and two functions,
created on first use under an advisory lock. A reservation is one statement: the function locks
each account row (``SELECT ... FOR UPDATE``, keys in sorted order; settles lock accounts before
holds too, so nothing deadlocks), sums the account's live holds (``expires_at > now()``, the server's clock: no
machine's clock skew matters) and inserts the holds only when every account fits. Under READ
COMMITTED each statement of the function reads what the transactions before it committed, so
the N processes on M machines reserving against one account are serialized on its row: the check
and the hold are one atomic step. A settle inserts the call id into ``_settled`` (primary key)
and charges only when that insert happened: a retried settle charges once.

Each thread has its own connection (autocommit); a broken connection is dropped and the
operation retried once on a new one (safe: both operations are idempotent by call id), then
:class:`LedgerUnavailable` is raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from budgetlens.guard.ledgers.protocol import EPSILON, Balance, LedgerUnavailable, Refusal

log = logging.getLogger(__name__)

__all__ = ["PostgresLedger"]

_SCHEMA = f"""
SELECT pg_advisory_xact_lock(hashtext('budgetlens_ledger_schema'));
CREATE TABLE IF NOT EXISTS budgetlens_ledger_accounts (
    key text PRIMARY KEY, spent double precision NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS budgetlens_ledger_holds (
    call_id text NOT NULL, key text NOT NULL, amount double precision NOT NULL,
    expires_at timestamptz NOT NULL, PRIMARY KEY (call_id, key));
CREATE INDEX IF NOT EXISTS budgetlens_ledger_holds_by_key ON budgetlens_ledger_holds (key, expires_at);
CREATE TABLE IF NOT EXISTS budgetlens_ledger_settled (
    call_id text PRIMARY KEY, amount double precision NOT NULL, keys text[] NOT NULL,
    settled_at timestamptz NOT NULL DEFAULT now());
CREATE OR REPLACE FUNCTION budgetlens_ledger_reserve(
    p_call text, p_keys text[], p_limits double precision[], p_amount double precision,
    p_lease_s double precision)
RETURNS TABLE (o_key text, o_limit double precision, o_spent double precision, o_held double precision)
LANGUAGE plpgsql AS $$
DECLARE
    i int;
    s double precision;
    h double precision;
BEGIN
    IF EXISTS (SELECT 1 FROM budgetlens_ledger_holds WHERE call_id = p_call AND expires_at > now())
       OR EXISTS (SELECT 1 FROM budgetlens_ledger_settled WHERE call_id = p_call) THEN
        RETURN;  -- a retried reserve: this call holds already (or was settled)
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        INSERT INTO budgetlens_ledger_accounts (key) VALUES (p_keys[i]) ON CONFLICT (key) DO NOTHING;
        SELECT spent INTO s FROM budgetlens_ledger_accounts WHERE key = p_keys[i] FOR UPDATE;
        SELECT coalesce(sum(amount), 0) INTO h FROM budgetlens_ledger_holds
            WHERE key = p_keys[i] AND expires_at > now();
        IF s >= p_limits[i] OR s + h + p_amount > p_limits[i] + {EPSILON!r} THEN
            o_key := p_keys[i]; o_limit := p_limits[i]; o_spent := s; o_held := h;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
    DELETE FROM budgetlens_ledger_holds WHERE ctid IN (
        SELECT ctid FROM budgetlens_ledger_holds WHERE key = ANY (p_keys) AND expires_at <= now()
        FOR UPDATE SKIP LOCKED);  -- tidy expired holds; never wait for a settle that drops one
    IF p_amount > 0 THEN
        INSERT INTO budgetlens_ledger_holds (call_id, key, amount, expires_at)
            SELECT p_call, k, p_amount, now() + make_interval(secs => p_lease_s) FROM unnest(p_keys) AS k
            ON CONFLICT (call_id, key) DO UPDATE SET amount = excluded.amount, expires_at = excluded.expires_at;
    END IF;
END $$;
CREATE OR REPLACE FUNCTION budgetlens_ledger_settle(p_call text, p_keys text[], p_amount double precision)
RETURNS double precision[]
LANGUAGE plpgsql AS $$
DECLARE
    k text;
    s double precision;
    result double precision[] := '{{}}';
BEGIN
    IF p_amount = 0 OR coalesce(array_length(p_keys, 1), 0) = 0 THEN
        DELETE FROM budgetlens_ledger_holds WHERE call_id = p_call;
        RETURN result;  -- a release: nothing charged, nothing to remember
    END IF;
    INSERT INTO budgetlens_ledger_settled (call_id, amount, keys) VALUES (p_call, p_amount, p_keys)
        ON CONFLICT (call_id) DO NOTHING;
    IF NOT FOUND THEN
        DELETE FROM budgetlens_ledger_holds WHERE call_id = p_call;
        RETURN NULL;  -- settled before: charged once
    END IF;
    -- account rows first, then holds: the order reservations lock in (no deadlock)
    FOREACH k IN ARRAY p_keys LOOP
        INSERT INTO budgetlens_ledger_accounts AS a (key, spent) VALUES (k, p_amount)
            ON CONFLICT (key) DO UPDATE SET spent = a.spent + excluded.spent RETURNING a.spent INTO s;
        result := result || s;
    END LOOP;
    DELETE FROM budgetlens_ledger_holds WHERE call_id = p_call;
    IF random() < 0.001 THEN
        DELETE FROM budgetlens_ledger_settled WHERE settled_at < now() - interval '3 days';
    END IF;
    RETURN result;
END $$;
"""
_RESERVE = "SELECT * FROM budgetlens_ledger_reserve(%s, %s, %s, %s, %s)"
_SETTLE = "SELECT budgetlens_ledger_settle(%s, %s, %s)"
_RENEW = (
    "UPDATE budgetlens_ledger_holds SET expires_at = now() + make_interval(secs => %s)"
    " WHERE call_id = ANY (%s) AND expires_at > now()"
)
_BALANCES = (
    "SELECT k, coalesce(a.spent, 0), (SELECT coalesce(sum(h.amount), 0) FROM budgetlens_ledger_holds h"
    " WHERE h.key = k AND h.expires_at > now())"
    " FROM unnest(%s::text[]) AS k LEFT JOIN budgetlens_ledger_accounts a ON a.key = k"
)


class PostgresLedger:
    """A :class:`budgetlens.guard.ledgers.protocol.Ledger` in PostgreSQL.

    ``conninfo``: a libpq URL or key=value string (``postgresql://user@host/db``).
    ``connect_timeout_s``: seconds to wait for a connection before LedgerUnavailable. Raises
    ImportError naming the ``fleet`` extra when psycopg is not installed. Thread-safe (one
    connection per thread).
    """

    def __init__(self, conninfo: str, *, connect_timeout_s: float = 5.0) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "a postgresql:// ledger needs psycopg 3: pip install 'budgetlens[fleet]'"
            ) from exc
        self._psycopg = psycopg
        self._conninfo = conninfo
        self._timeout = connect_timeout_s
        self._local = threading.local()
        self._all: list[Any] = []
        self._all_lock = threading.Lock()
        self._schema_ready = False
        self._pid = os.getpid()

    def _connection(self) -> Any:
        if self._pid != os.getpid():  # a forked child never uses its parent's connections
            self._pid, self._local, self._all = os.getpid(), threading.local(), []
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        conn = self._psycopg.connect(
            self._conninfo, autocommit=True, connect_timeout=max(1, round(self._timeout))
        )
        if not self._schema_ready:
            with conn.transaction():
                conn.execute(_SCHEMA)
            self._schema_ready = True
        self._local.conn = conn
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _run(self, statement: str, params: Sequence[Any], fetch: str) -> Any:
        errors = (self._psycopg.OperationalError, self._psycopg.InterfaceError)
        rollback = self._psycopg.errors.TransactionRollback  # deadlock, serialization: retry
        for attempt in (1, 2, 3):
            try:
                cursor = self._connection().execute(statement, params)
                if fetch == "one":
                    return cursor.fetchone()
                if fetch == "all":
                    return cursor.fetchall()
                return cursor.rowcount
            except rollback as exc:
                if attempt == 3:
                    raise LedgerUnavailable(f"PostgreSQL ledger: {exc}") from exc
                log.info("PostgreSQL ledger: %s; retrying", exc)
            except errors as exc:
                conn = getattr(self._local, "conn", None)
                self._local.conn = None
                if conn is not None:
                    with contextlib.suppress(Exception):  # a broken connection may fail to close
                        conn.close()
                if attempt >= 2:
                    raise LedgerUnavailable(f"PostgreSQL ledger unreachable: {exc}") from exc
                log.info("PostgreSQL ledger connection lost (%s); reconnecting", exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def reserve(
        self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float, lease_s: float
    ) -> Refusal | None:
        ordered = sorted(accounts)
        row = self._run(
            _RESERVE,
            (call_id, [k for k, _ in ordered], [float(v) for _, v in ordered], amount, lease_s),
            "one",
        )
        return None if row is None else Refusal(row[0], row[1], row[2], row[3])

    def settle(self, call_id: str, keys: Sequence[str], amount: float) -> dict[str, float] | None:
        ordered = sorted(keys)
        row = self._run(_SETTLE, (call_id, ordered, amount), "one")
        if row is None or row[0] is None:
            return None
        return dict(zip(ordered, row[0]))

    def renew(self, call_ids: Sequence[str], lease_s: float) -> int:
        if not call_ids:
            return 0
        return self._run(_RENEW, (lease_s, list(call_ids)), "count")

    def balances(self, keys: Sequence[str]) -> dict[str, Balance]:
        rows = self._run(_BALANCES, (list(keys),), "all")
        return {key: Balance(spent, held) for key, spent, held in rows}

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
