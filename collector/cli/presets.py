"""``budgetlens presets``: recommended presets (P95 x multiplier) as YAML, TOML or JSON."""

from __future__ import annotations

import sys

from collector.cli._analysis import WINDOW_HELP, add_window_arguments, analysis_session


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "presets",
        help="recommended presets (P95 x 1.5) as YAML/TOML/JSON",
        description=(
            "Write the recommended preset of each task type: P95 x --multiplier, rounded up "
            "(tokens to the next 1,000; turns and tool calls to the next integer; seconds to "
            "the next 5; USD to the next cent). The file loads straight back into "
            "RunBudget.from_preset. " + WINDOW_HELP
        ),
        epilog="Example: budgetlens presets --db budgetlens.duckdb --format yaml -o presets.yaml",
    )
    add_window_arguments(parser)
    parser.add_argument("--multiplier", type=float, default=1.5,
                        help="preset = P95 x this (default: 1.5)")
    parser.add_argument("--format", choices=("yaml", "toml", "json"), default="yaml")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(func=run)


def run(args) -> int:
    from dashboard import analysis, presets_export

    if not args.multiplier > 0:
        raise ValueError(f"--multiplier must be > 0, got {args.multiplier:g}")
    with analysis_session(args) as (conn, filters):
        base = analysis.baselines(conn, filters)
    table = analysis.presets(base, args.multiplier)
    window = args.window_days or None
    if window is not None and float(window).is_integer():
        window = int(window)
    document = presets_export.build_document(table, args.multiplier, window, base)
    text = presets_export.render(document, args.format)
    low = table.loc[table["low_sample"], "task_type"].tolist()
    if low:
        print(f"note: fewer than {analysis.LOW_SAMPLE_RUNS} runs for {', '.join(low)}: "
              "their P95 is low-sample", file=sys.stderr)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"wrote {len(table)} presets to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
