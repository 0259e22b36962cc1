"""``budgetlens presets``: recommended presets (P95 x multiplier) as YAML, TOML or JSON."""

from __future__ import annotations

import sys

from budgetlens.analysis.defaults import DEFAULT_MULTIPLIER, FORMATS
from budgetlens.cli._analysis import (
    WINDOW_HELP,
    add_window_arguments,
    analysis_session,
    note,
)
from budgetlens.cli._common import positive_float
from budgetlens.cli.whatif import _rate


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "presets",
        help=f"recommended presets (P95 x {DEFAULT_MULTIPLIER:g}) as YAML/TOML/JSON",
        description=(
            "Write the recommended preset of each task type: P95 x --multiplier, rounded up "
            "(tokens to the next 1,000; turns and tool calls to the next integer; seconds to "
            "the next 5; USD up to 2 significant figures, e.g. 0.01365 -> 0.014), never 0: a "
            "P95 of 0 gives one step (1,000 tokens, 1 turn or tool call, 5 s) and a $0 cost "
            "leaves max_cost_usd out. Cost limits use only runs whose cost is fully known. A "
            "limit whose P95 is unknown (e.g. tool calls no source counted) is left out. The "
            "file loads straight back into RunBudget.from_preset. Exit status 1 when no run "
            "matches (nothing is written). " + WINDOW_HELP
        ),
        epilog="Example: budgetlens presets --db budgetlens.duckdb --format yaml -o presets.yaml",
    )
    add_window_arguments(parser)
    parser.add_argument(
        "--multiplier",
        type=positive_float,
        default=DEFAULT_MULTIPLIER,
        help=f"preset = P95 x this (default: {DEFAULT_MULTIPLIER:g})",
    )
    parser.add_argument(
        "--format",
        choices=tuple(FORMATS),
        default="yaml",
        help="output format (default: yaml) of the preset document: per task type its max_* "
        "limits and their basis (runs, P50/P95); the same keys in every format",
    )
    parser.add_argument(
        "--method",
        choices=("auto", "plain", "kaplan-meier"),
        default="auto",
        help="the P95 a preset rests on: auto (default) uses the censoring-aware Kaplan-Meier P95 "
        "for task types where more than 5%% of the runs were stopped by a budget, the plain P95 "
        "elsewhere; plain or kaplan-meier for every task type",
    )
    parser.add_argument(
        "--target-hit-rate",
        type=_rate,
        default=None,
        metavar="RATE",
        help="instead of one --multiplier, per task type the smallest multiplier (1.0-3.0 by 0.1) "
        "whose replayed hit rate is at most RATE (0..1 or a percentage, e.g. 5%%)",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import preset_export as presets_export
    from budgetlens.analysis import views as analysis
    from budgetlens.analysis import whatif

    if args.output:  # fail before computing anything: the directory must exist
        import os

        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            print(
                f"budgetlens presets: error: -o {args.output}: the directory {folder} does not exist",
                file=sys.stderr,
            )
            return 2
    with analysis_session(args) as (conn, filters):
        ev = whatif.evidence(conn, filters)
        base = ev.baselines
        first, last, _ = analysis.data_extent(conn)
        if not base.empty:
            if args.target_hit_rate is not None:
                curve = whatif.tradeoff(conn, filters, ev, method=args.method)
                table = whatif.target_presets(ev, curve, args.target_hit_rate, method=args.method)
            else:
                table = whatif.evidence_presets(ev, args.multiplier, args.method)
                table = whatif.with_projection(conn, filters, table)
    if base.empty:
        print(
            "budgetlens presets: error: no runs match the filters in the window; nothing written",
            file=sys.stderr,
        )
        return 1
    window = args.window_days or None
    if window is not None and float(window).is_integer() and window < 1e15:
        window = int(window)
    origin = presets_export.provenance(filters, args.method, first, last, args.target_hit_rate)
    document = presets_export.build_document(table, args.multiplier, window, base, provenance=origin)
    text = presets_export.render(document, args.format)
    low = table.loc[table["low_sample"], "task_type"].tolist()
    if low:
        note(f"fewer than {analysis.LOW_SAMPLE_RUNS} runs for {', '.join(low)}: their P95 is low-sample")
    short = base[base["n_cost"] < base["n"]] if "n_cost" in base.columns else base.iloc[:0]
    if len(short):
        counts = ", ".join(f"{r.task_type} {int(r.n_cost)} of {int(r.n)}" for r in short.itertuples())
        note(
            f"max_cost_usd uses only runs whose cost is fully known ({counts}); the "
            "others had unpriced calls or unknown usage"
        )
    _note_evidence(table)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        noun = "preset" if len(table) == 1 else "presets"
        print(f"wrote {len(table)} {noun} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _note_evidence(table) -> None:
    """Notes on stderr: presets resting on the Kaplan–Meier P95, lower bounds, missed targets."""
    from budgetlens.analysis.values import format_rate, format_rate_range

    km = [r for r in table.itertuples() if r.method == "kaplan-meier"]
    if km:
        shares = ", ".join(f"{r.task_type} {format_rate(r.censored_share)}" for r in km)
        note(
            "presets on the censoring-aware (Kaplan-Meier) P95, as some runs were stopped by a "
            f"budget: {shares}"
        )
    for row in table.itertuples():
        if row.lower_bound_keys:
            keys = ", ".join(row.lower_bound_keys)
            note(
                f"{row.task_type}: P95 only a lower bound for {keys}: raise these limits a while to learn the tail"
            )
        verdict = getattr(row, "verdict", "met")
        if verdict == "not met":
            note(
                f"{row.task_type}: no multiplier up to {row.multiplier:g} meets the target "
                f"hit rate (projected {format_rate_range(row.projected_hit_rate, row.projected_hit_rate_upper)})"
            )
        elif verdict == "unknown":
            note(
                f"{row.task_type}: unknown whether x{row.multiplier:g} meets the target hit "
                f"rate: projected {format_rate_range(row.projected_hit_rate, row.projected_hit_rate_upper)} "
                "(the censored runs may have been stopped)"
            )
