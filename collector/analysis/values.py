"""The one "pandas value -> None" rule of the code base (analysis, CLI and dashboard alike).

``views``, ``presets`` and ``preset_export`` import it from here (``views`` re-exports both names).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["is_missing", "scalar"]


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
