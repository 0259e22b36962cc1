"""Shared parts of the analysis commands (``baselines``, ``presets``, ``runs``): the window
arguments, opening the store read-only with a clear error when it is missing or empty, and
writing a frame as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager

from collector.cli._common import add_db_argument

WINDOW_HELP = (
    "The window is the last --window-days days of the data, ending at the newest run in the "
    "store (so an old sample still shows); --window-days 0 takes every run."
)


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    add_db_argument(parser)
    parser.add_argument(
        "--window-days", type=float, default=14.0, metavar="DAYS",
        help="days of data ending at the newest run (default: 14; 0 = all runs)",
    )
    parser.add_argument("--task-type", action="append", default=[], metavar="NAME",
                        help="only this task type (repeatable)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME",
                        help="only runs that used this model (repeatable)")
    parser.add_argument("--service", action="append", default=[], metavar="NAME",
                        help="only this service (repeatable)")


@contextmanager
def analysis_session(args):
    """Yield (conn, filters) for the arguments; raises StoreMissing/StoreError when the store
    is missing or has no runs, ValueError for a negative window."""
    from collector.config import resolve_db_path
    from collector.store import StoreError, read_connection, schema_version
    from dashboard import analysis

    if args.window_days < 0:
        raise ValueError(f"--window-days must be >= 0, got {args.window_days:g}")
    db = resolve_db_path(args.db)
    with read_connection(db) as conn:
        n = 0
        if schema_version(conn) > 0:
            first, last, n = analysis.data_extent(conn)
        if n == 0:
            raise StoreError(
                f"{db}: the store has no runs yet; add some with `budgetlens sample`, "
                "`budgetlens import` or `budgetlens collector`"
            )
        scope = dict(task_types=tuple(args.task_type), models=tuple(args.model),
                     services=tuple(args.service))
        if args.window_days:
            filters = analysis.window_filters(args.window_days, now_utc=last, **scope)
        else:
            filters = analysis.Filters(**scope)
        yield conn, filters


def write_frame(frame, fmt: str, out=None, float_format: str = "{:,.2f}") -> None:
    """Print ``frame`` as an aligned table, JSON records (ISO times, null for missing) or CSV."""
    out = out or sys.stdout
    if fmt == "json":
        out.write(frame.to_json(orient="records", date_format="iso", indent=2) + "\n")
    elif fmt == "csv":
        frame.to_csv(out, index=False)
    elif frame.empty:
        out.write("(no rows)\n")
    else:
        shown = frame.copy()
        for column in shown.columns:
            if shown[column].dtype.kind == "f":
                shown[column] = shown[column].map(
                    lambda v: "" if v != v else float_format.format(v))
        out.write(shown.to_string(index=False, na_rep="") + "\n")
