"""``budgetlens hit-rate``: the Hit rate page's figures per task type (and per day)."""

from __future__ import annotations

from budgetlens.cli._analysis import add_analysis_parser, analysis_session, note, write_frame
from budgetlens.cli._common import time_zone


def register(subparsers) -> None:
    parser = add_analysis_parser(
        subparsers,
        "hit-rate",
        help="budget hit rate per task type (and per day)",
        description=(
            "Print the budget hit rate per task type, the same figures as the dashboard's Hit "
            "rate page: runs stopped by a budget (stop reason budget_*) / finished runs that ran "
            "under a budget (budgeted_runs: a limit was set, or a budget stopped them; runs "
            "without any limit cannot be stopped and are left out). The intervention rate also "
            "counts downgraded and summarized runs. Above 20 % the budget is too tight or the "
            "agent has a bug. --daily gives one row per day (in --tz) and task type."
        ),
        epilog="Example: budgetlens hit-rate --db budgetlens.duckdb --daily --format csv",
    )
    parser.add_argument("--daily", action="store_true", help="one row per day and task type")
    parser.add_argument(
        "--tz", type=time_zone, default="UTC", help="IANA time zone of the days (default: UTC)"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    import dataclasses

    from budgetlens.analysis import views as analysis

    with analysis_session(args) as (conn, filters):
        if args.daily:
            frame = analysis.hit_rate_daily(conn, dataclasses.replace(filters, tz=args.tz))
        else:
            frame = analysis.hit_rate_by_task(conn, filters)
    write_frame(frame, args.format)
    if not args.daily and "budgeted_runs" in frame:
        for task_type in frame.loc[frame["budgeted_runs"] == 0, "task_type"]:
            # the blank rate cell is "no budget", not a missing figure
            note(
                f"{task_type}: no run had a limit, so the hit rate is undefined (left blank); "
                "set a preset to measure it"
            )
    return 0
