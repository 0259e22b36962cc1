"""The store: a DuckDB file or a DuckLake (``budgetlens.store.location``); schema and migrations,
the connection protocol, batch writes, lake maintenance and copy."""

from budgetlens.store.connection import (
    StoreError,
    StoreMissing,
    latest_snapshot,
    migrate,
    read_connection,
    schema_version,
    write_connection,
)
from budgetlens.store.writer import WriteResult, rebuild_runs, write_batch

__all__ = [
    "StoreError",
    "StoreMissing",
    "WriteResult",
    "latest_snapshot",
    "migrate",
    "read_connection",
    "rebuild_runs",
    "schema_version",
    "write_batch",
    "write_connection",
]
