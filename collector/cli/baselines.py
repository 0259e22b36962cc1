"""``budgetlens baselines``: P50/P95/max per task type (optionally per model) over a window."""

from __future__ import annotations

from budgetlens.analysis.defaults import BASELINE_HEADLINE_COLUMNS
from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS
from budgetlens.cli._analysis import add_analysis_parser, analysis_session, note, write_frame

#: Columns of the table format (json and csv carry every column); the censoring-aware
#: (Kaplan–Meier) P50/P95 of total tokens and the censored share follow the plain ones.
TABLE_COLUMNS = (
    *BASELINE_HEADLINE_COLUMNS,
    "censored_share",
    "km_p50_total_tokens",
    "km_p95_total_tokens",
)
#: The censoring columns joined to the plain baselines (per task type; not with --by-model).
_CENSORING_COLUMNS = ("censored_runs", "censored_share", "material")


def register(subparsers) -> None:
    parser = add_analysis_parser(
        subparsers,
        "baselines",
        help="P50/P95 baselines per task type",
        description=(
            "Print the baseline of each task type: n, P50, P95 and max of total/input/output "
            "tokens, turns, tool calls, duration (s) and cost (USD; over the n_cost runs whose "
            "cost is fully known: priced, no unpriced call, usage reported). Percentiles are "
            f"quantile_cont (linear); below {LOW_SAMPLE_RUNS} runs the row is marked low_sample."
        ),
        epilog="Example: budgetlens baselines --db budgetlens.duckdb --format table --by-model",
    )
    parser.add_argument("--by-model", action="store_true", help="one row per task type and model combination")
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import views as analysis
    from budgetlens.analysis.censoring import censored_baselines

    with analysis_session(args) as (conn, filters):
        frame = analysis.baselines(conn, filters, by_model=args.by_model)
        if not args.by_model and not frame.empty:
            frame = with_censoring(frame, censored_baselines(conn, filters))
    bounded = _has_lower_bound(frame)
    if args.format == "table":
        frame = _bounds_as_text(frame)
        frame = frame[[c for c in TABLE_COLUMNS if c in frame.columns]]
    write_frame(frame, args.format)
    if bounded:
        note(
            "km_p50/km_p95 are Kaplan-Meier percentiles that count runs a budget stopped as "
            "censored (they would have gone on); '≥ N' (json/csv: *_lower_bound true) is a lower "
            "bound: too many runs were stopped below that percentile to know it, so the true "
            "value is at least N"
        )
    return 0


def _has_lower_bound(frame) -> bool:
    """True when any Kaplan–Meier P50/P95 of total tokens in ``frame`` is a lower bound."""
    columns = [f"{c}_lower_bound" for c in ("km_p50_total_tokens", "km_p95_total_tokens")]
    return any(bool(frame[c].fillna(False).astype(bool).any()) for c in columns if c in frame.columns)


def with_censoring(frame, censoring):
    """The plain baselines ``frame`` with, per task type, the censored runs and share (0..1) and
    the Kaplan–Meier P50/P95 of every metric (``km_p50_*``, ``km_p95_*`` and their
    ``*_lower_bound``); in the table a lower bound reads ``≥ 48,000``."""
    km = [c for c in censoring.columns if c.startswith("km_")]
    joined = frame.merge(censoring[["task_type", *_CENSORING_COLUMNS, *km]], on="task_type", how="left")
    return joined


def _bounds_as_text(frame):
    """The table's Kaplan–Meier token columns as text: ``48,000``, or ``≥ 48,000`` for a lower
    bound (the estimate never reached the percentile), empty when unknown."""
    from budgetlens.analysis.censoring import Percentile
    from budgetlens.analysis.values import scalar

    out = frame.copy()
    for column in ("km_p50_total_tokens", "km_p95_total_tokens"):
        if column not in out.columns:
            continue
        out[column] = [
            "" if scalar(v) is None else Percentile(float(v), bool(scalar(b))).text()
            for v, b in zip(out[column], out[f"{column}_lower_bound"], strict=True)
        ]
    return out
