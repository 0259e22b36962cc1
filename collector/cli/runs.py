"""``budgetlens runs``: one line per run, newest first."""

from __future__ import annotations

from budgetlens.cli._analysis import add_analysis_parser, analysis_session, write_frame
from budgetlens.cli._common import non_negative_int


def register(subparsers) -> None:
    parser = add_analysis_parser(
        subparsers,
        "runs",
        help="one line per run (newest first)",
        description=(
            "List runs, newest first: id, task type, service, model(s), start (UTC), turns, "
            "tool calls, input/output/total tokens, cost (USD; empty when unpriced), stop "
            "reason, usage status (unknown: some call reported no usage, its reservation was "
            "charged; partial: a usage lacked its input or output part), quality (data-quality "
            "flags of repaired spans: future_time, end_before_start, missing_time, foreign_usage, "
            "aggregate_mismatch, partial_usage). JSON and CSV carry every column of the run: also "
            "trace id, source, end time, duration (s), model calls, cache read/write and reasoning "
            "tokens, unpriced and unknown-usage calls, retryable, the limits it ran under (limit_*), "
            "warnings, downgrades and summaries, parent_run_id (the run a child run's budget was "
            "carved from). --tree RUN_ID shows a run's tree of child runs."
        ),
        epilog="Example: budgetlens runs --db budgetlens.duckdb --task-type research --limit 20",
    )
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        default=50,
        help="at most this many runs (default 50; 0 = every run)",
    )
    parser.add_argument("--offset", type=non_negative_int, default=0, help="skip this many runs first")
    parser.add_argument(
        "--search",
        default="",
        help="case-insensitive substring of the run id, task type, service, "
        "model, stop reason, usage status (e.g. unknown) or quality flag (e.g. future_time)",
    )
    parser.add_argument(
        "--tree",
        metavar="RUN_ID",
        default=None,
        help="show the run tree below RUN_ID instead (the run, then its child runs made by "
        "RunBudget.child, theirs...: depth, run id, parent run id, task type, start, stop reason, "
        "turns, total tokens, cost, tool cost); the filters do not apply",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import views as analysis

    if args.limit < 0 or args.offset < 0:
        raise ValueError("--limit and --offset must be >= 0")
    if args.tree is not None:
        with analysis_session(args) as (conn, _filters):
            tree = analysis.run_tree(conn, args.tree)
        if tree.empty:
            raise ValueError(f"--tree: run {args.tree!r} is not in the store")
        if args.format == "table":
            tree["run_id"] = [
                "  " * int(d) + str(r) for d, r in zip(tree["depth"], tree["run_id"], strict=True)
            ]
        write_frame(tree, args.format)
        return 0
    with analysis_session(args) as (conn, filters):
        limit = args.limit if args.limit > 0 else 2**62
        rows = analysis.runs_table if args.format == "table" else analysis.runs_export
        frame = rows(conn, filters, search=args.search, limit=limit, offset=args.offset)
    if args.format != "table":
        from budgetlens.config import trace_url, trace_url_template

        template = trace_url_template()
        frame["trace_url"] = [trace_url(t, template) for t in frame["trace_id"]]
    write_frame(frame, args.format)
    return 0
