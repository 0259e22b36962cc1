"""``budgetlens baselines``: P50/P95/max per task type (optionally per model) over a window."""

from __future__ import annotations

from budgetlens.analysis.defaults import BASELINE_HEADLINE_COLUMNS
from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS
from budgetlens.cli._analysis import (
    WINDOW_HELP,
    add_format_argument,
    add_window_arguments,
    analysis_session,
    write_frame,
)

#: Columns of the table format (json and csv carry every column).
TABLE_COLUMNS = BASELINE_HEADLINE_COLUMNS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "baselines",
        help="P50/P95 baselines per task type",
        description=(
            "Print the baseline of each task type: n, P50, P95 and max of total/input/output "
            "tokens, turns, tool calls, duration (s) and cost (USD; over the n_cost runs whose "
            "cost is fully known: priced, no unpriced call, usage reported). Percentiles are "
            f"quantile_cont (linear); below {LOW_SAMPLE_RUNS} runs the row is marked low_sample. "
            + WINDOW_HELP
        ),
        epilog="Example: budgetlens baselines --db budgetlens.duckdb --format table --by-model",
    )
    add_window_arguments(parser)
    add_format_argument(parser)
    parser.add_argument("--by-model", action="store_true", help="one row per task type and model combination")
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import views as analysis

    with analysis_session(args) as (conn, filters):
        frame = analysis.baselines(conn, filters, by_model=args.by_model)
    if args.format == "table":
        frame = frame[[c for c in TABLE_COLUMNS if c in frame.columns]]
    write_frame(frame, args.format)
    return 0
