"""``budgetlens reprice``: re-price stored calls with the current prices, deliberately."""

from __future__ import annotations

from budgetlens.cli._common import add_db_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reprice",
        help="re-price stored calls with the current prices (after a genai-prices upgrade)",
        description=(
            "Recompute the cost of the calls budgetlens priced with another price version "
            "(model_calls.price_version) and of calls left unpriced although their usage is "
            "known, each at the price in force at its own start time, then rebuild the run "
            "rollups. Costs a source stated (Claude Code costUSD, OpenHands, SWE-agent) are "
            "never changed. Stop the collector writing to the store first. Prices come from "
            "genai-prices and the price file named by BUDGETLENS_PRICES_FILE."
        ),
        epilog="Example: budgetlens reprice --db budgetlens.duckdb --dry-run",
    )
    add_db_argument(parser)
    parser.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.config import resolve_db_path
    from budgetlens.store.reprice import reprice

    db_path = resolve_db_path(args.db)
    result = reprice(db_path, dry_run=args.dry_run)
    verb = "would re-price" if args.dry_run else "re-priced"
    print(
        f"{verb} {result.changed} of {result.candidates} call(s) in {db_path} with {result.price_version} "
        f"({result.newly_priced} newly priced): ${result.cost_before_usd:,.6f} -> ${result.cost_after_usd:,.6f}"
    )
    return 0
