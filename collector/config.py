"""Configuration resolved in one place: argument, then environment variable, then default.

Every environment variable budgetlens reads is a named constant here and is listed in the README.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Path of the DuckDB store used by every command (``--db`` wins over it).
ENV_DB = "BUDGETLENS_DB"

DEFAULT_DB = "budgetlens.duckdb"

#: Where ``python -m benchmarks.queries`` caches its generated stores (default /tmp/budgetlens_bench).
ENV_BENCH_DIR = "BUDGETLENS_BENCH_DIR"

#: Bearer token the collector requires on /v1/traces (``--token`` wins over it; unset = no auth).
ENV_COLLECTOR_TOKEN = "BUDGETLENS_COLLECTOR_TOKEN"

#: Port and bind address of the dashboard (``budgetlens dashboard`` / ``demo``; flags win).
ENV_DASHBOARD_PORT = "BUDGETLENS_DASHBOARD_PORT"
ENV_DASHBOARD_HOST = "BUDGETLENS_DASHBOARD_HOST"
DEFAULT_DASHBOARD_PORT = 8501
DEFAULT_DASHBOARD_HOST = "127.0.0.1"

#: Optional user price file (YAML/JSON/TOML) that overrides or adds model prices (budgetlens.pricing).
ENV_PRICES_FILE = "BUDGETLENS_PRICES_FILE"


def resolve(argument, env_name: str, default):
    """Return ``argument`` if given (not None), else the environment variable, else ``default``."""
    if argument is not None:
        return argument
    value = os.environ.get(env_name)
    if value not in (None, ""):
        return value
    return default


#: Where a collector on a DuckLake store keeps its write-ahead journal (``--journal`` wins; a file
#: store keeps it next to the file, ``<db>.journal``).
ENV_JOURNAL_DIR = "BUDGETLENS_JOURNAL_DIR"

#: Data path (directory or ``s3://...``) of a new DuckLake store; a ``?data_path=`` suffix wins.
ENV_LAKE_DATA_PATH = "BUDGETLENS_LAKE_DATA_PATH"

#: A store location that starts with this is a DuckLake (``budgetlens.store.location``).
LAKE_PREFIX = "ducklake:"


def resolve_db_path(argument: str | os.PathLike | None = None) -> Path | str:
    """Return the store: ``--db`` argument, else ``BUDGETLENS_DB``, else ``budgetlens.duckdb``.

    A file store is a ``Path``; a DuckLake location (``ducklake:...``) is returned as the string
    given (it is no path: ``s3://`` and libpq settings must stay as written).
    """
    value = resolve(argument, ENV_DB, DEFAULT_DB)
    return str(value) if is_lake_location(value) else Path(value)


def is_lake_location(location: str | os.PathLike) -> bool:
    """True when the store ``location`` names a DuckLake (``ducklake:...``), not a DuckDB file."""
    return str(location).startswith(LAKE_PREFIX)


#: The shared ledger of spend windows and token pools (``ledger=`` wins): empty or ``memory``
#: (in-process, the default), ``postgresql://...`` (fleet), ``http://host:4318`` (the
#: collector's) or ``sqlite:///path`` (budgetlens.guard.ledgers).
ENV_LEDGER = "BUDGETLENS_LEDGER"

#: Seconds a ledger hold lasts without renewal (default 30): a killed worker's holds end within it.
ENV_LEDGER_LEASE_S = "BUDGETLENS_LEDGER_LEASE_S"

#: What the guard does when the ledger cannot be reached: ``block`` (default) or ``residual:F``.
ENV_LEDGER_OFFLINE = "BUDGETLENS_LEDGER_OFFLINE"
