"""Recommended presets as a preset document (``budgetlens.guard.preset_file``) in YAML, TOML or JSON.

The dashboard's download buttons and ``budgetlens presets`` write the same document; the guard
loads it back (``RunBudget.from_preset``). Keys whose value is unknown are omitted (TOML has no
null); every value is a plain int, float, bool or str.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import pandas as pd

from budgetlens.analysis.presets import round_significant
from budgetlens.guard.preset_file import BASIS_KEY, FORMAT_KEY, FORMAT_VERSION, LIMIT_KEYS

#: Formats and their file suffixes (the CLI's --format and the dashboard's downloads).
FORMATS = {"yaml": ".yaml", "toml": ".toml", "json": ".json"}
#: Baseline columns copied into each preset's ``basis`` (the evidence; ignored by the guard).
BASIS_COLUMNS = (
    "p50_total_tokens",
    "p95_total_tokens",
    "max_total_tokens",
    "p95_turns",
    "p95_tool_calls",
    "p95_duration_s",
    "p95_cost_usd",
)


def _plain(value):
    """A pandas/numpy scalar as int/float/bool/str; None for NaN/NA."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _basis_value(column: str, value: float) -> float:
    """Tokens to 1 decimal, anything else (turns, seconds, USD) to 6 significant digits."""
    return round(value, 1) if column.endswith("_tokens") else round_significant(value, 6)


def build_document(
    presets_df: pd.DataFrame,
    multiplier: float,
    window_days: float | None,
    baselines_df: pd.DataFrame | None = None,
    generated_utc: dt.datetime | None = None,
) -> dict:
    """Return the preset document for ``presets_df`` (from ``budgetlens.analysis.views.presets``).

    Shape: ``{budgetlens_presets: 1, generated_utc: ISO-8601 "Z", multiplier, window_days,
    presets: {task_type: {max_*: value, basis: {n_runs, low_sample, p50_total_tokens, ...}}}}``.
    Token, count and second limits are ints, ``max_cost_usd`` a float in USD. ``baselines_df``
    (same task types) adds the percentiles to ``basis``, and ``n_cost_runs`` (the runs whose cost
    was fully known, which the cost figures rest on) when it differs from ``n_runs``; ``basis``
    tokens have 1 decimal, other figures 6 significant digits. Raises
    ValueError when ``presets_df`` lacks the ``task_type`` or ``n`` column.
    """
    for column in ("task_type", "n", "low_sample"):
        if column not in presets_df.columns:
            raise ValueError(f"presets_df: column {column!r} is required")
    stamp = generated_utc or dt.datetime.now(dt.UTC)
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
    evidence = {}
    if baselines_df is not None and len(baselines_df):
        evidence = {row["task_type"]: row for _, row in baselines_df.iterrows()}
    presets = {}
    for _, row in presets_df.iterrows():
        entry = {}
        for key in LIMIT_KEYS:
            value = _plain(row.get(key))
            if value is None:
                continue
            entry[key] = float(value) if key == "max_cost_usd" else int(value)
        basis = {"n_runs": int(row["n"]), "low_sample": bool(row["low_sample"])}
        source = evidence.get(row["task_type"])
        if source is not None:
            n_cost = _plain(source.get("n_cost"))
            if n_cost is not None and int(n_cost) != basis["n_runs"]:
                basis["n_cost_runs"] = int(n_cost)
            for column in BASIS_COLUMNS:
                value = _plain(source.get(column))
                if value is not None:
                    basis[column] = _basis_value(column, float(value))
        entry[BASIS_KEY] = basis
        presets[str(row["task_type"])] = entry
    document = {
        FORMAT_KEY: FORMAT_VERSION,
        "generated_utc": stamp.replace(microsecond=0).isoformat() + "Z",
        "multiplier": float(multiplier),
    }
    if window_days is not None:
        document["window_days"] = window_days
    document["presets"] = presets
    return document


def to_yaml(doc: dict) -> str:
    """The document as YAML (keys in document order)."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def to_toml(doc: dict) -> str:
    """The document as TOML (one table per task type, ``basis`` as a sub-table)."""
    import tomli_w

    return tomli_w.dumps(doc)


def to_json(doc: dict) -> str:
    """The document as indented JSON."""
    return json.dumps(doc, indent=2) + "\n"


def render(doc: dict, fmt: str) -> str:
    """The document in ``fmt`` ('yaml', 'toml' or 'json'); raises ValueError for another."""
    writers = {"yaml": to_yaml, "toml": to_toml, "json": to_json}
    if fmt not in writers:
        raise ValueError(f"format must be one of {sorted(writers)}, got {fmt!r}")
    return writers[fmt](doc)
