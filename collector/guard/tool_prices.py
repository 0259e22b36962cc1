"""Paid tools: the tool price table and the fee of one tool call (issue 21, "a second ledger").

A web search, a browser session or a paid API costs money that no model usage shows. The guard
counts such fees apart from model cost (``RunResult.tool_cost_usd``, the ``budgetlens.tool_cost_usd``
attribute of the ``budgetlens.tool_call`` event and of the run span, the store's
``runs.tool_cost_usd``), and counts them in ``max_cost_usd`` and the spend windows like model cost.

A fee comes from ``before_tool_call(name, cost_usd=...)`` when the caller knows it, else from the
run's tool price table: ``per_call_usd`` (USD per call) plus ``per_unit_usd`` (USD per unit) x
``units`` (e.g. pages fetched, seconds of a browser session; the ``unit`` name documents which).
A tool absent from the table costs nothing. The table is a mapping, or a file (YAML, TOML or JSON
by extension, read like a preset file)::

    budgetlens_tool_prices: 1             # format version (int)
    tools:
      web_search: {per_call_usd: 0.01}
      browser: {per_unit_usd: 0.002, unit: second}
      geocode: {per_call_usd: 0.005, per_unit_usd: 0.001, unit: address}
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from budgetlens.config import load_document

__all__ = ["FORMAT_KEY", "ToolPrice", "check_tool_prices", "load_tool_prices", "tool_fee"]

FORMAT_KEY = "budgetlens_tool_prices"
FORMAT_VERSION = 1
_PRICE_KEYS = ("per_call_usd", "per_unit_usd", "unit")


class ToolPrice(NamedTuple):
    """One tool's price: ``per_call_usd`` (USD per call, >= 0), ``per_unit_usd`` (USD per unit,
    >= 0) and the ``unit``'s name (free text, e.g. ``"second"``; None without a unit price)."""

    per_call_usd: float = 0.0
    per_unit_usd: float = 0.0
    unit: str | None = None

    def fee(self, units: float | None) -> float:
        """USD of one call using ``units`` units (None: 0 units)."""
        return self.per_call_usd + self.per_unit_usd * (units or 0)


def _usd(label: str, value: Any, unit: str = "USD") -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{label} must be a finite number >= 0 ({unit}), got {value!r}")
    return float(value)


def _price(label: str, entry: Any) -> ToolPrice:
    if isinstance(entry, ToolPrice):
        entry = entry._asdict()
    if not isinstance(entry, Mapping):
        raise ValueError(f"{label} must be a mapping of {_PRICE_KEYS}, got {entry!r}")
    unknown = sorted(set(entry) - set(_PRICE_KEYS))
    if unknown:
        raise ValueError(f"{label}: unknown keys {unknown}; expected some of {_PRICE_KEYS}")
    unit = entry.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise ValueError(f"{label}.unit must be a string (the unit's name), got {unit!r}")
    return ToolPrice(
        _usd(f"{label}.per_call_usd", entry.get("per_call_usd", 0.0)),
        _usd(f"{label}.per_unit_usd", entry.get("per_unit_usd", 0.0)),
        unit,
    )


def check_tool_prices(prices: Any) -> dict[str, ToolPrice]:
    """A checked tool price table: ``prices`` is None (no table), a mapping of tool name ->
    ``{"per_call_usd": ..., "per_unit_usd": ..., "unit": ...}`` (or :class:`ToolPrice`), or the path
    of a tool price file (see the module docstring). Returns tool name -> ToolPrice. Raises ValueError
    naming the tool and the rule (a price < 0 or not a number, an unknown key)."""
    if prices is None:
        return {}
    if isinstance(prices, (str, os.PathLike)):
        return load_tool_prices(prices)
    if not isinstance(prices, Mapping):
        raise ValueError(
            f"tool_prices must be a mapping of tool name -> price, or a file path; got {prices!r}"
        )
    return {str(name): _price(f"tool_prices[{name!r}]", entry) for name, entry in prices.items()}


def load_tool_prices(path: str | os.PathLike) -> dict[str, ToolPrice]:
    """Read a tool price file (YAML/TOML/JSON by extension): tool name -> :class:`ToolPrice`.
    Raises ValueError naming the file and the rule (missing or unknown format version, no ``tools``
    mapping, a bad price); FileNotFoundError when the file is missing."""
    doc = load_document(path, "tool price file")
    if not isinstance(doc, Mapping) or doc.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ValueError(f"{path}: a tool price file starts with {FORMAT_KEY}: {FORMAT_VERSION}")
    tools = doc.get("tools")
    if not isinstance(tools, Mapping):
        raise ValueError(f"{path}: tools must be a mapping of tool name -> price")
    return {str(name): _price(f"{path}: tools.{name}", entry) for name, entry in tools.items()}


def tool_fee(
    prices: Mapping[str, ToolPrice], name: str, cost_usd: float | None, units: float | None
) -> float:
    """The fee (USD, >= 0) of one call of tool ``name``: ``cost_usd`` when given, else the table's
    price for ``units`` units (0.0 for a tool not in the table). Raises ValueError for a
    ``cost_usd`` or ``units`` that is not a finite number >= 0."""
    if units is not None:
        _usd("units", units, "units of the tool")
    if cost_usd is not None:
        return _usd("cost_usd", cost_usd)
    price = prices.get(name)
    return 0.0 if price is None else price.fee(units)
