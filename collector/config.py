"""Configuration resolved in one place: argument, then environment variable, then default.

Every environment variable budgetlens reads is a named constant here and is listed in the README.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Path of the DuckDB store used by every command (``--db`` wins over it).
ENV_DB = "BUDGETLENS_DB"

DEFAULT_DB = "budgetlens.duckdb"


def resolve(argument, env_name: str, default):
    """Return ``argument`` if given (not None), else the environment variable, else ``default``."""
    if argument is not None:
        return argument
    value = os.environ.get(env_name)
    if value not in (None, ""):
        return value
    return default


def resolve_db_path(argument: str | os.PathLike | None = None) -> Path:
    """Return the store path: ``--db`` argument, else ``BUDGETLENS_DB``, else ``budgetlens.duckdb``."""
    return Path(resolve(argument, ENV_DB, DEFAULT_DB))
