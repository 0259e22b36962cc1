"""``budgetlens runaways``: runs far above their task type's P95, or stuck calling one tool."""

from __future__ import annotations

import sys

from budgetlens.cli._analysis import add_analysis_parser, analysis_session, write_frame
from budgetlens.cli._common import positive_float, positive_int


def register(subparsers) -> None:
    parser = add_analysis_parser(
        subparsers,
        "runaways",
        help="runaway runs: above k x P95, or one tool called in a loop",
        description=(
            "List the runaway runs, largest first: total tokens above --k times their task "
            "type's P95 in the window (default 3), or the same tool called --repeats or more "
            "times in a row (default 10; tool arguments are never stored, so the same tool "
            "name). A note on stderr gives their count and share of the priced spend."
        ),
        epilog="Example: budgetlens runaways --db budgetlens.duckdb --k 4 --format csv",
    )
    parser.add_argument("--k", type=positive_float, default=3.0, help="runaway above k x P95 (default: 3)")
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=10,
        help="a tool called this many times in a row is a loop (default: 10)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis.runaways import runaways

    if args.repeats < 2:
        raise ValueError(f"--repeats must be >= 2, got {args.repeats}")
    with analysis_session(args) as (conn, filters):
        found = runaways(conn, filters, k=args.k, repeats=args.repeats)
    share = "" if found.cost_share is None else f", {found.cost_share:.1%} of the priced spend"
    print(f"note: {found.count} runaway runs of {found.total_runs}{share}", file=sys.stderr)
    write_frame(found.runs, args.format)
    return 0
