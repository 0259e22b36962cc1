"""The DuckDB store: schema and migrations, the connection protocol, batch writes."""

from budgetlens.store.connection import (
    StoreError,
    StoreMissing,
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
    "migrate",
    "read_connection",
    "rebuild_runs",
    "schema_version",
    "write_batch",
    "write_connection",
]
