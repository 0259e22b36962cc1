"""``budgetlens sample``: generate seeded sample runs into the store, or write/load the portable
sample file."""

from __future__ import annotations

import argparse
import datetime as dt


def _date(text: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a date YYYY-MM-DD, got {text!r}") from None


def register(subparsers) -> None:
    from budgetlens.cli._common import add_db_argument, positive_int

    parser = subparsers.add_parser(
        "sample",
        help="generate seeded sample runs (or load/export the portable sample)",
        description=(
            "Simulate --days days of agent runs (simple_qa, tool_use, complex_reasoning, "
            "code_generation, research) under a budget guard, with real model names and "
            "genai-prices prices, heavy tails, runaway loops, budget stops, downgrades, cache "
            "and reasoning tokens, unknown usage, a weekday rhythm and one incident day, and "
            "write them to the store. The same --seed, --days, --runs-per-day and --end-date give "
            "the same runs, whose ids name them (sample-YYYYMMDD-s<seed>-NNNNNN, YYYYMMDD the "
            "end date): writing them again adds nothing, and another generation (such as "
            "today's next to the demo's) never overwrites them. "
            "--export writes a portable gzip JSONL file instead; --load reads one (such as "
            "sample_data/budgetlens_sample.jsonl.gz) into the store."
        ),
        epilog="Example: budgetlens sample --db budgetlens.duckdb --days 14 --seed 7",
    )
    add_db_argument(parser)
    parser.add_argument("--days", type=positive_int, default=14, help="days to simulate (default 14)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument(
        "--runs-per-day",
        type=positive_int,
        default=300,
        help="runs on a weekday (weekends run at about a third; default 300)",
    )
    parser.add_argument(
        "--end-date",
        type=_date,
        default=None,
        metavar="YYYY-MM-DD",
        help="the days end at this UTC midnight (default: today)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--export", metavar="FILE", help="write the portable sample (gzip JSONL) to FILE, not to the store"
    )
    group.add_argument(
        "--load", metavar="FILE", help="load a portable sample file into the store instead of generating"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens import sample
    from budgetlens.config import resolve_db_path

    if args.load:
        db = resolve_db_path(args.db)
        runs, new_runs = sample.load_sample_file(args.load, db)
        print(f"loaded {runs} runs ({new_runs} new) from {args.load} into {db}")
        return 0
    end = args.end_date or sample.default_end_utc()
    ids = sample.generation_id(args.seed, end, args.days, args.runs_per_day)
    span = f"{args.days} days ending {end:%Y-%m-%d}, seed {args.seed}, ids {ids}-*"
    if args.export:
        runs = sample.export_sample_jsonl(args.export, args.days, args.seed, args.runs_per_day, end)
        print(f"wrote {runs} runs ({span}) to {args.export}")
        return 0
    db = resolve_db_path(args.db)
    runs = sample.write_sample(db, args.days, args.seed, args.runs_per_day, end)
    print(f"wrote {runs} runs ({span}) to {db}")
    return 0
