"""Text formatting of figures for the dashboard (pure): USD, tokens, rates, changes.

A missing value never reads as zero: unknown cost is ``"unpriced"``, an unknown rate ``"n/a"``.
"""

from __future__ import annotations

import pandas as pd


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


def format_change(value: float | None) -> str:
    """A relative change in percent as ``+76 %`` / ``-17 %``; ``new`` when there was no limit."""
    if _missing(value):
        return "new"
    return f"{value:+.0f} %"

