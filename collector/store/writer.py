"""Write rows into the store: one batch, one transaction, idempotent, incremental rollup.

Rows are plain dicts keyed by the column names in ``budgetlens.store.schema`` (missing keys are
NULL), or pyarrow tables with (a subset of) those columns. ``write_batch`` inserts calls and
events with ``ON CONFLICT DO NOTHING`` (a span or event sent twice is stored once) and upserts
run records (the same record twice changes nothing; a newer record of a run replaces the stored
one); the inserts return only the rows actually written, and only those are merged into the
per-run state ``run_totals`` (sums add, min/max merge, model lists merge), from which the ``runs``
rows of the changed runs are upserted, and the per run x model rollup ``run_model_rollup``
(``budgetlens.store.rollups``) is merged from the same new calls. So a commit costs in proportion to the batch, not to the
store. The calls insert is optimistic: a plain ``INSERT`` first, the ``ON CONFLICT`` one only when
a batch call id is stored already (``_insert_calls``). All in one transaction: after it returns, the batch is durable (DuckDB fsyncs its WAL on
commit). ``rebuild_runs`` recomputes both from scratch and gives the same ``runs``.

On a DuckLake (no primary keys, no RETURNING) the same batch goes through
``budgetlens.store.lake.write_batch_lake``: anti-joins under the fold token that makes concurrent
writers conflict, retried on a fresh snapshot when a commit loses; same rows, same rollup.
Collectors on a lake stage their rows instead (``budgetlens.store.lake_ingest``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.store import lake, resends, rollups, sql
from budgetlens.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS

_INT_COLUMNS = {"turn", "turns", "tool_calls", "limit_turns", "limit_tool_calls", "content_digest"}
_BOOL_COLUMNS = {"is_subagent", "retryable"}
_REQUIRED = {
    "model_calls": ("span_id", "run_id", "source", "usage_status"),
    "run_records": ("run_id", "source"),
    "budget_events": ("event_id", "run_id", "name"),
}
_TABLES = (  # (store table, columns, key, registered batch name)
    ("model_calls", MODEL_CALL_COLUMNS, "call_id", "batch_calls"),
    ("run_records", RUN_RECORD_COLUMNS, "run_id", "batch_records"),
    ("budget_events", BUDGET_EVENT_COLUMNS, "event_id", "batch_events"),
)

Rows: TypeAlias = Sequence[Mapping] | pa.Table


def _arrow_type(column: str) -> pa.DataType:
    if column.endswith("_tokens") or column in _INT_COLUMNS:
        return pa.int64()
    if column.endswith(("_usd", "_s")) or column == "percent":
        return pa.float64()
    if column.endswith("_utc"):
        return pa.timestamp("us")  # pyarrow converts tz-aware datetimes to UTC
    if column in _BOOL_COLUMNS:
        return pa.bool_()
    return pa.string()


@dataclass(frozen=True)
class WriteResult:
    """Rows actually inserted (duplicates are not counted) and runs whose rollup changed.

    ``new_calls``/``new_events`` hold the inserted rows (pyarrow tables, the columns of
    ``sql.INSERT_CALLS``/``INSERT_EVENTS`` RETURNING), ``new_records`` the inserted or changed
    run records and ``runs_rows`` the upserted ``runs`` rows (run_id, task_type, stop_reason,
    total_tokens, team, service_name); None when nothing was written. The ingest path counts its Prometheus metrics from them.
    ``resent``: the calls re-sent with another content digest than the stored (or an earlier)
    call of their id (``budgetlens.store.resends.RESENT_SCHEMA``), None when none.
    """

    calls: int = 0
    records: int = 0
    events: int = 0
    runs: int = 0
    new_calls: pa.Table | None = field(default=None, compare=False, repr=False)
    new_records: pa.Table | None = field(default=None, compare=False, repr=False)
    new_events: pa.Table | None = field(default=None, compare=False, repr=False)
    runs_rows: pa.Table | None = field(default=None, compare=False, repr=False)
    #: calls re-sent with other content than the stored ones (``budgetlens.store.resends``)
    resent: pa.Table | None = field(default=None, compare=False, repr=False)


def call_id(trace_id: str | None, span_id: str) -> str:
    """The key of a model call: ``"<trace id>:<span id>"`` (a span is unique only within its
    trace), or ``span_id`` alone for a call without a trace (an importer's stable id)."""
    return f"{trace_id}:{span_id}" if trace_id else span_id


def _with_call_ids(rows: pa.Table) -> pa.Table:
    """``rows`` (model_calls) with ``call_id`` filled from trace and span id where it is NULL."""
    names = rows.column_names
    if "span_id" not in names:
        return rows
    span = rows.column("span_id")
    trace = rows.column("trace_id") if "trace_id" in names else pa.nulls(len(rows), pa.string())
    derived = pc.if_else(pc.is_null(trace), span, pc.binary_join_element_wise(trace, span, ":"))
    if "call_id" in names:
        index = names.index("call_id")
        return rows.set_column(index, "call_id", pc.coalesce(rows.column("call_id"), derived))
    return rows.append_column("call_id", derived)


def rows_to_table(table: str, columns: Sequence[str], rows: Sequence[Mapping]) -> pa.Table:
    """Return a pyarrow table of ``rows`` with the given columns and their store types.

    Raises ValueError naming the field when a row has a column the table does not have, or lacks
    a required one.
    """
    known = frozenset(columns)
    required = _REQUIRED[table]
    for index, row in enumerate(rows):
        if not known.issuperset(row):
            raise ValueError(f"{table} row {index}: unknown field(s) {sorted(set(row) - known)}")
        for name in required:
            if row.get(name) in (None, ""):
                raise ValueError(f"{table} row {index}: field {name!r} is required")
    arrays = []
    for column in columns:
        values = [row.get(column) for row in rows]
        if column == "is_subagent":
            values = [bool(v) for v in values]
        elif column == "call_id":
            values = [v or call_id(row.get("trace_id"), row["span_id"]) for v, row in zip(values, rows)]
        arrays.append(pa.array(values, type=_arrow_type(column)))
    return pa.Table.from_arrays(arrays, names=list(columns))


def check_table(
    table: str, columns: Sequence[str], key: str, rows: pa.Table, resent: list[pa.Table] | None = None
) -> pa.Table:
    """Validate a pyarrow batch (known columns, required ones present and non-null); return it
    with duplicate ``key`` values dropped (the first row wins). Raises ValueError naming the field.
    ``resent``: the dropped calls whose content digest differs from the first's are appended to
    it (``resends.later_differing``)."""
    extra = set(rows.column_names) - set(columns)
    if extra:
        raise ValueError(f"{table}: unknown field(s) {sorted(extra)}")
    for name in _REQUIRED[table]:
        if name not in rows.column_names or rows.column(name).null_count:
            raise ValueError(f"{table}: field {name!r} is required")
    if table == "model_calls":
        rows = _with_call_ids(rows)
    keys = rows.column(key)
    if len(rows) and pc.count_distinct(keys).as_py() != len(rows):
        if resent is not None and table == "model_calls":
            later = resends.later_differing(rows)
            if len(later):
                resent.append(later)
        first: dict = {}
        for index, value in enumerate(keys.to_pylist()):
            first.setdefault(value, index)
        rows = rows.take(sorted(first.values()))
    return rows


def _as_table(
    table: str, columns: Sequence[str], key: str, rows: Rows, resent: list[pa.Table] | None = None
) -> pa.Table:
    if isinstance(rows, pa.Table):
        return check_table(table, columns, key, rows, resent)
    return rows_to_table(table, columns, _dedupe(rows, key))


def write_batch(
    conn: duckdb.DuckDBPyConnection,
    calls: Rows = (),
    records: Rows = (),
    events: Rows = (),
) -> WriteResult:
    """Insert one batch and merge its new rows into the ``runs`` rollup; commit.

    ``conn`` is a writable connection (``budgetlens.store.write_connection``). Each of ``calls``,
    ``records``, ``events`` is a sequence of dicts or a pyarrow table. Duplicates within the batch
    or of stored rows are skipped; a call re-sent with another content digest is flagged and
    returned as ``WriteResult.resent`` (``budgetlens.store.resends``). Raises ValueError for
    malformed rows (before anything is written) and re-raises DuckDB errors after rolling back.
    """
    later: list[pa.Table] = []  # calls of the batch re-sent with other content in it
    batches = {
        name: _as_table(table, columns, key, rows, later)
        for (table, columns, key, name), rows in zip(_TABLES, (calls, records, events))
    }
    if not any(len(batch) for batch in batches.values()):
        return WriteResult()
    in_batch = resends.as_resent(pa.concat_tables(later)) if later else None
    if lake.is_lake_connection(conn):
        return _write_lake(conn, batches, in_batch)
    for name, batch in batches.items():
        conn.register(name, batch)
    registered = list(batches)
    conn.execute("BEGIN TRANSACTION")
    try:
        calls = batches["batch_calls"]
        inserted, resent = _insert_calls(conn, calls)
        new = {
            "new_calls": inserted,
            "new_records": _returned(conn, sql.INSERT_RECORDS),
            "new_events": _returned(conn, sql.INSERT_EVENTS),
        }
        # the runs whose stored call was flagged: by the insert, then for the in-batch resends
        marked = resent.select(["run_id"])
        if in_batch is not None:
            marked = pa.concat_tables([marked, resends.mark(conn, in_batch)])
            resent = pa.concat_tables([resent, in_batch])
        runs_rows = None
        recounted = None
        merged = new
        if len(new["new_calls"]) or len(marked):
            merged, new["new_calls"], recounted = _drop_aggregates(conn, new, registered, marked)
        if recounted is not None or any(len(table) for table in new.values()):
            for name, table in merged.items():
                conn.register(name, table)
                registered.append(name)
            touched = _returned(conn, sql.MERGE_RUN_TOTALS)
            if len(merged["new_calls"]):
                conn.execute(rollups.MERGE)
            if recounted is not None:
                conn.execute(rollups.DELETE_RECOUNT)
                conn.execute(rollups.INSERT_RECOUNT)
                touched = pa.concat_tables([touched, recounted.select(touched.column_names)])
            conn.register("touched", touched)
            registered.append("touched")
            runs_rows = _returned(conn, sql.UPSERT_TOUCHED_RUNS)
        conn.execute("COMMIT")
    except Exception:
        lake.rollback(conn)  # the error that failed the batch reaches the caller
        raise
    finally:
        for name in registered:
            conn.unregister(name)
    return WriteResult(
        calls=len(new["new_calls"]),
        records=len(new["new_records"]),
        events=len(new["new_events"]),
        runs=0 if runs_rows is None else len(runs_rows),
        new_calls=new["new_calls"],
        new_records=new["new_records"],
        new_events=new["new_events"],
        runs_rows=runs_rows,
        resent=resent if len(resent) else None,
    )


def _insert_calls(conn: duckdb.DuckDBPyConnection, calls: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Insert the registered ``batch_calls`` (``calls``, no call id twice: ``check_table``), the
    first statement of the writer's open transaction: (the inserted rows, the resends of stored
    calls with another digest, flagged).

    Optimistic: ``sql.PLAIN_INSERT_CALLS`` first, without the ``ON CONFLICT`` check; when it
    succeeds no batch call id was stored, so every selected row is new and none is a resend.
    When a call id is stored (a resend, a replay) DuckDB raises ``ConstraintException`` and
    aborts the transaction (it has no savepoints): it is rolled back, begun again (nothing else
    was done in it yet) and the batch goes through ``_insert_calls_checked``. Same rows either way."""
    statement = _insert_calls_for(calls)
    try:
        returned = _returned(conn, sql.PLAIN_INSERT_CALLS[statement])
    except duckdb.ConstraintException:
        conn.execute("ROLLBACK")
        conn.execute("BEGIN TRANSACTION")
        return _insert_calls_checked(conn, calls)
    return returned.drop_columns(["content_digest"]), resends.RESENT_SCHEMA.empty_table()


def _insert_calls_checked(conn: duckdb.DuckDBPyConnection, calls: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``_insert_calls`` with the primary-key check in the statement (``ON CONFLICT``): by
    ``resends.split_returned`` after ``sql.INSERT_CALLS``, by ``resends.flag_stored`` after the
    ``DO NOTHING`` insert when a call id was stored already."""
    statement = _insert_calls_for(calls)
    returned = _returned(conn, statement)
    if statement != sql.INSERT_CALLS_WITHOUT_RESPONSE_IDS:
        return resends.split_returned(returned, calls)
    inserted = returned.drop_columns(["content_digest"])
    if len(returned) == len(calls):
        return inserted, resends.RESENT_SCHEMA.empty_table()
    return inserted, resends.flag_stored(conn, calls)


def _insert_calls_for(calls: pa.Table) -> str:
    """The insert of ``calls``: without the check of stored response ids when none has one."""
    names = calls.column_names
    if "response_id" in names and calls.column("response_id").null_count == len(calls):
        return sql.INSERT_CALLS_WITHOUT_RESPONSE_IDS
    return sql.INSERT_CALLS


def _drop_aggregates(
    conn: duckdb.DuckDBPyConnection, new: dict[str, pa.Table], registered: list[str], marked: pa.Table
) -> tuple[dict[str, pa.Table], pa.Table, pa.Table | None]:
    """Delete the aggregates the new calls reveal (``sql.DELETE_AGGREGATES``: a call with a call
    right below it, whichever arrived first) and recount the totals of their runs, and of the
    ``marked`` runs (a table of ``run_id``: a stored call of theirs was flagged), from the stored
    rows. Returns the new rows to merge (without those runs: their totals are recounted, not
    merged), the new calls without the aggregates, and the recounted ``run_totals`` rows (None
    when there was nothing to recount)."""
    dropped = pa.table({"call_id": pa.array([], pa.string()), "run_id": pa.array([], pa.string())})
    if len(new["new_calls"]):
        conn.register("new_calls", new["new_calls"])
        registered.append("new_calls")
        aggregates = conn.sql(sql.FIND_AGGREGATES).to_arrow_table()
        conn.unregister("new_calls")
        registered.remove("new_calls")
        if len(aggregates):
            conn.register("aggregates", aggregates)
            registered.append("aggregates")
            dropped = _returned(conn, sql.DELETE_AGGREGATES)
    if not len(dropped) and not len(marked):
        return new, new["new_calls"], None
    runs = pa.concat_arrays([*dropped["run_id"].cast(pa.string()).chunks, *marked["run_id"].chunks])
    recount = pa.table({"run_id": pc.unique(runs)})
    conn.register("recount", recount)
    registered.append("recount")
    conn.execute(sql.DELETE_RECOUNT_TOTALS)
    recounted = _returned(conn, sql.INSERT_RECOUNT_TOTALS)
    kept = {}
    for name, table in new.items():
        keep = pc.invert(pc.is_in(table["run_id"], value_set=recount["run_id"]))
        if name == "new_calls":
            keep = pc.and_(keep, pc.invert(pc.is_in(table["call_id"], value_set=dropped["call_id"])))
        kept[name] = table.filter(pc.fill_null(keep, True))
    calls = new["new_calls"]
    written = calls.filter(pc.invert(pc.is_in(calls["call_id"], value_set=dropped["call_id"])))
    return kept, written, recounted


def _write_lake(
    conn: duckdb.DuckDBPyConnection, batches: dict[str, pa.Table], in_batch: pa.Table | None
) -> WriteResult:
    for name, batch in batches.items():
        conn.register(name, batch)
    try:
        new = lake.retry_on_conflict(lambda: lake.write_batch_lake(conn, in_batch), what="write_batch")
    finally:
        for name in batches:
            conn.unregister(name)
    return result_of_lake_write(new)


def result_of_lake_write(new: dict[str, pa.Table | None]) -> WriteResult:
    """The ``WriteResult`` of the tables ``budgetlens.store.lake.write_registered`` returned."""
    calls, records, events, runs_rows = (
        new["new_calls"],
        new["new_records"],
        new["new_events"],
        new["runs_rows"],
    )
    return WriteResult(
        calls=len(calls) if calls is not None else 0,
        records=len(records) if records is not None else 0,
        events=len(events) if events is not None else 0,
        runs=len(runs_rows) if runs_rows is not None else 0,
        new_calls=calls,
        new_records=records,
        new_events=events,
        runs_rows=runs_rows,
        resent=new.get("resent"),
    )


def rebuild_runs(conn: duckdb.DuckDBPyConnection) -> int:
    """Rebuild ``run_totals``, the whole ``runs`` rollup and ``run_model_rollup`` from the stored rows (after a bulk
    load); return the number of runs. On a DuckLake it takes the fold token (see the module
    docstring) and is retried when it loses a conflict."""
    if lake.is_lake_connection(conn):
        return lake.retry_on_conflict(lambda: _rebuild(conn, on_lake=True), what="rebuild_runs")
    return _rebuild(conn, on_lake=False)


def _rebuild(conn: duckdb.DuckDBPyConnection, *, on_lake: bool) -> int:
    conn.execute("BEGIN TRANSACTION")
    try:
        if on_lake:
            conn.execute(sql.LAKE_TAKE_FOLD_TOKEN)
        conn.execute(sql.DELETE_ALL_RUN_TOTALS)
        conn.execute(sql.INSERT_ALL_RUN_TOTALS)
        conn.execute(sql.DELETE_ALL_RUNS)
        conn.execute(sql.INSERT_ALL_RUNS)
        conn.execute(rollups.DELETE_ALL)
        conn.execute(rollups.INSERT_ALL)
        row = conn.execute(sql.COUNT_RUNS).fetchone()
        count = int(row[0]) if row is not None else 0
        conn.execute("COMMIT")
    except Exception:
        lake.rollback(conn)
        raise
    return count


def _dedupe(rows: Iterable[Mapping], key: str) -> list[Mapping]:
    seen: set = set()
    unique = []
    for row in rows:
        identity = row.get(key)
        if identity is None and key == "call_id" and row.get("span_id"):
            identity = call_id(row.get("trace_id"), row["span_id"])
        if identity in seen:
            continue
        seen.add(identity)
        unique.append(row)
    return unique


def _returned(conn: duckdb.DuckDBPyConnection, statement: str) -> pa.Table:
    """Run a DML statement with RETURNING once; its returned rows as a pyarrow table.

    (``conn.sql`` executes a DML statement at once and keeps its result; ``execute`` followed by
    ``to_arrow_table`` would copy the rows once more.)
    """
    return conn.sql(statement).to_arrow_table()
