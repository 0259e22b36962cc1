"""Copy a whole store into another: a DuckDB file into a DuckLake and back (``budgetlens store copy``).

Every table of the data contract is copied as it is (the stored calls, records and events and
their rollup), in Arrow record batches, in one write transaction on the destination: a copy that
fails leaves the destination as it was. The destination must hold no rows yet, so the counts on
both sides are equal after a copy (checked by reading the destination back). A DuckLake source
whose collectors staged rows no fold has stored yet is folded first
(``budgetlens.store.lake_ingest``; that needs write access to its catalog).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from budgetlens.store import lake, sql
from budgetlens.store.connection import StoreError, read_connection, schema_version, write_connection
from budgetlens.store.location import LakeLocation, store_location
from budgetlens.store.migrations import SCHEMA_VERSION

#: The tables copied, in this order (the rollup last: it is derived from the others).
COPIED_TABLES: tuple[str, ...] = (
    "model_calls",
    "run_records",
    "budget_events",
    "run_totals",
    "runs",
    "run_model_rollup",
)
DEFAULT_BATCH_ROWS = 100_000


@dataclass(frozen=True)
class CopyResult:
    """Rows per table in the source and, read back after the commit, in the destination."""

    source: dict[str, int]
    destination: dict[str, int]

    @property
    def equal(self) -> bool:
        return self.source == self.destination


def _counts(conn) -> dict[str, int]:
    counts = {}
    for table in COPIED_TABLES:  # names from the constant above, never from input
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        counts[table] = int(row[0]) if row is not None else 0
    return counts


def copy_store(
    source: str | os.PathLike | LakeLocation,
    destination: str | os.PathLike | LakeLocation,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> CopyResult:
    """Copy every row of the store ``source`` into the empty store ``destination`` (a file or a
    DuckLake location each; the destination is created and migrated when new).

    Returns the row counts of both sides per table. Raises ValueError for the same location on
    both sides or ``batch_rows`` < 1, StoreMissing when the source does not exist, StoreError when
    the source's schema is not this version's or the destination already holds rows.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1 (got {batch_rows})")
    if store_location(source) == store_location(destination):
        raise ValueError(f"{source}: source and destination are the same store")
    if isinstance(store_location(source), LakeLocation):  # what collectors staged goes too
        from budgetlens.store import lake_ingest

        with read_connection(source) as conn:  # StoreMissing when there is no lake
            unfolded = lake_ingest.unfolded_rows(conn)
        if unfolded:
            with write_connection(source) as conn:
                lake_ingest.fold_all(conn)
    with read_connection(source) as src:
        version = schema_version(src)
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{source}: schema version {version}, this budgetlens copies version {SCHEMA_VERSION}: "
                "open it once for writing with this version (e.g. `budgetlens store compact` or an import) first"
            )
        counts = _counts(src)
        with write_connection(destination) as dst:
            stored = _counts(dst)
            if any(stored.values()):
                raise StoreError(
                    f"{destination}: already holds rows ({stored['runs']} runs); copy into an empty store"
                )
            on_lake = lake.is_lake_connection(dst)
            dst.execute("BEGIN TRANSACTION")
            try:
                if on_lake:
                    dst.execute(sql.LAKE_TAKE_FOLD_TOKEN)
                for table in COPIED_TABLES:
                    result = src.execute(f"SELECT * FROM {table}")
                    # to_arrow_reader since DuckDB 1.4, fetch_record_batch before (deprecated)
                    reader = (
                        result.to_arrow_reader(batch_rows)
                        if hasattr(result, "to_arrow_reader")
                        else result.fetch_record_batch(batch_rows)
                    )
                    for batch in reader:
                        dst.register("copy_chunk", batch)
                        try:
                            dst.execute(f"INSERT INTO {table} BY NAME SELECT * FROM copy_chunk")
                        finally:
                            dst.unregister("copy_chunk")
                dst.execute("COMMIT")
            except BaseException:
                lake.rollback(dst)
                raise
    with read_connection(destination) as check:
        copied = _counts(check)
    return CopyResult(source=counts, destination=copied)
