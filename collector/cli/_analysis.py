"""Shared parts of the analysis commands (``baselines``, ``presets``, ``runs``): the window and
format arguments, opening the store read-only with a clear error when it is missing or empty,
notes on stderr when the window or a filter leaves runs out, and writing a frame as a table,
JSON or CSV.

Output conventions (every format):

- times are ISO-8601 UTC with a ``Z`` (``2026-11-27T23:55:17.851192Z``);
- JSON and CSV floats are rounded to 6 significant digits and token percentiles to 1 decimal;
  counts stay integers (null when unknown);
- rates and shares (``*_rate``, ``*_share``, ``*_rate_upper``) are 0..1 in JSON and CSV and
  percent with one decimal in the table (``24.9 %``), in every command;
- text from the store (run ids, task types, teams, ...) is shown with control characters and
  bidi overrides escaped (``\\x1b``, ``\\u202e``) in the table, the CSV and the notes, through
  :mod:`budgetlens.cli._terminal`; JSON escapes them itself;
- the table shows tokens with thousands separators (no decimals when a column has none), costs
  (USD) with 4 significant figures (``0.009165``, never ``0.00``), counts (turns, tool calls,
  runs) as integers with a blank for a missing one, other numbers with 2 decimals.
"""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager

from budgetlens.cli._common import add_db_argument, non_negative_float
from budgetlens.cli._terminal import safe_frame, terminal_safe

WINDOW_HELP = (
    "The window is the last --window-days days up to now (as the dashboard's default), not up to "
    "the newest run: a store that stopped receiving runs shows as such. --window-days 0 takes "
    "every run. When the window leaves runs out, a note on stderr says how many it keeps and "
    "when the newest run started."
)
#: Significant digits of floats in JSON and CSV, and of costs in the table.
CSV_DIGITS = 6
TABLE_COST_DIGITS = 4
#: The filter options and their names in the notes.
_SCOPES = (
    ("task_type", "task_types", "task type"),
    ("model", "models", "model"),
    ("service", "services", "service"),
    ("team", "teams", "team"),
    ("user", "users", "user"),
)


def add_analysis_parser(
    subparsers, name: str, *, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """The parser of a subcommand that prints an analysis over a window: ``description`` followed
    by ``WINDOW_HELP``, the store, window and filter options and ``--format``."""
    parser = subparsers.add_parser(name, help=help, description=f"{description} {WINDOW_HELP}", epilog=epilog)
    add_window_arguments(parser)
    add_format_argument(parser)
    return parser


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    add_db_argument(parser)
    parser.add_argument(
        "--window-days",
        type=non_negative_float,
        default=14.0,
        metavar="DAYS",
        help="days up to now (default: 14; 0 = all runs); a note says how many runs the window "
        "leaves out and when the newest run started",
    )
    add_filter_arguments(parser)


def _tag(text: str) -> tuple[str, str]:
    from budgetlens.attribution import parse_tag_filter

    try:
        return parse_tag_filter(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The run filters every analysis command shares (one argument group, ``filters``): task
    type, model, service, team (= tenant), user, tag; each repeatable. Values of one option are
    alternatives; different options (and every ``--tag``) must all hold."""
    group = parser.add_argument_group("filters", "only the runs that match (each option repeatable)")
    group.add_argument(
        "--task-type", action="append", default=[], metavar="NAME", help="only this task type (repeatable)"
    )
    group.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="only runs that used this model (repeatable)",
    )
    group.add_argument(
        "--service", action="append", default=[], metavar="NAME", help="only this service (repeatable)"
    )
    group.add_argument(
        "--team",
        "--tenant",
        dest="team",
        action="append",
        default=[],
        metavar="NAME",
        help="only runs of this team (= tenant; repeatable)",
    )
    group.add_argument(
        "--user", action="append", default=[], metavar="ID", help="only runs of this user (repeatable)"
    )
    group.add_argument(
        "--tag",
        action="append",
        default=[],
        type=_tag,
        metavar="KEY=VALUE",
        help="only runs carrying this tag (repeatable: every tag must match)",
    )


def filters_of(args, **kw):
    """The ``Filters`` of the filter arguments (``kw``: the other fields, e.g. the window)."""
    from budgetlens.analysis import views as analysis

    return analysis.Filters(
        task_types=tuple(args.task_type),
        models=tuple(args.model),
        services=tuple(args.service),
        teams=tuple(args.team),
        users=tuple(args.user),
        tags=tuple(args.tag),
        **kw,
    )


def add_format_argument(
    parser: argparse.ArgumentParser, choices=("table", "json", "csv"), default: str = "table"
) -> None:
    """``--format``: the table is for reading; JSON (records) and CSV carry every column."""
    helps = {
        "table": "aligned columns for reading (a selection of columns)",
        "json": "JSON records, every column",
        "csv": "CSV with a header, every column",
        "yaml": "YAML",
        "toml": "TOML (no nulls: unknown limits are left out)",
    }
    parser.add_argument(
        "--format",
        choices=choices,
        default=default,
        help=f"output format (default: {default}): "
        + "; ".join(f"{name}: {helps[name]}" for name in choices),
    )


def note(text: str) -> None:
    """Print ``note: TEXT`` on stderr, stored strings in it escaped (:func:`terminal_safe`)."""
    print(f"note: {terminal_safe(text)}", file=sys.stderr)


@contextmanager
def analysis_session(args):
    """Yield (conn, filters) for the arguments; raises StoreMissing/StoreError when the store
    is missing, is not a DuckDB file or has no runs, ValueError for a negative or NaN window.

    Prints to stderr (never to stdout) a note naming the values that exist when a
    --task-type/--model/--service/--team/--user value matches no run, and one when the window leaves runs out:
    ``window: last 14 days up to now keeps 2 of 41 runs (newest run 2026-05-11 08:00 UTC); use
    --window-days 0 for all``.
    """
    from budgetlens.analysis import views as analysis
    from budgetlens.config import resolve_db_path
    from budgetlens.store import StoreError, connect, schema_version

    if not args.window_days >= 0:  # also NaN (argparse already refuses both)
        raise ValueError(f"--window-days must be a finite number >= 0, got {args.window_days:g}")
    db = resolve_db_path(args.db)
    with connect(db) as conn:
        n = 0
        if schema_version(conn) > 0:
            _, _, n = analysis.data_extent(conn)
        if n == 0:
            raise StoreError(
                f"{db}: the store has no runs yet; add some with `budgetlens sample`, "
                "`budgetlens import` or `budgetlens collector`"
            )
        _note_unknown_scope(conn, args)
        filters = filters_of(args)
        if args.window_days:
            windowed = analysis.window_filters(
                args.window_days,
                task_types=filters.task_types,
                models=filters.models,
                services=filters.services,
                teams=filters.teams,
                users=filters.users,
                tags=filters.tags,
            )
            coverage = analysis.window_coverage(conn, windowed)
            if coverage.left_out:
                note(window_note(args.window_days, coverage))
            filters = windowed
        yield conn, filters


def window_note(days: float, coverage) -> str:
    """The stderr note of a window that leaves runs out (``coverage``: ``WindowCoverage``)."""
    newest = f"{coverage.newest_utc:%Y-%m-%d %H:%M} UTC" if coverage.newest_utc else "none"
    return (
        f"window: last {days:g} days up to now keeps {coverage.kept:,} of {coverage.total:,} runs "
        f"(newest run {newest}); use --window-days 0 for all"
    )


def _note_unknown_scope(conn, args) -> None:
    """A note per filter option whose values match no run, naming the values that exist."""
    from budgetlens.analysis import views as analysis

    asked = {option: getattr(args, option) for option, _, _ in _SCOPES}
    if not any(asked.values()):
        return
    options = analysis.filter_options(conn)
    for option, key, noun in _SCOPES:
        unknown = [value for value in asked[option] if value not in options[key]]
        if unknown:
            note(
                f"no runs of {noun} {', '.join(unknown)}; the store has "
                f"{len(options[key])} {noun}s: {', '.join(options[key]) or '(none)'}"
            )


# --- formatting ---------------------------------------------------------------------------------
def _is_cost(column: str) -> bool:
    return column.endswith("cost_usd")


def _is_tokens(column: str) -> bool:
    return column.endswith("_tokens")


def _is_count(column: str) -> bool:
    """A count column (turns, tool calls, runs): whole numbers even when a missing value made
    pandas store it as float (``tool_calls`` of a run without a count)."""
    from budgetlens.limits import LIMITS

    counts = {spec.metric for spec in LIMITS if spec.unit == "count"} | {"runs"}
    return column == "n" or any(column == c or column.endswith("_" + c) for c in counts)


def _missing(value) -> bool:
    from budgetlens.analysis.views import is_missing

    return is_missing(value)


def _whole(series) -> bool:
    values = series.dropna()
    return bool(len(values)) and bool((values == values.round()).all())


def _for_machines(frame):
    """A copy of ``frame`` for JSON/CSV: ISO-8601 "Z" times, local days as "YYYY-MM-DD", token percentiles to 1 decimal,
    other floats to ``CSV_DIGITS`` significant digits (NaN stays missing)."""
    from budgetlens.analysis.presets import round_significant

    out = frame.copy()
    for column in out.columns:
        kind = out[column].dtype.kind
        if kind == "M":
            out[column] = out[column].map(_iso_z).astype(object)
        elif kind == "f" and _is_count(column) and _whole(out[column]):
            out[column] = out[column].astype("Int64")
        elif kind == "f" and _is_tokens(column):
            out[column] = out[column].round(1)
        elif kind == "f":
            out[column] = out[column].map(lambda v: round_significant(v, CSV_DIGITS))
        elif kind == "O" and _holds_dates(out[column]):  # a local day: "2026-11-19", as in CSV
            out[column] = out[column].map(lambda v: None if _missing(v) else v.isoformat())
    return out


def _holds_dates(column) -> bool:
    """True when every value of an object ``column`` is a ``datetime.date`` (not a datetime) or
    missing, and one is not: pandas' JSON writer would give such days as epoch milliseconds."""
    import datetime as dt

    values = [v for v in column if not _missing(v)]
    return bool(values) and all(type(v) is dt.date for v in values)


def _iso_z(value):
    """A naive UTC timestamp as ISO-8601 with ``Z``; None for NaT."""
    if _missing(value):
        return None
    return value.isoformat() + "Z"


def _cost_text(value: float) -> str:
    """A cost with ``TABLE_COST_DIGITS`` significant figures, without an exponent."""
    if value == 0:
        return "0"
    decimals = max(0, TABLE_COST_DIGITS - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def _for_reading(frame, float_format: str):
    """A copy of ``frame`` as text cells for the table (conventions in the module docstring)."""
    from budgetlens.analysis.values import format_rate, is_rate_column

    shown = frame.copy()
    for column in shown.columns:
        series, kind = shown[column], shown[column].dtype.kind
        if kind == "M":
            shown[column] = series.map(lambda v: _iso_z(v) or "").astype(object)
        elif kind in "iuf" and _is_tokens(column):
            pattern = "{:,.0f}" if kind in "iu" or _whole(series) else "{:,.1f}"
            shown[column] = series.map(lambda v, p=pattern: "" if _missing(v) else p.format(v))
        elif kind == "f" and _is_count(column) and _whole(series):
            shown[column] = series.map(lambda v: "" if _missing(v) else f"{v:,.0f}")
        elif kind in "iuf" and is_rate_column(column):
            shown[column] = series.map(format_rate)
        elif kind == "f" and _is_cost(column):
            shown[column] = series.map(lambda v: "" if _missing(v) else _cost_text(v))
        elif kind == "f":
            shown[column] = series.map(lambda v: "" if _missing(v) else float_format.format(v))
        elif kind in "iu" and series.hasnans:  # a nullable count: missing is empty, not "<NA>"
            pattern = "{:,}" if _is_count(column) or _is_tokens(column) else "{}"
            shown[column] = series.map(lambda v, p=pattern: "" if _missing(v) else p.format(v)).astype(object)
        elif kind == "O":  # text: a missing value (no team, no quality flag) is empty, never "None"
            shown[column] = series.map(lambda v: "" if _missing(v) else v)
    return shown


def write_frame(frame, fmt: str, out=None, float_format: str = "{:,.2f}") -> None:
    """Print ``frame`` as an aligned table, JSON records (null for missing) or CSV, following
    the conventions of the module docstring (text cells of the table and the CSV escaped by
    :func:`budgetlens.cli._terminal.safe_frame`); ``float_format`` is for the table's floats that
    are neither tokens nor costs."""
    out = out or sys.stdout
    if fmt == "json":
        out.write(_for_machines(frame).to_json(orient="records", indent=2) + "\n")
    elif fmt == "csv":
        safe_frame(_for_machines(frame)).to_csv(out, index=False)
    elif frame.empty:
        out.write("(no rows)\n")
    else:
        out.write(safe_frame(_for_reading(frame, float_format)).to_string(index=False, na_rep="") + "\n")
