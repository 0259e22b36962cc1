"""``budgetlens presets``: recommended presets (P95 x multiplier) as YAML, TOML or JSON."""

from __future__ import annotations

import sys

from budgetlens.cli._analysis import (
    WINDOW_HELP,
    add_window_arguments,
    analysis_session,
)
from budgetlens.cli._common import positive_float

#: The preset document formats (``budgetlens.analysis.preset_export.render``).
FORMATS = ("yaml", "toml", "json")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "presets",
        help="recommended presets (P95 x 1.5) as YAML/TOML/JSON",
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
        "--multiplier", type=positive_float, default=1.5, help="preset = P95 x this (default: 1.5)"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="yaml",
        help="output format (default: yaml) of the preset document: per task type its max_* "
        "limits and their basis (runs, P50/P95); the same keys in every format",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import preset_export as presets_export
    from budgetlens.analysis import views as analysis

    with analysis_session(args) as (conn, filters):
        base = analysis.baselines(conn, filters)
    if base.empty:
        print(
            "budgetlens presets: error: no runs match the filters in the window; nothing written",
            file=sys.stderr,
        )
        return 1
    table = analysis.presets(base, args.multiplier)
    window = args.window_days or None
    if window is not None and float(window).is_integer() and window < 1e15:
        window = int(window)
    document = presets_export.build_document(table, args.multiplier, window, base)
    text = presets_export.render(document, args.format)
    low = table.loc[table["low_sample"], "task_type"].tolist()
    if low:
        print(
            f"note: fewer than {analysis.LOW_SAMPLE_RUNS} runs for {', '.join(low)}: their P95 is low-sample",
            file=sys.stderr,
        )
    short = base[base["n_cost"] < base["n"]] if "n_cost" in base.columns else base.iloc[:0]
    if len(short):
        counts = ", ".join(f"{r.task_type} {int(r.n_cost)} of {int(r.n)}" for r in short.itertuples())
        print(
            f"note: max_cost_usd uses only runs whose cost is fully known ({counts}); the "
            "others had unpriced calls or unknown usage",
            file=sys.stderr,
        )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"wrote {len(table)} presets to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
