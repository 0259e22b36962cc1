"""Text formatting of figures for the dashboard (pure): USD, tokens, rates, changes.

A missing value never reads as zero: unknown cost is ``"unpriced"``, an unknown rate ``"n/a"``,
an empty table cell ``MISSING`` (an em dash).
"""

from __future__ import annotations

import pandas as pd


#: What a table cell or a label shows for a missing value (never ``None``, ``nan`` or ``<NA>``).
MISSING = "—"
#: The label of a preset key whose runs ran without such a limit, and of one with no data.
NO_CURRENT_LIMIT = "no current limit"
NO_DATA = "no data"


def is_missing(value) -> bool:
    """True for None, NaN, NaT and pd.NA (safe on any scalar: never raises, never ambiguous)."""
    return _missing(value)


def _missing(value) -> bool:
    """None, NaN, NaT and pd.NA are missing."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def format_usd(value: float | None, *, unpriced: str = "unpriced") -> str:
    """``$1,234.56`` (cents; four decimals below $1), or ``unpriced`` when ``value`` is None/NaN."""
    if _missing(value):
        return unpriced
    if abs(value) < 1:
        return f"${value:,.4f}"
    return f"${value:,.2f}"


def format_tokens(value: float | None) -> str:
    """Tokens with a K/M suffix (``12.3K``, ``1.20M``), ``n/a`` when unknown."""
    if _missing(value):
        return "n/a"
    value = float(value)
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if abs(value) >= 10_000:
        return f"{value / 1_000:.1f}K"
    return f"{value:,.0f}"


def format_percent(value: float | None) -> str:
    """A rate in 0..1 as ``12.3 %``, ``n/a`` when there is no finished run."""
    if _missing(value):
        return "n/a"
    return f"{value * 100:.1f} %"


def format_change(value: float | None, current=0.0, recommended=0.0) -> str:
    """A relative change in percent as ``+76 %`` / ``-17 %``.

    When it cannot be computed the text says why: ``no data`` when there is no recommendation
    (``recommended`` missing), ``no current limit`` when the runs ran without one (``current``
    missing), else an em dash (a current limit of 0).
    """
    if _missing(recommended):
        return NO_DATA
    if _missing(current):
        return NO_CURRENT_LIMIT
    if _missing(value):
        return MISSING
    return f"{value:+.0f} %"


def text(value) -> str:
    """Any scalar as table/label text: ``MISSING`` for None/NaN/NA/NaT, else ``str(value)``."""
    return MISSING if _missing(value) else str(value)


#: Column-name prefixes of percentiles: shown with one decimal (P95 is interpolated, so
#: 56,463.5 stays 56,463.5 in every table and tooltip, as in the CLI).
PERCENTILE_PREFIXES = ("p50_", "p95_")


def number_format(column: str) -> str | None:
    """The printf-style display format of a numeric table column, by its name and unit.

    Percentiles of tokens, turns, tool calls and seconds (``p50_*``, ``p95_*``) get one decimal
    (``%,.1f``); other ``*_tokens`` columns and counts are whole (``%,.0f``); ``*_s`` one decimal;
    ``*_usd`` columns are formatted as text elsewhere (``format_usd``), so None.
    """
    if column.endswith("_usd"):
        return None
    if column.startswith(PERCENTILE_PREFIXES) or column.endswith("_s"):
        return "%,.1f"
    if column.endswith(("_tokens", "_turns", "_tool_calls")) or column in (
            "turns", "tool_calls", "n", "n_cost", "runs"):
        return "%,.0f"
    return None

