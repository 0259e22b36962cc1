"""The DuckLake side of the store: attach, migrate, write with retry (maintenance: ``lake_compact``).

A DuckLake store keeps its catalog in a database (PostgreSQL for many writers) and its rows as
Parquet files under a data path; every budgetlens process attaches it to an in-memory DuckDB
as ``budgetlens_lake`` and makes it the default database, so the schema and the analysis SQL are
the ones of the file store.

Many writers. DuckLake commits optimistically and has no primary keys: two transactions that
only insert into a table both commit, so an anti-join "insert what is not stored yet" alone
would store a span twice when two writers commit it at once. Every transaction that writes the
store's tables therefore first updates the one row of ``lake_fold`` (the fold token); DuckLake
refuses to commit a transaction that updates a table a concurrent commit wrote, so the second of
two such writers fails, rolls back, and ``write_batch_lake`` runs it again on a fresh snapshot,
where the anti-join sees the winner's rows. Collectors do not take the token for each batch:
they stage their rows (insert-only, never in conflict) and fold them in about once a second
between them (``budgetlens.store.lake_ingest``, which says why that is exact).

Extensions come from the PyPI packages ``duckdb-extension-ducklake`` and
``duckdb-extension-postgres-scanner`` (the ``lake`` extra; built for the pinned DuckDB), loaded
from their files, so no network is needed; without them DuckDB's own autoload is tried.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.store import resends, rollups, sql
from budgetlens.store.location import ENV_LAKE_DATA_PATH, LakeLocation

log = logging.getLogger(__name__)

#: The name the lake is attached under in every budgetlens process.
LAKE_ALIAS = "budgetlens_lake"
#: Extensions and the Python packages that ship them (``pip install 'budgetlens[lake]'``).
_EXTENSION_PACKAGES = {
    "ducklake": "duckdb_extension_ducklake",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "httpfs": "duckdb_extension_httpfs",
}
#: Seconds a writer keeps retrying a commit that lost a conflict before it gives up.
DEFAULT_CONFLICT_TIMEOUT_S = 60.0

T = TypeVar("T")


class LakeError(RuntimeError):
    """The lake cannot be attached (missing extension, catalog unreachable, no lake there)."""


class LakeMissing(LakeError):
    """The catalog holds no DuckLake yet (nothing was written to this location)."""


# --- attaching ------------------------------------------------------------------------------


def _load_extension(conn: duckdb.DuckDBPyConnection, name: str) -> None:
    """Load extension ``name`` from its PyPI package when installed, else by DuckDB's autoload."""
    try:
        package = importlib.import_module(_EXTENSION_PACKAGES[name])
    except ImportError:
        package = None
    if package is not None and package.__file__ is not None:
        files = sorted(
            Path(package.__file__).parent.glob(f"extensions/v{duckdb.__version__}/*.duckdb_extension")
        )
        if files:
            conn.execute(f"LOAD '{files[0]}'")  # a path from an installed package, not user data
            return
    try:
        conn.execute(f"LOAD {name}")
    except duckdb.Error as error:
        raise LakeError(
            f"DuckDB extension {name!r} for DuckDB {duckdb.__version__} is not available: install "
            f"budgetlens with the lake extra (pip install 'budgetlens[lake]'), which pins DuckDB to the "
            f"version the duckdb-extension-* packages are built for ({error})"
        ) from error


def attach(location: LakeLocation, *, create: bool) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB with the lake attached as ``budgetlens_lake`` and in use.

    ``create``: make a new lake when the catalog has none (needs a data path). Raises LakeMissing
    when there is no lake and ``create`` is false, LakeError when the catalog cannot be reached or
    a new lake has no data path.
    """
    conn = duckdb.connect()
    try:
        _load_extension(conn, "ducklake")
        if location.is_postgres:
            _load_extension(conn, "postgres_scanner")
        if location.data_path and "://" in location.data_path:
            _load_extension(conn, "httpfs")
        if create and not location.is_postgres and ":" not in location.catalog:
            Path(location.catalog).parent.mkdir(parents=True, exist_ok=True)  # a DuckDB-file catalog
        # ATTACH takes no prepared parameters: the location is quoted as an SQL string literal
        # no data inlining: inlined STRUCT/LIST rows (run_totals) break reads from a PostgreSQL
        # catalog in this DuckLake version; every commit writes Parquet, ``compact`` merges it
        options = ["DATA_INLINING_ROW_LIMIT 0"]
        if location.data_path:
            options.append(f"DATA_PATH {_literal(location.data_path)}")
        if not create or not location.data_path:
            options.append("CREATE_IF_NOT_EXISTS false")
        statement = f"ATTACH {_literal('ducklake:' + location.catalog)} AS {LAKE_ALIAS}"
        if options:
            statement += f" ({', '.join(options)})"
        try:
            conn.execute(statement)
        except duckdb.Error as error:
            if "does not exist" in str(error) and "creating a new DuckLake" in str(error):
                if create:
                    raise LakeError(
                        f"{location}: no DuckLake here yet, and a new one needs a data path: add "
                        f"?data_path=DIR_OR_S3_URL to the location or set {ENV_LAKE_DATA_PATH}"
                    ) from error
                raise LakeMissing(
                    f"{location}: no budgetlens store here yet; create one with `budgetlens store copy`, "
                    "`budgetlens sample`, `budgetlens import` or `budgetlens collector`"
                ) from error
            raise LakeError(f"{location}: cannot attach the DuckLake: {error}") from error
        conn.execute(f"USE {LAKE_ALIAS}")
        return conn
    except BaseException:
        conn.close()
        raise


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


_instances: dict[LakeLocation, duckdb.DuckDBPyConnection] = {}
_instances_lock = threading.Lock()


@contextmanager
def lake_cursor(location: LakeLocation, *, create: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a cursor on this process's one attachment of ``location`` (attached on first use,
    kept for the life of the process: attaching costs a catalog round trip and extension loads).

    Each cursor is its own DuckDB connection (one per thread); closed on exit.
    """
    with _instances_lock:
        base = _instances.get(location)
        if base is None:
            base = attach(location, create=create)
            _instances[location] = base
    cursor = base.cursor()
    try:
        cursor.execute(f"USE {LAKE_ALIAS}")  # a cursor starts in the in-memory database
        yield cursor
    finally:
        cursor.close()


def forget(location: LakeLocation) -> None:
    """Drop this process's attachment of ``location`` (the next cursor attaches anew): after
    an error that may have broken its catalog connection (PostgreSQL restarted or away)."""
    with _instances_lock:
        base = _instances.pop(location, None)
    if base is not None:
        with contextlib.suppress(duckdb.Error):
            base.close()


def close_all() -> None:
    """Detach every lake this process attached (tests, benchmarks)."""
    with _instances_lock:
        for conn in _instances.values():
            conn.close()
        _instances.clear()
        _schemas.clear()


def is_lake_connection(conn: duckdb.DuckDBPyConnection) -> bool:
    """True when ``conn``'s default database is a DuckLake (a ``lake_cursor``)."""
    row = conn.execute(
        "SELECT type FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return row is not None and row[0] == "ducklake"


#: The latest snapshot id of the attached lake (one row, BIGINT).
LATEST_SNAPSHOT = f"SELECT max(snapshot_id) FROM ducklake_snapshots('{LAKE_ALIAS}')"


# --- schema ---------------------------------------------------------------------------------

_PRIMARY_KEY = re.compile(r"\s+PRIMARY KEY\b", re.IGNORECASE)
_TABLE_KEY = re.compile(r",\s*PRIMARY KEY\s*\([^)]*\)", re.IGNORECASE)


def lake_ddl(script: str) -> str:
    """A migration script as DuckLake takes it: DuckLake has no primary keys or unique
    constraints, so ``PRIMARY KEY`` is dropped (uniqueness is the writer's job, see the module
    docstring); everything else is the file store's DDL."""
    return _PRIMARY_KEY.sub("", _TABLE_KEY.sub("", script))


# --- writing with retry on conflict ----------------------------------------------------------


def is_conflict(error: BaseException) -> bool:
    """True when ``error`` is a DuckLake commit that lost to a concurrent one (retry it)."""
    text = str(error)
    return isinstance(error, duckdb.Error) and (
        "Transaction conflict" in text
        or "conflict" in text.lower()
        and ("commit" in text.lower() or isinstance(error, duckdb.TransactionException))
    )


def rollback(conn: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if any, on the way out of a failed one: the error that
    failed it (a DuckLake COMMIT that lost a conflict, a COMMIT that found the disk full) must
    reach the caller, not the ROLLBACK's own ("no transaction is active", since DuckDB has
    already ended a transaction whose COMMIT failed). The ROLLBACK's error is logged at debug."""
    try:
        conn.execute("ROLLBACK")
    except duckdb.Error as error:
        log.debug("rollback after a failed transaction: %s", error)


def retry_on_conflict(
    action: Callable[[], T], *, timeout_s: float = DEFAULT_CONFLICT_TIMEOUT_S, what: str = "commit"
) -> T:
    """Run ``action`` (one whole transaction) again while it loses a commit conflict, with a
    jittered exponential backoff (5 ms doubling up to 0.5 s) for up to ``timeout_s`` seconds.

    Other errors propagate at once; a conflict past the timeout propagates too.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    attempt = 1
    while True:
        try:
            return action()
        except duckdb.Error as error:
            if not is_conflict(error) or time.monotonic() >= deadline:
                raise
            log.debug("%s lost a DuckLake conflict (attempt %d); retrying: %s", what, attempt, error)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)
            attempt += 1


def write_batch_lake(
    conn: duckdb.DuckDBPyConnection, in_batch: pa.Table | None = None
) -> dict[str, pa.Table | None]:
    """One write transaction on the lake's tables over the registered ``batch_*`` relations
    (a direct writer: an import, ``store copy``, the sample; collectors stage and fold instead,
    ``budgetlens.store.lake_ingest``).

    Takes the fold token (the ``lake_fold`` row, so it conflicts with folds and other direct
    writers), then ``write_registered``. Returns its tables. Rolls back and re-raises on error
    (``retry_on_conflict`` runs it again on a conflict).
    """
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(sql.LAKE_TAKE_FOLD_TOKEN)
        new = write_registered(conn, in_batch)
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return new


def write_registered(
    conn: duckdb.DuckDBPyConnection, in_batch: pa.Table | None = None
) -> dict[str, pa.Table | None]:
    """Inside the caller's transaction: insert the calls, events and changed run records of the
    registered ``batch_*`` relations that the store does not hold yet, and replace the
    ``run_totals`` and ``runs`` rows of the runs they touch.

    A batch call re-sent with another content digest than the stored call, and ``in_batch``
    (calls the batch held twice with other content, ``resends.later_differing``), flag the stored
    call and recount its run (``budgetlens.store.resends``). Returns the tables ``new_calls``,
    ``new_records``, ``new_events``, ``runs_rows`` and ``resent`` (None when nothing changed),
    typed as the file store's writer returns them. Exact only when no concurrent transaction
    writes these tables: the caller holds the fold token.
    """
    registered: list[str] = []
    try:
        resent = resends.find(conn, in_batch)
        new: dict[str, pa.Table | None] = {}
        for name, select, insert, delete in (
            ("new_calls", sql.LAKE_NEW_CALLS, sql.LAKE_INSERT_CALLS, None),
            ("new_records", sql.LAKE_NEW_RECORDS, sql.LAKE_INSERT_RECORDS, sql.LAKE_DELETE_RECORDS),
            ("new_events", sql.LAKE_NEW_EVENTS, sql.LAKE_INSERT_EVENTS, None),
        ):
            table = conn.sql(select).to_arrow_table()
            if name == "new_records":  # the store's INTEGER columns, as RETURNING * hands them
                table = typed_like(conn, "run_records", table)
            new[name] = table
            conn.register(name, table)
            registered.append(name)
            if len(table):
                if delete:
                    conn.execute(delete)
                conn.execute(insert)
        marked = resends.mark(conn, resent)
        runs_rows = None
        if len(marked) or any(len(table) for table in new.values() if table is not None):
            touched = typed_like(conn, "run_totals", conn.sql(sql.LAKE_MERGED_TOTALS).to_arrow_table())
            if len(marked):  # their stored rows changed: recounted, not merged
                conn.register("recount", marked)
                registered.append("recount")
                recounted = typed_like(conn, "run_totals", conn.sql(sql.RECOUNTED_TOTALS).to_arrow_table())
                keep = pc.invert(pc.is_in(touched["run_id"], value_set=marked["run_id"]))
                touched = pa.concat_tables([touched.filter(keep), recounted.select(touched.column_names)])
            conn.register("touched", touched)
            registered.append("touched")
            conn.execute(sql.LAKE_DELETE_TOUCHED_TOTALS)
            conn.execute(sql.LAKE_INSERT_TOUCHED_TOTALS)
            runs = typed_like(conn, "runs", conn.sql(sql.LAKE_RUNS_OF_TOUCHED).to_arrow_table())
            conn.register("touched_runs", runs)
            registered.append("touched_runs")
            conn.execute(sql.LAKE_DELETE_TOUCHED_RUNS)
            conn.execute(sql.LAKE_INSERT_TOUCHED_RUNS)
            runs_rows = runs.select(list(sql.METRIC_RUN_COLUMNS))
            calls_in = new["new_calls"]
            if calls_in is not None and len(calls_in):
                rolled = typed_like(conn, rollups.TABLE, conn.sql(rollups.LAKE_MERGED).to_arrow_table())
                conn.register("rollup_touched", rolled)
                registered.append("rollup_touched")
                conn.execute(rollups.LAKE_DELETE_TOUCHED)
                conn.execute(rollups.LAKE_INSERT_TOUCHED)
    finally:
        for name in registered:
            conn.unregister(name)
    calls = new["new_calls"]
    events = new["new_events"]
    return {
        "new_calls": calls.select(list(sql.INSERTED_CALL_COLUMNS)) if calls is not None else None,
        "new_records": new["new_records"],
        "new_events": events.select(["run_id", "name", "tool_cost_usd"]) if events is not None else None,
        "runs_rows": runs_rows,
        "resent": resent if len(resent) else None,
    }


#: Tables whose column types ``typed_like`` may read (fixed names, never request data).
_TYPED_TABLES = frozenset(
    {"run_totals", "runs", "model_calls", "run_records", "budget_events", "run_model_rollup"}
)
#: Their Arrow schemas, read once per process (cleared by ``close_all``).
_schemas: dict[str, pa.Schema] = {}


def typed_like(conn: duckdb.DuckDBPyConnection, table: str, rows: pa.Table) -> pa.Table:
    """``rows`` with each column cast to the type it has in the store table ``table``.

    A SELECT computed on the lake (a sum is HUGEINT, which Arrow carries as decimal128) would
    otherwise hand ``decimal.Decimal`` where the file store's RETURNING hands ``int``; cast, the
    Python values are those of the file store. Columns ``table`` lacks are dropped. Raises
    ValueError for a table outside the store's, pyarrow's ArrowInvalid for a value that does
    not fit (a sum past BIGINT).
    """
    if table not in _TYPED_TABLES:
        raise ValueError(f"typed_like: {table!r} is not a store table")
    schema = _schemas.get(table)
    if schema is None:  # every lake this code migrated has the same columns
        schema = conn.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema
        _schemas[table] = schema
    fields = [field for field in schema if field.name in rows.column_names]
    return pa.Table.from_arrays(
        [rows.column(field.name).cast(field.type) for field in fields], names=[field.name for field in fields]
    )
