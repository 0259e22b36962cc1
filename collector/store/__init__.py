"""The store: a DuckDB file or a DuckLake (``budgetlens.store.location``); schema and migrations,
the connection protocol, batch writes, lake maintenance and copy; ``connect`` is how readers
open a store (through the running collector, else the file)."""

from budgetlens.store.connection import (
    StoreError,
    StoreMissing,
    latest_snapshot,
    migrate,
    read_connection,
    schema_version,
    write_connection,
)
from budgetlens.store.readers import connect
from budgetlens.store.writer import WriteResult, rebuild_runs, write_batch

__all__ = [
    "StoreError",
    "StoreMissing",
    "WriteResult",
    "connect",
    "latest_snapshot",
    "migrate",
    "read_connection",
    "rebuild_runs",
    "schema_version",
    "write_batch",
    "write_connection",
]
