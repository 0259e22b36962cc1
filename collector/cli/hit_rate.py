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
        _alarm_notes(frame)
        for task_type in frame.loc[frame["budgeted_runs"] == 0, "task_type"]:
            # the blank rate cell is "no budget", not a missing figure
            note(
                f"{task_type}: no run had a limit, so the hit rate is undefined (left blank); "
                "set a preset to measure it"
            )
    return 0


def _alarm_notes(per_task) -> None:
    """A note per task type whose hit rate is above the alarm line (``analysis.split_alarms``,
    the rule the dashboard's banner uses), and one for those above it on a low sample."""
    from budgetlens.analysis.thresholds import HIT_RATE_ALARM, LOW_SAMPLE_RUNS
    from budgetlens.analysis.values import format_rate
    from budgetlens.analysis.views import split_alarms

    hot, low = split_alarms(per_task)
    line = f"{HIT_RATE_ALARM * 100:g} %"
    for _, row in hot.iterrows():
        note(
            f"{row['task_type']}: hit rate {format_rate(row['hit_rate'])} is above the {line} alarm "
            "line: the budget is too tight or the agent has a bug (compare `budgetlens baselines` "
            "and `budgetlens presets`)"
        )
    for _, row in low.iterrows():
        note(
            f"{row['task_type']}: hit rate {format_rate(row['hit_rate'])} is above {line} on "
            f"{int(row['budgeted_runs'])} budgeted runs (< {LOW_SAMPLE_RUNS}): too few to call an alarm"
        )
