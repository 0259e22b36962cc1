"""Arguments shared by several subcommands, and ``argparse`` types that check a number's rule.

A bad value is an argparse usage error: ``budgetlens presets: error: argument --multiplier: must
be a finite number > 0, got 'inf'`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help="DuckDB store path (default: $BUDGETLENS_DB, else budgetlens.duckdb)",
    )


def _number(kind: type, minimum: float, strict: bool) -> Callable[[str], float | int]:
    """An argparse ``type=`` that parses ``kind`` (int or float) and requires a finite value
    > ``minimum`` (``strict``) or >= ``minimum``; raises ArgumentTypeError naming the rule."""
    noun = "an integer" if kind is int else "a finite number"
    rule = f"must be {noun} {'>' if strict else '>='} {minimum:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}") from None
        if not math.isfinite(value) or (value <= minimum if strict else value < minimum):
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}")
        return value

    parse.__name__ = f"{kind.__name__}_{'gt' if strict else 'ge'}_{minimum:g}"
    return parse


#: ``--multiplier``: a finite float > 0.
positive_float = _number(float, 0, strict=True)
#: ``--window-days``: a finite float >= 0 (0 = every run).
non_negative_float = _number(float, 0, strict=False)
#: ``--limit``, ``--offset``: an int >= 0.
non_negative_int = _number(int, 0, strict=False)
#: ``--days``, ``--runs-per-day``: an int >= 1.
positive_int = _number(int, 1, strict=False)
