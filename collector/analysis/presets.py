"""Recommended presets (design §6): P95 x multiplier, rounded up, never 0; and how they compare
with the limits the runs ran under. Pure functions over the frames of ``budgetlens.analysis.views``
(which re-exports every name here).

Rounding (``PRESET_RULES``), always up so that a preset never falls below P95 x multiplier:

- tokens up to the next 1,000; turns and tool calls up to the next integer; seconds up to the
  next 5 (``round_up`` to a step);
- USD up to 2 significant figures (``round_up_significant``): $0.01365 -> $0.014, $0.44 stays,
  $1.234 -> $1.3, $12.01 -> $13. A cent step would more than double a cheap task type's limit
  ($0.0091 -> $0.02); two significant figures add at most 10 % on top of the multiplier.

Never 0: a 0 limit stops a run before its first call, so a product of 0 gives the smallest step
(1,000 tokens, 1 turn or tool call, 5 s) and a $0 cost limit is left out (None).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import pandas as pd

from budgetlens.analysis.censoring import METHOD_CENSORING_AWARE, METHOD_PLAIN
from budgetlens.analysis.defaults import DEFAULT_MULTIPLIER
from budgetlens.analysis.values import scalar
from budgetlens.limits import LIMIT_KEYS, LIMITS, SIGNIFICANT

__all__ = [
    "DEFAULT_MULTIPLIER",
    "LIMIT_COLUMNS",
    "OMIT_WHEN_ZERO",
    "PRESET_RULES",
    "SIGNIFICANT",
    "METHODS",
    "preset_changes",
    "preset_grid",
    "preset_limit",
    "presets",
    "recommended_presets",
    "recommended_presets_each",
    "round_significant",
    "round_up",
    "round_up_significant",
]

#: Preset key -> (baseline metric, rounding): a number is a step (rounded up to a multiple of
#: it, ``round_up``); ``SIGNIFICANT`` rounds up to 2 significant figures
#: (``round_up_significant``). Derived from the guard's one limit table.
PRESET_RULES = {spec.name: (spec.metric, spec.preset_step) for spec in LIMITS}
#: Preset keys whose limit is left out (None) rather than rounded up when P95 x multiplier is 0:
#: a $0 cost limit would stop every run before its first call.
OMIT_WHEN_ZERO = frozenset({"max_cost_usd"})
#: Preset key -> the ``runs`` column holding the limit the run ran under.
LIMIT_COLUMNS = {spec.name: spec.store_column for spec in LIMITS}
#: ``auto``: Kaplan–Meier where censoring is material (> 5 % of a task type's runs were stopped),
#: plain elsewhere; ``plain``: always the plain P95; ``kaplan-meier``: always Kaplan–Meier.
METHODS = ("auto", METHOD_PLAIN, METHOD_CENSORING_AWARE)
#: Relative tolerance: float noise (60000.0000001, 0.44000000000000006) does not add a step.
_NOISE = 1e-9


def round_up(value: float | None, step: float) -> float | int | None:
    """Round ``value`` up to the next multiple of ``step`` (an exact multiple stays).

    An int step gives an int; a float step gives a float rounded to the step's decimals.
    None and NaN give None. A relative tolerance of 1e-9 keeps float noise (60000.0000001) from
    adding a step.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    units = math.ceil(value / step - _NOISE)
    if isinstance(step, int):
        return int(units * step)
    return round(units * step, max(0, -math.floor(math.log10(step))))


def round_up_significant(value: float | None, digits: int = 2) -> float | None:
    """Round ``value`` up to ``digits`` significant figures (0.01365 -> 0.014, 0.44 -> 0.44,
    1.234 -> 1.3, 99.1 -> 100.0); a value with no more figures stays. Returns a float; 0 and
    negative values are returned as they are (there is no figure to round); None and NaN give
    None. Raises ValueError for ``digits`` < 1. Float noise within 1e-9 does not add a unit.
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits!r}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if value <= 0:
        return float(value)
    exponent = math.floor(math.log10(value)) - digits + 1
    step = 10.0**exponent
    units = math.ceil(value / step - _NOISE)
    return round(units * step, max(0, -exponent))


def round_significant(value: float, digits: int = 6) -> float:
    """``value`` rounded (to nearest) to ``digits`` significant digits, for output without
    float noise (35.84999999999999 -> 35.85); 0, NaN and infinities are returned as they are."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def preset_limit(key: str, p95: float | None, multiplier: float) -> float | int | None:
    """One preset limit: ``p95`` x ``multiplier`` rounded up per ``PRESET_RULES``.

    Never 0 (a 0 limit stops the run before its first call): when the product is 0, tokens,
    counts and seconds take the smallest non-zero step (1,000 tokens, 1 turn or tool call, 5 s),
    and ``max_cost_usd`` (a free or $0 model) is left out (None). None when the P95 is unknown.
    Raises KeyError for a key not in ``PRESET_RULES``, ValueError naming the key when the
    product is not a finite number.
    """
    if p95 is None:
        return None
    metric, rounding = PRESET_RULES[key]
    value = float(p95) * multiplier
    if not math.isfinite(value):
        raise ValueError(
            f"{key}: P95 of {metric} ({p95:g}) x multiplier ({multiplier:g}) "
            "is not a finite number; use a smaller multiplier"
        )
    limit = round_up_significant(value) if isinstance(rounding, str) else round_up(value, rounding)
    if limit is None or limit <= 0:
        return None if key in OMIT_WHEN_ZERO or isinstance(rounding, str) else rounding
    return limit


def _check_multiplier(multiplier: float) -> None:
    if (
        isinstance(multiplier, bool)
        or not isinstance(multiplier, numbers.Real)
        or not math.isfinite(multiplier)
        or not multiplier > 0
    ):
        raise ValueError(f"multiplier must be a finite number > 0, got {multiplier!r}")


def presets(baselines_df: pd.DataFrame, multiplier: float = DEFAULT_MULTIPLIER) -> pd.DataFrame:
    """Recommended presets from a ``budgetlens.analysis.views.baselines`` frame: P95 x ``multiplier``,
    rounded up and never 0 per ``PRESET_RULES`` / ``preset_limit`` (tokens to the next 1,000;
    counts to the next integer; seconds to the next 5; USD to 2 significant figures; a 0
    token/count/second limit becomes one step, a $0 cost limit is left out).

    Columns: task_type, n, low_sample, then the keys of ``budgetlens.guard.preset_file.LIMIT_KEYS``
    (object dtype; None where the P95 is unknown). The cost limit rests on the baseline's
    ``n_cost`` fully priced runs. Raises ValueError when ``multiplier`` is not a finite number
    > 0 or a limit overflows. Pure.
    """
    _check_multiplier(multiplier)
    rows = []
    for _, row in baselines_df.iterrows():
        out = {"task_type": row["task_type"], "n": int(row["n"]), "low_sample": bool(row["low_sample"])}
        for key, (metric, _rounding) in PRESET_RULES.items():
            out[key] = preset_limit(key, scalar(row.get(f"p95_{metric}")), multiplier)
        rows.append(out)
    columns = ["task_type", "n", "low_sample", *PRESET_RULES]
    return pd.DataFrame(rows, columns=columns).astype({k: object for k in PRESET_RULES})


def recommended_presets(
    baselines_df: pd.DataFrame,
    censoring_df: pd.DataFrame | None,
    multiplier: float = DEFAULT_MULTIPLIER,
    method: str = "auto",
) -> pd.DataFrame:
    """THE recommendation: every surface (Baselines markers, Presets page, What-if,
    ``budgetlens presets`` / ``whatif``, the exported file) shows this function's numbers.

    ``baselines_df`` is ``views.baselines``, ``censoring_df`` ``censoring.censored_baselines``
    of the same filters (None: plain everywhere). Per task type the P95 is the plain one, or the
    Kaplan–Meier one when ``method`` is ``kaplan-meier``, or ``auto`` and more than 5 % of its
    runs were stopped by a budget; then P95 x ``multiplier`` rounded up (``presets``).

    Returns the ``presets`` frame plus columns: method (``plain`` or ``kaplan-meier``),
    censored_share (0..1), lower_bound_keys (list of preset keys whose Kaplan–Meier P95 is only a
    lower bound: raise that limit for a while to learn the real tail), km_p95_total_tokens
    (float or None, whether used or not), multiplier. Raises ValueError for a method not in
    ``METHODS`` or a bad multiplier (as ``presets``). Pure.
    """
    base, methods, shares, bounds, km_p95 = _chosen_p95(baselines_df, censoring_df, method)
    out = presets(base, multiplier)
    out["method"] = methods
    out["censored_share"] = shares
    out["lower_bound_keys"] = bounds
    out["km_p95_total_tokens"] = km_p95
    out["multiplier"] = float(multiplier)
    return out


def recommended_presets_each(
    baselines_df: pd.DataFrame,
    censoring_df: pd.DataFrame | None,
    multipliers: dict[Any, float],
    method: str = "auto",
) -> pd.DataFrame:
    """The rows of ``recommended_presets`` of each task type of ``multipliers`` ({task type (None:
    none): its multiplier}) at its own multiplier, in the baselines' order, as one frame: the P95
    each rests on chosen once, however many multipliers (the What-if page's chosen presets).
    Task types not in ``multipliers`` are left out. Raises ValueError as ``recommended_presets``."""
    base, methods, shares, bounds, km_p95 = _chosen_p95(baselines_df, censoring_df, method)
    rows = []
    for i, (_, row) in enumerate(base.iterrows()):
        task_type = None if pd.isna(row["task_type"]) else row["task_type"]
        if task_type not in multipliers:
            continue
        multiplier = multipliers[task_type]
        _check_multiplier(multiplier)
        out = {"task_type": row["task_type"], "n": int(row["n"]), "low_sample": bool(row["low_sample"])}
        for key, (metric, _rounding) in PRESET_RULES.items():
            out[key] = preset_limit(key, scalar(row.get(f"p95_{metric}")), multiplier)
        out.update(
            method=methods[i],
            censored_share=shares[i],
            lower_bound_keys=bounds[i],
            km_p95_total_tokens=km_p95[i],
            multiplier=float(multiplier),
        )
        rows.append(out)
    columns = ["task_type", "n", "low_sample", *PRESET_RULES]
    columns += ["method", "censored_share", "lower_bound_keys", "km_p95_total_tokens", "multiplier"]
    return pd.DataFrame(rows, columns=columns).astype({k: object for k in PRESET_RULES})


def preset_grid(
    baselines_df: pd.DataFrame,
    censoring_df: pd.DataFrame | None,
    multipliers: Sequence[float],
    method: str = "auto",
) -> list[dict[Any, dict[str, float]]]:
    """The limits of ``recommended_presets`` at each of ``multipliers``, without a frame per
    multiplier (the trade-off curve's 21): per multiplier, {task_type: {key: limit}} with the
    keys whose limit is set (as float, as ``whatif.Budget.from_presets`` reads the frame). The
    P95 each rests on is chosen once (``method``). Raises ValueError as ``recommended_presets``."""
    base, *_ = _chosen_p95(baselines_df, censoring_df, method)
    p95s = [
        (
            row["task_type"],
            {key: scalar(row.get(f"p95_{metric}")) for key, (metric, _r) in PRESET_RULES.items()},
        )
        for _, row in base.iterrows()
    ]
    grid = []
    for multiplier in multipliers:
        _check_multiplier(multiplier)
        limits: dict[Any, dict[str, float]] = {}
        for task_type, values in p95s:
            entry = {}
            for key, p95 in values.items():
                limit = preset_limit(key, p95, multiplier)
                if limit is not None:
                    entry[key] = float(limit)
            limits[None if pd.isna(task_type) else task_type] = entry
        grid.append(limits)
    return grid


def _chosen_p95(baselines_df: pd.DataFrame, censoring_df: pd.DataFrame | None, method: str):
    """The baselines with each task type's P95 as ``method`` chooses it (the Kaplan–Meier one
    where it applies), and per task type: method, censored share, lower-bound keys, KM P95 of
    total tokens. Raises ValueError for a method not in ``METHODS``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    base = baselines_df.copy()
    censoring = {}
    if censoring_df is not None:
        censoring = {row["task_type"]: row for _, row in censoring_df.iterrows()}
    methods, shares, bounds, km_p95 = [], [], [], []
    for index, row in base.iterrows():
        km = censoring.get(row["task_type"])
        use_km = km is not None and (
            method == METHOD_CENSORING_AWARE or (method == "auto" and bool(km["material"]))
        )
        lower: list[str] = []
        if use_km and km is not None:
            for key, (metric, _rounding) in PRESET_RULES.items():
                value = scalar(km[f"km_p95_{metric}"])
                if value is None:
                    continue
                base.at[index, f"p95_{metric}"] = value
                if bool(km[f"km_p95_{metric}_lower_bound"]):
                    lower.append(key)
        km_p95.append(scalar(km["km_p95_total_tokens"]) if km is not None else None)
        methods.append(METHOD_CENSORING_AWARE if use_km else METHOD_PLAIN)
        shares.append(float(km["censored_share"]) if km is not None else 0.0)
        bounds.append(lower)
    return base, methods, shares, bounds, km_p95


def preset_changes(presets_df: pd.DataFrame, current_df: pd.DataFrame) -> pd.DataFrame:
    """Compare recommended presets with the current limits, one row per task type and key.

    ``current_df`` is ``budgetlens.analysis.views.current_limits``. Columns: task_type, key (a preset
    key such as ``max_total_tokens``), current (None when the runs had no such limit),
    recommended, change_pct ((recommended - current) / current x 100; None when either side is
    missing). Pure.
    """
    current = {row["task_type"]: row for _, row in current_df.iterrows()}
    rows = []
    for _, preset in presets_df.iterrows():
        limits = current.get(preset["task_type"])
        for key in LIMIT_KEYS:
            recommended = scalar(preset.get(key))
            now = scalar(limits.get(LIMIT_COLUMNS[key])) if limits is not None else None
            change = None
            if recommended is not None and now not in (None, 0):
                change = (float(recommended) - float(now)) / float(now) * 100.0
            rows.append(
                {
                    "task_type": preset["task_type"],
                    "key": key,
                    "current": now,
                    "recommended": recommended,
                    "change_pct": change,
                }
            )
    columns = ["task_type", "key", "current", "recommended", "change_pct"]
    return pd.DataFrame(rows, columns=columns)
