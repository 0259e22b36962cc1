"""Arguments shared by several subcommands."""

from __future__ import annotations

import argparse


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help="DuckDB store path (default: $BUDGETLENS_DB, else budgetlens.duckdb)",
    )
