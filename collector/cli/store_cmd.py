"""``budgetlens store``: move a store between a DuckDB file and a DuckLake, compact a lake, run
read-only SQL (through the running collector, else on the file)."""

from __future__ import annotations

import argparse
import sys

from budgetlens.cli._common import add_db_argument, non_negative_float, positive_int
from budgetlens.cli._terminal import safe_cell, terminal_safe


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "store",
        help="copy a store between a DuckDB file and a DuckLake; compact a DuckLake; read-only SQL",
        description=(
            "Maintain the store. `copy` moves every row of one store into an empty other one (a "
            "DuckDB file into a DuckLake and back) and checks the counts on both sides; `compact` "
            "merges a DuckLake's small Parquet files, rewrites files with many deleted rows, "
            "expires old snapshots and deletes the files no snapshot needs; `sql` runs one read-only "
            "SELECT (through the running collector, else on the file) and prints CSV."
        ),
    )
    actions = parser.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    copy = actions.add_parser(
        "copy",
        help="copy every row of a store into an empty store (file <-> DuckLake)",
        description="Copy every row of --from into the empty store --to, in one transaction.",
    )
    copy.add_argument("--from", dest="source", required=True, help="the store to read (file or ducklake:...)")
    copy.add_argument(
        "--to", dest="destination", required=True, help="the empty store to write (file or ducklake:...)"
    )
    copy.add_argument(
        "--batch-rows", type=positive_int, default=100_000, help="rows per Arrow batch (default 100000)"
    )
    copy.set_defaults(func=run_copy)
    compact = actions.add_parser(
        "compact",
        help="compact a DuckLake store and expire its old snapshots",
        description=(
            "Compact the DuckLake store of --db: merge small Parquet files, rewrite files with >= 10 % "
            "deleted rows, expire snapshots older than --expire-older-than-s and delete the files they held."
        ),
    )
    add_db_argument(compact)
    compact.add_argument(
        "--expire-older-than-s",
        type=non_negative_float,
        default=3600.0,
        help="expire snapshots older than this many seconds (default 3600; time travel reaches this far back)",
    )
    compact.set_defaults(func=run_compact)
    query = actions.add_parser(
        "sql",
        help="run one read-only SELECT on the store (through the running collector, else the file)",
        description=(
            "Run one SELECT (or WITH ... SELECT) on the store of --db and print the result as CSV "
            "(control characters and bidi overrides in text shown escaped, e.g. \\x1b). A failing "
            "statement is a one-line error naming DuckDB's reason (-v: the traceback). "
            "While a collector holds the file, the query goes through its read endpoint "
            "(/v1/store/query, found from <db>.collector.json); otherwise the file is opened read-only."
        ),
    )
    add_db_argument(query)
    query.add_argument("statement", metavar="SQL", help="one SELECT statement")
    query.set_defaults(func=run_sql)


def run_copy(args: argparse.Namespace) -> int:
    from budgetlens.store.copy import copy_store
    from budgetlens.store.location import display

    result = copy_store(args.source, args.destination, batch_rows=args.batch_rows)
    for table, rows in result.source.items():
        print(f"{table:>14}: {rows:>12,} -> {result.destination[table]:>12,}")
    if not result.equal:
        print("budgetlens store: error: the counts differ after the copy", file=sys.stderr)
        return 1
    print(f"copied {result.source['runs']:,} runs from {display(args.source)} to {display(args.destination)}")
    return 0


def run_compact(args: argparse.Namespace) -> int:
    from budgetlens.config import is_lake_location, resolve_db_path
    from budgetlens.store import write_connection
    from budgetlens.store.lake_compact import compact

    db = resolve_db_path(args.db)
    if not is_lake_location(db):
        print(
            f"budgetlens store: error: {db} is a DuckDB file; compact works on a DuckLake store "
            "(ducklake:...): a file store needs no compaction",
            file=sys.stderr,
        )
        return 1
    with write_connection(db) as conn:
        counts = compact(conn, expire_older_than_s=args.expire_older_than_s)
    print(", ".join(f"{name.replace('_', ' ')}: {count}" for name, count in counts.items()))
    return 0


def run_sql(args: argparse.Namespace) -> int:
    import csv

    from budgetlens.config import resolve_db_path
    from budgetlens.store.host import NotReadOnly, check_read_only
    from budgetlens.store.readers import connect

    try:
        check_read_only(args.statement)
    except NotReadOnly as error:
        print(f"budgetlens store sql: {error}", file=sys.stderr)
        return 2
    with connect(resolve_db_path(args.db)) as conn:
        table = conn.execute(args.statement).arrow()
        if hasattr(table, "read_all"):  # DuckDB >= 1.4 hands back a RecordBatchReader
            table = table.read_all()
    writer = csv.writer(sys.stdout)
    writer.writerow([terminal_safe(name) for name in table.column_names])
    for row in zip(*(column.to_pylist() for column in table.columns)):
        writer.writerow(["" if value is None else safe_cell(value) for value in row])
    return 0
