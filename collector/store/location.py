"""Where the store is: a DuckDB file, or a DuckLake (catalog database + Parquet data path).

A store location is the string given to ``--db`` / ``BUDGETLENS_DB``:

- a file path (``budgetlens.duckdb``): one DuckDB file, one writing process at a time;
- ``ducklake:<catalog>[?data_path=<path>]``: a DuckLake. ``<catalog>`` is what DuckDB's
  ``ATTACH 'ducklake:...'`` takes: ``postgres:dbname=budgetlens host=10.0.0.5 port=5432
  user=budgetlens`` (a PostgreSQL catalog: many writers, the deployment case) or a local
  ``catalog.ducklake`` file (a DuckDB catalog: one machine, tests and trials). The data path
  (a directory, or ``s3://bucket/prefix/`` through DuckDB's httpfs) is where the Parquet files
  go; it comes from the ``?data_path=`` suffix, else ``BUDGETLENS_LAKE_DATA_PATH``, else the
  path the catalog recorded when the lake was created (so readers need only the catalog).

Only ``budgetlens.store`` looks inside a location; every other module passes it on as given.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from budgetlens.config import ENV_LAKE_DATA_PATH, LAKE_PREFIX, resolve

_DATA_PATH_PARAM = "?data_path="

__all__ = ["ENV_LAKE_DATA_PATH", "LakeLocation", "display", "is_lake", "parse_lake", "store_location"]


@dataclass(frozen=True)
class LakeLocation:
    """A DuckLake store: ``catalog`` as DuckDB's ATTACH takes it after ``ducklake:``, and the data
    path (None: the one recorded in the catalog)."""

    catalog: str
    data_path: str | None = None

    @property
    def is_postgres(self) -> bool:
        return self.catalog.startswith("postgres:")

    def __str__(self) -> str:
        """The location without credentials (``password=`` is masked), for messages and logs."""
        shown = " ".join(
            "password=***" if part.lower().startswith("password=") else part
            for part in self.catalog.split(" ")
        )
        return LAKE_PREFIX + shown

    def key(self) -> str:
        """A short stable name of this lake (hex), e.g. for a default journal directory."""
        return hashlib.sha256(self.catalog.encode()).hexdigest()[:12]


def is_lake(location: str | os.PathLike | LakeLocation) -> bool:
    """True when ``location`` names a DuckLake store (starts with ``ducklake:``)."""
    return isinstance(location, LakeLocation) or str(location).startswith(LAKE_PREFIX)


def parse_lake(location: str | os.PathLike | LakeLocation) -> LakeLocation:
    """Parse ``ducklake:<catalog>[?data_path=<path>]``.

    Raises ValueError naming the rule when the catalog part is empty or the data path is empty.
    """
    if isinstance(location, LakeLocation):
        return location
    text = str(location)
    if not text.startswith(LAKE_PREFIX):
        raise ValueError(f"{text!r}: a DuckLake store location starts with {LAKE_PREFIX!r}")
    catalog, _, data_path = text[len(LAKE_PREFIX) :].partition(_DATA_PATH_PARAM)
    catalog = catalog.strip()
    if not catalog:
        raise ValueError(
            f"{text!r}: the DuckLake catalog is missing: write ducklake:postgres:dbname=NAME host=HOST "
            "or ducklake:PATH.ducklake"
        )
    if _DATA_PATH_PARAM in text and not data_path.strip():
        raise ValueError(f"{text!r}: data_path= is empty (a directory or s3://bucket/prefix/)")
    resolved = data_path.strip() or resolve(None, ENV_LAKE_DATA_PATH, None)
    return LakeLocation(catalog=catalog, data_path=resolved)


def store_location(location: str | os.PathLike | LakeLocation) -> Path | LakeLocation:
    """A ``LakeLocation`` for ``ducklake:...``, else the file path as a ``Path``."""
    if isinstance(location, LakeLocation) or is_lake(location):
        return parse_lake(location)
    return Path(location)


def display(location: str | os.PathLike | LakeLocation) -> str:
    """The store location for messages and logs: a file path as given, a lake with its password
    masked."""
    return str(parse_lake(location)) if is_lake(location) else str(location)
