"""Many collectors on one DuckLake: each stages its rows, any of them folds them in (issue 19).

Why not every collector writing the store's tables. DuckLake commits optimistically and has no
unique keys: two transactions that insert the same span both commit. Since DuckLake 1.5 any
transaction that deletes from (or updates) a table conflicts with every concurrent one that
inserts into it, so the rollup (``run_totals``/``runs``: a run's row replaced on each commit)
already serializes every commit that touches a run, and a single write token made that total.
So the work is split in two:

- **stage** (each collector, once per load group, in parallel): one transaction that only
  inserts the group's rows into ``staged_model_calls``, ``staged_run_records`` and
  ``staged_budget_events`` (the store tables' columns). Inserts into the same tables never
  conflict, so collectors never wait for each other or retry; the journal marks a group loaded
  once it is staged (durable in the lake).
- **fold** (whichever collector is due, about once a second for the whole fleet): one
  transaction that reads the staged rows no fold has read (``rowid`` above the watermarks in
  ``lake_fold``), drops the copies (first staged call or event wins, the last staged run record
  wins), writes what the store does not hold yet into the store's tables with the rollup of
  ``budgetlens.store.lake.write_registered`` and moves the watermarks. It counts the metrics.

Why it is exact. (1) Folds are serialized: each updates the one ``lake_fold`` row, and
DuckLake refuses a commit that updates a table a concurrent commit wrote; every other writer
of the store's tables (``write_batch`` on a lake, ``rebuild_runs``, ``store copy``) takes the
same row. The loser of two concurrent folds rolls back and folds later; nothing is half done.
(2) DuckLake gives each row its ``rowid`` when the row's transaction commits, in commit order
(a transaction that wrote first but committed second gets the larger ids) and keeps it through
compaction; so a row staged after a fold's snapshot has a larger rowid than every row that fold
read, and the next fold reads it: every staged row is folded once. (3) A fold sees every earlier
fold (serialized), so its anti-join against ``model_calls``/``budget_events``/``run_records``
and its merge into ``run_totals`` start from the whole stored state: a span staged by two
collectors (a load balancer retry) or twice by one (a replay after kill -9) is stored once, and
a run whose spans were staged by different collectors rolls up once, in staging order.

The staged tables keep folded rows until ``clean_staged`` deletes them (a delete conflicts with
concurrent stages, so it runs rarely and a stage that loses to it is retried at once).
"""

from __future__ import annotations

import logging
import time

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.store import lake, resends
from budgetlens.store.writer import _TABLES, WriteResult, _as_table, result_of_lake_write

log = logging.getLogger(__name__)

#: (store table, staged table, lake_fold watermark column, registered batch name, last wins).
STAGED: tuple[tuple[str, str, str, str, bool], ...] = (
    ("model_calls", "staged_model_calls", "calls_rowid", "batch_calls", False),
    ("run_records", "staged_run_records", "records_rowid", "batch_records", True),
    ("budget_events", "staged_budget_events", "events_rowid", "batch_events", False),
)
#: Seconds a stage retries while it loses to ``clean_staged`` (the only delete on staged tables).
STAGE_CONFLICT_TIMEOUT_S = 30.0

FOLD_STATE_DDL = (
    "CREATE TABLE lake_fold (calls_rowid BIGINT NOT NULL, records_rowid BIGINT NOT NULL, "
    "events_rowid BIGINT NOT NULL, folds BIGINT NOT NULL)"
)
FOLD_STATE_INIT = "INSERT INTO lake_fold VALUES (-1, -1, -1, 0)"
SELECT_MARKS = "SELECT calls_rowid, records_rowid, events_rowid FROM lake_fold"
UPDATE_MARKS = "UPDATE lake_fold SET calls_rowid = ?, records_rowid = ?, events_rowid = ?, folds = folds + 1"
_TABLE_NAMES = "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database()"
_COLUMNS = (
    "SELECT column_name, data_type FROM information_schema.columns "
    "WHERE table_catalog = current_database() AND table_name = ? ORDER BY ordinal_position"
)
# statements over the fixed staged table names (never request data)
_STAGE = {staged: f"INSERT INTO {staged} BY NAME SELECT * FROM {batch}" for _, staged, _, batch, _ in STAGED}
_UNFOLDED = {
    staged: f"SELECT rowid AS staged_rowid, * FROM {staged} WHERE rowid > ?" for _, staged, *_ in STAGED
}
_CLEAN = {staged: f"DELETE FROM {staged} WHERE rowid <= ?" for _, staged, *_ in STAGED}


# --- tables ----------------------------------------------------------------------------------


def ensure_tables(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the staged tables (the store tables' columns, no rows) and ``lake_fold`` when
    missing, and add to a staged table the columns a later migration gave its store table.
    One transaction; nothing is written when all is in place. Run after the migrations
    (``budgetlens.store.connection.migrate``), which retries it on a conflict."""
    existing = {row[0] for row in conn.execute(_TABLE_NAMES).fetchall()}
    statements = []
    for table, staged, *_ in STAGED:
        if staged not in existing:
            statements.append(f"CREATE TABLE {staged} AS SELECT * FROM {table} LIMIT 0")
            continue
        have = {name for name, _ in conn.execute(_COLUMNS, [staged]).fetchall()}
        for name, data_type in conn.execute(_COLUMNS, [table]).fetchall():
            if name not in have:  # names and types from our own schema
                statements.append(f'ALTER TABLE {staged} ADD COLUMN "{name}" {data_type}')
    if "lake_fold" not in existing:
        statements += [FOLD_STATE_DDL, FOLD_STATE_INIT]
    if not statements:
        return
    conn.execute("BEGIN TRANSACTION")
    try:
        for statement in statements:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        lake.rollback(conn)
        raise


def _validated(calls, records, events) -> dict[str, pa.Table]:
    """The three batches as checked pyarrow tables, by registered name (``writer._as_table``).
    A call the batch holds twice with other content stays twice (the fold reports the second,
    ``budgetlens.store.resends``); identical copies are dropped."""
    later: list[pa.Table] = []
    batches = {
        name: _as_table(table, columns, key, rows, later)
        for (table, columns, key, name), rows in zip(_TABLES, (calls, records, events))
    }
    if later:
        batches["batch_calls"] = pa.concat_tables([batches["batch_calls"], *later])
    return batches


# --- stage -------------------------------------------------------------------------------------


def stage_batch(
    conn: duckdb.DuckDBPyConnection,
    calls=(),
    records=(),
    events=(),
    *,
    timeout_s: float = STAGE_CONFLICT_TIMEOUT_S,
) -> int:
    """Insert one batch into the staged tables, in one insert-only transaction; commit.

    ``calls``/``records``/``events`` as ``budgetlens.store.write_batch`` takes them. Returns the
    rows staged. Raises ValueError for malformed rows (nothing staged), DuckDB errors after
    rolling back; a conflict with ``clean_staged`` is retried for up to ``timeout_s`` seconds.
    """
    batches = _validated(calls, records, events)
    rows = sum(len(batch) for batch in batches.values())
    if not rows:
        return 0

    def stage() -> None:
        conn.execute("BEGIN TRANSACTION")
        try:
            for _, staged, _, name, _ in STAGED:
                if len(batches[name]):
                    conn.execute(_STAGE[staged])
            conn.execute("COMMIT")
        except BaseException:
            lake.rollback(conn)
            raise

    for name, batch in batches.items():
        conn.register(name, batch)
    try:
        lake.retry_on_conflict(stage, timeout_s=timeout_s, what="stage")
    finally:
        for name in batches:
            conn.unregister(name)
    return rows


# --- fold --------------------------------------------------------------------------------------


def _first_per_key(rows: pa.Table, key: str, last_wins: bool) -> pa.Table:
    """``rows`` (with ``staged_rowid``) in staging order, one per ``key``: the first staged, or
    the last when ``last_wins``; ``staged_rowid`` dropped."""
    order = "descending" if last_wins else "ascending"
    rows = rows.sort_by([("staged_rowid", order)]).drop_columns(["staged_rowid"])
    if not len(rows):
        return rows
    positions: dict = {}
    for index, value in enumerate(rows.column(key).to_pylist()):
        positions.setdefault(value, index)
    return rows.take(sorted(positions.values())) if len(positions) != len(rows) else rows


def fold(conn: duckdb.DuckDBPyConnection) -> WriteResult | None:
    """One fold transaction (see the module docstring): the staged rows no fold has read go
    into the store's tables, once each, and the watermarks move past them.

    Returns what was newly stored (a ``WriteResult``, counted by the caller's metrics), or None
    when nothing was staged since the last fold (nothing is committed then). Raises the DuckDB
    conflict error (``lake.is_conflict``) when another fold or writer committed first: the
    caller folds again later (the other fold may have taken these rows), never at once.
    """
    registered: list[str] = []
    conn.execute("BEGIN TRANSACTION")
    try:
        marks = conn.execute(SELECT_MARKS).fetchone()
        if marks is None:
            raise lake.LakeError("lake_fold has no row (the lake was not migrated by this budgetlens)")
        batches: dict[str, pa.Table] = {}
        in_batch = None  # calls staged twice (by one collector or two) with other content
        new_marks = list(marks)
        for index, ((_, staged, _, name, last_wins), (_, columns, key, _)) in enumerate(zip(STAGED, _TABLES)):
            rows = conn.execute(_UNFOLDED[staged], [marks[index]]).to_arrow_table()
            if len(rows):
                new_marks[index] = int(pc.max(rows.column("staged_rowid")).as_py())
            if (
                name == "batch_calls"
                and len(rows)
                and pc.count_distinct(rows["call_id"]).as_py() != len(rows)
            ):
                ordered = rows.sort_by([("staged_rowid", "ascending")]).drop_columns(["staged_rowid"])
                in_batch = resends.as_resent(resends.later_differing(ordered))
            rows = _first_per_key(rows, key, last_wins)
            batches[name] = rows.select([c for c in columns if c in rows.column_names])
        if not any(len(batch) for batch in batches.values()):
            conn.execute("ROLLBACK")
            return None
        conn.execute(UPDATE_MARKS, new_marks)  # the fold token: concurrent folds conflict here
        for name, batch in batches.items():
            conn.register(name, batch)
            registered.append(name)
        new = lake.write_registered(conn, in_batch)
        conn.execute("COMMIT")
    except BaseException:
        lake.rollback(conn)
        raise
    finally:
        for name in registered:
            conn.unregister(name)
    return result_of_lake_write(new)


def clean_staged(conn: duckdb.DuckDBPyConnection) -> int:
    """Delete the staged rows every fold has read (at or below the watermarks); returns how
    many. One transaction; it conflicts with stages committing at the same time (they retry),
    and raises the conflict when it loses (call it again later)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        marks = conn.execute(SELECT_MARKS).fetchone()
        deleted = 0
        for index, (_, staged, *_) in enumerate(STAGED):
            if marks is not None and marks[index] >= 0:
                row = conn.execute(_CLEAN[staged], [marks[index]]).fetchone()
                deleted += int(row[0]) if row else 0
        if not deleted:
            conn.execute("ROLLBACK")
            return 0
        conn.execute("COMMIT")
    except BaseException:
        lake.rollback(conn)
        raise
    return deleted


#: The largest rowid of each staged table now (-1 when empty), one query.
_STAGED_BOUND = "SELECT " + ", ".join(
    f"(SELECT coalesce(max(rowid), -1) FROM {staged})" for _, staged, *_ in STAGED
)


def staged_bound(conn: duckdb.DuckDBPyConnection) -> tuple[int, int, int]:
    """The largest rowid of each staged table in the latest snapshot (-1: none). Read right
    after a stage commits, it bounds that stage's rows: once every watermark is at or past it
    (``is_folded``), some fold has stored them."""
    row = conn.execute(_STAGED_BOUND).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (-1, -1, -1)


def is_folded(conn: duckdb.DuckDBPyConnection, bound: tuple[int, int, int]) -> bool:
    """True when folds have read every staged row up to ``bound`` (``staged_bound``)."""
    marks = conn.execute(SELECT_MARKS).fetchone()
    return marks is not None and all(mark >= limit for mark, limit in zip(marks, bound))


def unfolded_rows(conn: duckdb.DuckDBPyConnection) -> int:
    """Staged rows no fold has read yet (a read; 0 on a lake without staged tables)."""
    existing = {row[0] for row in conn.execute(_TABLE_NAMES).fetchall()}
    if "lake_fold" not in existing:
        return 0
    marks = conn.execute(SELECT_MARKS).fetchone()
    if marks is None:
        return 0
    total = 0
    for index, (_, staged, *_) in enumerate(STAGED):
        row = conn.execute(f"SELECT count(*) FROM {staged} WHERE rowid > ?", [marks[index]]).fetchone()
        total += int(row[0]) if row else 0
    return total


def fold_all(conn: duckdb.DuckDBPyConnection, *, timeout_s: float = 60.0) -> int:
    """Fold until nothing staged is left unfolded (maintenance, tests); returns the folds that
    committed. Retries a lost fold with a jittered backoff for up to ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    folds = 0
    while True:
        result = lake.retry_on_conflict(
            lambda: fold(conn), timeout_s=max(0.0, deadline - time.monotonic()), what="fold"
        )
        if result is None:
            return folds
        folds += 1
