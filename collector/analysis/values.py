"""The one "pandas value -> None" rule of the code base (analysis, CLI and dashboard alike).

``views``, ``presets`` and ``preset_export`` import it from here (``views`` re-exports both names).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["RATE_SUFFIXES", "format_rate", "format_rate_range", "is_missing", "is_rate_column", "scalar"]

#: Column names ending so hold a rate or a share in 0..1 (hit rates, their bounds, censored
#: shares); every table shows them in percent (``format_rate``), the one unit for rates.
RATE_SUFFIXES = ("_rate", "_share", "_rate_upper", "_rate_lower")


def is_missing(value: Any) -> bool:
    """True for None, NaN, NaT and pd.NA (safe on any scalar: never raises, never ambiguous)."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or an array is a value, not a missing one
        return False


def scalar(value: Any) -> Any:
    """A pandas/numpy scalar as a plain Python value (int, float, bool, str, ``datetime``); None
    for NaN, NA and NaT."""
    if is_missing(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    return value.item() if hasattr(value, "item") else value


def is_rate_column(name: str) -> bool:
    """True when column ``name`` holds a rate or share in 0..1 (``RATE_SUFFIXES``)."""
    return str(name).endswith(RATE_SUFFIXES)


def format_rate(value: Any, none: str = "") -> str:
    """A rate in 0..1 as percent with one decimal: ``0.249 -> "24.9 %"``; ``none`` when missing.
    The one unit for rates in the CLI and the dashboard."""
    if is_missing(value):
        return none
    return f"{float(value) * 100:,.1f} %"


def format_rate_range(lower: Any, upper: Any, none: str = "") -> str:
    """A hit rate with censored runs as a range: ``(0.017, 0.249) -> "1.7–24.9 %"`` (the stopped
    runs to the stopped plus censored ones); one figure when the bounds agree or ``upper`` is
    missing; ``none`` when ``lower`` is missing."""
    if is_missing(lower):
        return none
    if is_missing(upper) or abs(float(upper) - float(lower)) < 5e-4:
        return format_rate(lower)
    return f"{float(lower) * 100:,.1f}–{float(upper) * 100:,.1f} %"
