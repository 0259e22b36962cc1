"""``budgetlens spend``: who spent it, spend and runs by team, user or service."""

from __future__ import annotations

from budgetlens.cli._analysis import add_analysis_parser, analysis_session, write_frame


def register(subparsers) -> None:
    parser = add_analysis_parser(
        subparsers,
        "spend",
        help="who spent it: spend and runs by team, user or service",
        description=(
            "Print the known spend (USD, the priced calls) and the runs of each team, user or "
            "service (--by), most expensive first, as the Cost page's 'Who spent it' table: runs, "
            "cost_usd, cost_share (of the spend shown), total_tokens, partial_cost_runs (runs with "
            "unpriced calls or unknown usage: their cost is a lower bound) and budget_stops. Runs "
            "without a value are grouped as (none)."
        ),
        epilog="Example: budgetlens spend --db budgetlens.duckdb --by user --team search-infra",
    )
    parser.add_argument(
        "--by",
        choices=("team", "user", "service"),
        default="team",
        help="group by team (= tenant, the default), user or service",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis.spenders import spend_by

    with analysis_session(args) as (conn, filters):
        frame = spend_by(conn, filters, by=args.by)
    write_frame(frame, args.format, float_format="{:.1%}")
    return 0
