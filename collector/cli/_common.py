"""Arguments shared by several subcommands, and ``argparse`` types that check a number's rule.

A bad value is an argparse usage error: ``budgetlens presets: error: argument --multiplier: must
be a finite number > 0, got 'inf'`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def add_command(
    subparsers, name: str, *, help: str, description: str, epilog: str | None = None
) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` on a store (``--db``), whose ``description`` and
    ``epilog`` are printed with their own line breaks."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_db_argument(parser)
    return parser


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help=(
            "store: a DuckDB file path, or a DuckLake 'ducklake:postgres:dbname=NAME host=HOST"
            "[?data_path=DIR_OR_S3_URL]' (default: $BUDGETLENS_DB, else budgetlens.duckdb)"
        ),
    )


def _number(
    kind: type, minimum: float, strict: bool, maximum: float | None = None
) -> Callable[[str], float | int]:
    """An argparse ``type=`` that parses ``kind`` (int or float) and requires a finite value
    > ``minimum`` (``strict``) or >= ``minimum``, and <= ``maximum`` when given; raises
    ArgumentTypeError naming the rule."""
    noun = "an integer" if kind is int else "a finite number"
    rule = f"must be {noun} {'>' if strict else '>='} {minimum:g}"
    if maximum is not None:
        whole = isinstance(maximum, int) or float(maximum).is_integer()
        rule += f" and <= {int(maximum)}" if whole else f" and <= {maximum}"

    def parse(text: str):
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}") from None
        if (
            not math.isfinite(value)
            or (value <= minimum if strict else value < minimum)
            or (maximum is not None and value > maximum)
        ):
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}")
        return value

    parse.__name__ = f"{kind.__name__}_{'gt' if strict else 'ge'}_{minimum:g}"
    return parse


#: ``--multiplier``: a finite float > 0.
positive_float = _number(float, 0, strict=True)
#: ``--window-days``: a finite float >= 0 (0 = every run).
non_negative_float = _number(float, 0, strict=False)
#: ``--limit``, ``--offset``: an int >= 0 that SQL can take (a BIGINT).
non_negative_int = _number(int, 0, strict=False, maximum=(1 << 63) - 1)
#: ``--days``, ``--runs-per-day``: an int >= 1.
positive_int = _number(int, 1, strict=False)
#: ``--port``: a TCP port, an int 0..65535 (0 = the system picks a free one).
tcp_port = _number(int, 0, strict=False, maximum=65535)
#: ``--max-line-mb``: MiB, a finite float > 0 and <= 1048576 (1 TiB).
line_limit_mib = _number(float, 0, strict=True, maximum=1 << 20)


def time_zone(text: str) -> str:
    """An IANA time zone name (``Europe/Berlin``, ``UTC``) for ``--tz``; an unknown one is a
    usage error naming the option: ``--tz: unknown IANA time zone 'Mars/Phobos' (e.g. UTC,
    Europe/Berlin, America/New_York)``."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"unknown IANA time zone {text!r} (e.g. UTC, Europe/Berlin, America/New_York)"
        ) from None
    return text
