"""Write rows into the store: one batch, one transaction, idempotent.

Rows are plain dicts keyed by the column names in ``collector.store.schema`` (missing keys are
NULL). ``write_batch`` inserts calls and events with ``ON CONFLICT DO NOTHING`` (a span or event
sent twice is stored once) and upserts run records (the same record twice changes nothing; a newer
record of a run replaces the stored one), and rebuilds the ``runs`` rollup for every run the batch touched, all in
one transaction: after it returns, the batch is durable (DuckDB fsyncs its WAL on commit).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import duckdb
import pyarrow as pa

from collector.store import sql
from collector.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS

_INT_COLUMNS = {"turn", "turns", "tool_calls", "limit_turns", "limit_tool_calls"}
_BOOL_COLUMNS = {"is_subagent", "retryable"}
_REQUIRED = {
    "model_calls": ("span_id", "run_id", "source", "usage_status"),
    "run_records": ("run_id", "source"),
    "budget_events": ("event_id", "run_id", "name"),
}


def _arrow_type(column: str) -> pa.DataType:
    if column.endswith("_tokens") or column in _INT_COLUMNS:
        return pa.int64()
    if column.endswith(("_usd", "_s")) or column == "percent":
        return pa.float64()
    if column.endswith("_utc"):
        return pa.timestamp("us")
    if column in _BOOL_COLUMNS:
        return pa.bool_()
    return pa.string()


def _utc_naive(value):
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


@dataclass(frozen=True)
class WriteResult:
    """Rows actually inserted (duplicates are not counted) and runs whose rollup was rebuilt."""

    calls: int = 0
    records: int = 0
    events: int = 0
    runs: int = 0


def rows_to_table(table: str, columns: Sequence[str], rows: Sequence[Mapping]) -> pa.Table:
    """Return a pyarrow table of ``rows`` with the given columns and their store types.

    Raises ValueError naming the field when a row has a column the table does not have, or lacks
    a required one.
    """
    known = set(columns)
    required = _REQUIRED[table]
    for index, row in enumerate(rows):
        extra = set(row) - known
        if extra:
            raise ValueError(f"{table} row {index}: unknown field(s) {sorted(extra)}")
        for name in required:
            if row.get(name) in (None, ""):
                raise ValueError(f"{table} row {index}: field {name!r} is required")
    arrays = []
    for column in columns:
        values = [row.get(column) for row in rows]
        if column.endswith("_utc"):
            values = [_utc_naive(v) for v in values]
        if column == "is_subagent":
            values = [bool(v) for v in values]
        arrays.append(pa.array(values, type=_arrow_type(column)))
    return pa.Table.from_arrays(arrays, names=list(columns))


def write_batch(
    conn: duckdb.DuckDBPyConnection,
    calls: Sequence[Mapping] = (),
    records: Sequence[Mapping] = (),
    events: Sequence[Mapping] = (),
) -> WriteResult:
    """Insert one batch and refresh the ``runs`` rollup of the runs it touches; commit.

    ``conn`` is a writable connection (``collector.store.write_connection``). Duplicates within
    the batch or of stored rows are skipped. Raises ValueError for malformed rows (before anything
    is written) and re-raises DuckDB errors after rolling back.
    """
    calls = _dedupe(calls, "span_id")
    records = _dedupe(records, "run_id")
    events = _dedupe(events, "event_id")
    tables = {
        "batch_calls": rows_to_table("model_calls", MODEL_CALL_COLUMNS, calls),
        "batch_records": rows_to_table("run_records", RUN_RECORD_COLUMNS, records),
        "batch_events": rows_to_table("budget_events", BUDGET_EVENT_COLUMNS, events),
    }
    run_ids = sorted({row["run_id"] for group in (calls, records, events) for row in group})
    tables["batch_run_ids"] = pa.table({"run_id": pa.array(run_ids, type=pa.string())})
    if not run_ids:
        return WriteResult()
    for name, table in tables.items():
        conn.register(name, table)
    conn.execute("BEGIN TRANSACTION")
    try:
        counts = [
            conn.execute(statement).fetchone()[0] if len(tables[batch]) else 0
            for statement, batch in (
                (sql.INSERT_CALLS, "batch_calls"),
                (sql.INSERT_RECORDS, "batch_records"),
                (sql.INSERT_EVENTS, "batch_events"),
            )
        ]
        conn.execute(sql.DELETE_TOUCHED_RUNS)
        conn.execute(sql.INSERT_TOUCHED_RUNS)
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    finally:
        for name in tables:
            conn.unregister(name)
    return WriteResult(calls=counts[0], records=counts[1], events=counts[2], runs=len(run_ids))


def rebuild_runs(conn: duckdb.DuckDBPyConnection) -> int:
    """Rebuild the whole ``runs`` rollup (after a bulk load); return the number of runs."""
    run_ids = [row[0] for row in conn.execute(sql.SELECT_ALL_RUN_IDS).fetchall()]
    conn.register("batch_run_ids", pa.table({"run_id": pa.array(run_ids, type=pa.string())}))
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute("DELETE FROM runs")
        conn.execute(sql.INSERT_TOUCHED_RUNS)
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.unregister("batch_run_ids")
    return len(run_ids)


def _dedupe(rows: Iterable[Mapping], key: str) -> list[Mapping]:
    seen: set = set()
    unique = []
    for row in rows:
        identity = row.get(key)
        if identity in seen:
            continue
        seen.add(identity)
        unique.append(row)
    return unique
