"""``budgetlens runs``: one line per run, newest first."""

from __future__ import annotations

from collector.cli._analysis import WINDOW_HELP, add_window_arguments, analysis_session, write_frame


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="one line per run (newest first)",
        description=(
            "List runs, newest first: id, task type, service, model(s), start (UTC), turns, "
            "tool calls, input/output/total tokens, cost (USD; empty when unpriced), stop "
            "reason, usage status. " + WINDOW_HELP
        ),
        epilog="Example: budgetlens runs --db budgetlens.duckdb --task-type research --limit 20",
    )
    add_window_arguments(parser)
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--limit", type=int, default=50,
                        help="at most this many runs (default 50; 0 = every run)")
    parser.add_argument("--offset", type=int, default=0, help="skip this many runs first")
    parser.add_argument("--search", default="",
                        help="substring of the run id, task type, service, model or stop reason")
    parser.set_defaults(func=run)


def run(args) -> int:
    from dashboard import analysis

    if args.limit < 0 or args.offset < 0:
        raise ValueError("--limit and --offset must be >= 0")
    with analysis_session(args) as (conn, filters):
        limit = args.limit if args.limit > 0 else 2**62
        frame = analysis.runs_table(conn, filters, search=args.search, limit=limit,
                                    offset=args.offset)
    write_frame(frame, args.format, float_format="{:,.4f}")
    return 0
