"""Configuration resolved in one place: argument, then environment variable, then default.

Every environment variable budgetlens reads is a named constant here and is listed in the README;
nothing else in the package reads (or sets) the environment. Also reads the small configuration
documents (``load_document``: the price file, the preset file).
"""

from __future__ import annotations

import json
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


#: Set for the collector process at start (``apply_collector_settings``), unless already set: the
#: Prometheus rollup groups journaled Arrow batches with pyarrow (Acero); batches read back from
#: the journal's IPC bytes are not 64-byte aligned, and Acero warns on stderr for every one (a
#: flood that filled the collector's stderr pipe and stalled the loader). Realigning is cheap.
ACERO_ALIGNMENT_VARIABLE = "ACERO_ALIGNMENT_HANDLING"
ACERO_ALIGNMENT = "reallocate"


def resolve(argument, env_name: str, default):
    """Return ``argument`` if given (not None), else the environment variable, else ``default``.

    An environment variable set to the empty string counts as unset."""
    if argument is not None:
        return argument
    value = os.environ.get(env_name)
    if value not in (None, ""):
        return value
    return default


def env_value(env_name: str) -> str | None:
    """The environment variable ``env_name`` as set (the empty string kept), None when unset:
    for settings where "set but empty" is a mistake to report, not a default to take."""
    return os.environ.get(env_name)


def child_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` on top: the environment of a child process
    (``budgetlens dashboard`` passes ``BUDGETLENS_DB`` to Streamlit this way)."""
    return {**os.environ, **overrides}


def apply_collector_settings() -> None:
    """Set the process-wide settings the collector needs (``ACERO_ALIGNMENT_VARIABLE``), keeping any
    value the operator set. Called when a collector's ingest queue starts."""
    os.environ.setdefault(ACERO_ALIGNMENT_VARIABLE, ACERO_ALIGNMENT)


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


def load_document(path: str | os.PathLike, what: str) -> object:
    """Read a small configuration document (YAML, TOML or JSON, chosen by the file extension):
    the parsed document at ``path`` (a mapping, usually).

    ``what`` names the file in errors ("preset file", "price file"). The file is UTF-8 text; a
    leading byte-order mark is ignored. Raises ValueError naming the file for an extension other
    than .yaml, .yml, .toml or .json, text that is not UTF-8, or a document that does not parse;
    FileNotFoundError when the file is missing.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"{p}: {what} extension must be .yaml, .yml, .toml or .json, got {suffix!r}")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{p}: a {what} must be UTF-8 text: {error}") from error
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except Exception as error:  # JSONDecodeError, TOMLDecodeError, yaml.YAMLError, ...
        raise ValueError(f"{p}: not a valid {what}: {error}") from error


#: The shared ledger of spend windows and token pools (``ledger=`` wins): empty or ``memory``
#: (in-process, the default), ``postgresql://...`` (fleet), ``http://host:4318`` (the
#: collector's) or ``sqlite:///path`` (budgetlens.guard.ledgers).
ENV_LEDGER = "BUDGETLENS_LEDGER"

#: Seconds a ledger hold lasts without renewal (default 30): a killed worker's holds end within it.
ENV_LEDGER_LEASE_S = "BUDGETLENS_LEDGER_LEASE_S"

#: What the guard does when the ledger cannot be reached: ``block`` (default) or ``residual:F``.
ENV_LEDGER_OFFLINE = "BUDGETLENS_LEDGER_OFFLINE"
