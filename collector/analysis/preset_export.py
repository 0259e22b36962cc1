"""Recommended presets as a preset document (``budgetlens.guard.preset_file``) in YAML, TOML or JSON.

The dashboard's download buttons and ``budgetlens presets`` write the same document; the guard
loads it back (``RunBudget.from_preset``). Keys whose value is unknown are omitted (TOML has no
null); every value is a plain int, float, bool or str.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pandas as pd

from budgetlens.analysis.censoring import METHOD_CENSORING_AWARE
from budgetlens.analysis.defaults import BASIS_COLUMNS, FORMATS  # noqa: F401  (FORMATS re-exported)
from budgetlens.analysis.presets import round_significant
from budgetlens.analysis.values import scalar
from budgetlens.analysis.views import Filters
from budgetlens.guard.preset_file import BASIS_KEY, FORMAT_KEY, FORMAT_VERSION, LIMIT_KEYS


def _basis_value(column: str, value: float) -> float:
    """Tokens to 1 decimal, anything else (turns, seconds, USD) to 6 significant digits."""
    return round(value, 1) if column.endswith("_tokens") else round_significant(value, 6)


def build_document(
    presets_df: pd.DataFrame,
    multiplier: float,
    window_days: float | None,
    baselines_df: pd.DataFrame | None = None,
    generated_utc: dt.datetime | None = None,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the preset document for ``presets_df`` (from ``budgetlens.analysis.views.presets``).

    Shape: ``{budgetlens_presets: 1, generated_utc: ISO-8601 "Z", multiplier, window_days,
    presets: {task_type: {max_*: value, basis: {n_runs, low_sample, p50_total_tokens, ...}}}}``.
    Token, count and second limits are ints, ``max_cost_usd`` a float in USD. ``baselines_df``
    (same task types) adds the percentiles to ``basis``, and ``n_cost_runs`` (the runs whose cost
    was fully known, which the cost figures rest on) when it differs from ``n_runs``; ``basis``
    tokens have 1 decimal, other figures 6 significant digits.

    Provenance: ``provenance`` (``provenance`` below) becomes the top-level ``basis`` (filters,
    date range, method, target hit rate). Columns of ``presets_df`` from
    ``budgetlens.analysis.whatif`` (``evidence_presets``, ``target_presets``,
    ``with_projection``) add to each preset's ``basis``: ``method`` (``plain`` or
    ``kaplan-meier``), ``censored_share``, ``multiplier`` (when it differs per task type),
    ``projected_hit_rate`` (and ``projected_hit_rate_upper`` with the censored runs), the
    Kaplan–Meier ``km_p95_total_tokens``, and ``lower_bound``: the keys whose P95 is only a lower
    bound with the advice to raise them for a while. Raises ValueError when ``presets_df`` lacks
    the ``task_type``, ``n`` or ``low_sample`` column.
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
        entry: dict[str, Any] = {}
        for key in LIMIT_KEYS:
            value = scalar(row.get(key))
            if value is None:
                continue
            entry[key] = float(value) if key == "max_cost_usd" else int(value)
        basis: dict[str, Any] = {"n_runs": int(row["n"]), "low_sample": bool(row["low_sample"])}
        source = evidence.get(row["task_type"])
        if source is not None:
            n_cost = scalar(source.get("n_cost"))
            if n_cost is not None and int(n_cost) != basis["n_runs"]:
                basis["n_cost_runs"] = int(n_cost)
            for column in BASIS_COLUMNS:
                value = scalar(source.get(column))
                if value is not None:
                    basis[column] = _basis_value(column, float(value))
        basis.update(_method_basis(row, multiplier))
        entry[BASIS_KEY] = basis
        presets[str(row["task_type"])] = entry
    document = {
        FORMAT_KEY: FORMAT_VERSION,
        "generated_utc": stamp.replace(microsecond=0).isoformat() + "Z",
        "multiplier": float(multiplier),
    }
    if window_days is not None:
        document["window_days"] = window_days
    if provenance:
        document[BASIS_KEY] = {k: v for k, v in provenance.items() if v is not None}
    document["presets"] = presets
    return document


def _method_basis(row: pd.Series, multiplier: float) -> dict[str, Any]:
    """The method and projection fields of one preset's ``basis`` (see ``build_document``)."""
    out: dict[str, Any] = {}
    method = scalar(row.get("method"))
    if method is not None:
        out["method"] = str(method)
    share = scalar(row.get("censored_share"))
    if share is not None:
        out["censored_share"] = round_significant(float(share), 4)
    own = scalar(row.get("multiplier"))
    if own is not None and float(own) != float(multiplier):
        out["multiplier"] = float(own)
    for column in ("projected_hit_rate", "projected_hit_rate_upper"):
        value = scalar(row.get(column))
        if value is not None:
            out[column] = round_significant(float(value), 4)
    km = scalar(row.get("km_p95_total_tokens"))
    if km is not None and method == METHOD_CENSORING_AWARE:
        out["km_p95_total_tokens"] = round(float(km), 1)
    keys = row.get("lower_bound_keys")
    if isinstance(keys, list | tuple) and keys:
        out["lower_bound"] = {
            "keys": [str(k) for k in keys],
            "note": (
                "the P95 behind these limits is only a lower bound (every run that could show the "
                f"tail was stopped); raise {', '.join(str(k) for k in keys)} for a while to learn "
                "the real tail"
            ),
        }
    return out


def provenance(
    filters: Filters,
    method: str,
    first_utc: dt.datetime | None = None,
    last_utc: dt.datetime | None = None,
    target_hit_rate: float | None = None,
) -> dict[str, Any]:
    """The document's top-level ``basis``: ``filters`` (task_types, models, services: the lists
    the runs were chosen by; empty = all), ``start_utc`` / ``end_utc`` (ISO-8601 "Z": the
    filter's bounds, else the oldest / newest run given), ``method`` (``auto``, ``plain`` or
    ``kaplan-meier``) and ``target_hit_rate`` (0..1) when the multiplier was chosen for one."""
    start = filters.start_utc or first_utc
    end = filters.end_utc or last_utc
    out: dict[str, Any] = {
        "filters": {
            "task_types": list(filters.task_types),
            "models": list(filters.models),
            "services": list(filters.services),
        },
        "start_utc": _iso(start),
        "end_utc": _iso(end),
        "method": method,
    }
    if target_hit_rate is not None:
        out["target_hit_rate"] = float(target_hit_rate)
    return out


def _iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.replace(microsecond=0).isoformat() + "Z"


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
