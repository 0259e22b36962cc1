"""The preset file: its format, its reader (``RunBudget.from_preset``) and the document the
writer (``budgetlens presets``, the dashboard's downloads) fills. The same document is written as YAML, TOML or JSON; keys whose value is unknown are
omitted (TOML has no null).

Shape::

    budgetlens_presets: 1                 # format version (int)
    generated_utc: "2026-11-29T10:00:00Z"
    multiplier: 1.5                       # preset = P95 x multiplier, rounded up
    window_days: 14
    basis:                                # where the presets came from; ignored by the guard
      filters: {task_types: [], models: [], services: []}
      start_utc: "2026-11-15T10:00:00Z"
      end_utc: "2026-11-29T10:00:00Z"
      method: auto                        # plain, kaplan-meier, or auto (KM where censoring > 5 %)
      target_hit_rate: 0.05               # when the multiplier was chosen for a target
    presets:
      code_generation:                    # task type
        max_total_tokens: 91000           # tokens, rounded up to the next 1,000
        max_input_tokens: 80000
        max_output_tokens: 12000
        max_turns: 31                     # counts rounded up to the next integer
        max_tool_calls: 45
        max_duration_s: 305               # seconds rounded up to the next 5
        max_cost_usd: 1.7                 # USD, rounded up to 2 significant figures
        warn_at: 0.7                      # optional thresholds of this task type (fractions)
        downgrade_at: 0.5
        summarize_at: 0.9
        wrap_up_tokens: 4000              # optional wrap-up slice kept for one final call
        wrap_up_usd: 0.05
        alert_limits:                     # optional: alert once, never stop (research agents)
          max_total_tokens: 2000000
        basis:                            # the evidence; ignored by the guard
          n_runs: 212
          low_sample: false               # true below 20 runs
          p50_total_tokens: 38211.5
          p95_total_tokens: 60400.0
          method: kaplan-meier            # plain or kaplan-meier (censoring-aware)
          censored_share: 0.19            # runs stopped by the old budget
          projected_hit_rate: 0.048       # share of the window's runs this preset would stop
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS
from budgetlens.config import load_document
from budgetlens.limits import LIMIT_KEYS, WHOLE_NUMBER_LIMITS, check_fraction, check_limit

logger = logging.getLogger(__name__)

FORMAT_KEY = "budgetlens_presets"
FORMAT_VERSION = 1
#: ``basis`` (top level): where the presets came from (filters, date range, method, target hit
#: rate); ignored by the guard, like each preset's ``basis``.
TOP_LEVEL_KEYS = (FORMAT_KEY, "generated_utc", "multiplier", "window_days", "basis", "presets")

BASIS_KEY = "basis"
#: Per-task-type thresholds a preset may carry (fractions in (0, 1], as ``RunBudget`` takes them).
THRESHOLD_KEYS = ("warn_at", "downgrade_at", "summarize_at")
#: A preset's alert-only limits: limit name -> value; they alert and never stop.
ALERT_LIMITS_KEY = "alert_limits"
#: A preset's wrap-up slice (tokens, USD) kept for one final call (``budgetlens.guard.wrap_up``).
WRAP_UP_KEYS = ("wrap_up_tokens", "wrap_up_usd")
PRESET_KEYS = LIMIT_KEYS + THRESHOLD_KEYS + WRAP_UP_KEYS + (ALERT_LIMITS_KEY, BASIS_KEY)

__all__ = [
    "ALERT_LIMITS_KEY",
    "BASIS_KEY",
    "THRESHOLD_KEYS",
    "WRAP_UP_KEYS",
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "LIMIT_KEYS",
    "PRESET_KEYS",
    "TOP_LEVEL_KEYS",
    "load_preset",
    "read_preset_document",
]


def read_preset_document(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and validate a preset file. Returns the document (dict).

    Raises ValueError naming unknown top-level or preset keys, a wrong format version, an
    unsupported extension, or a limit that ``RunBudget`` would refuse (not a number >= 0, or not
    a whole number for token and call counts; :func:`budgetlens.limits.check_limit`).
    """
    p = Path(path)
    doc = load_document(p, "preset file")
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: a preset file is a mapping with keys {TOP_LEVEL_KEYS}")
    unknown = sorted(set(doc) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ValueError(f"{p}: unknown top-level key(s) {unknown}; allowed: {TOP_LEVEL_KEYS}")
    version = doc.get(FORMAT_KEY)
    if type(version) is not int or version != FORMAT_VERSION:  # not True, not 1.0
        raise ValueError(f"{p}: {FORMAT_KEY} must be the integer {FORMAT_VERSION}, got {version!r}")
    presets = doc.get("presets")
    if not isinstance(presets, dict):
        raise ValueError(f"{p}: 'presets' must be a mapping of task type -> limits")
    for task_type, preset in presets.items():
        if not isinstance(preset, dict):
            raise ValueError(f"{p}: presets.{task_type} must be a mapping of limits")
        bad = sorted(set(preset) - set(PRESET_KEYS))
        if bad:
            raise ValueError(
                f"{p}: presets.{task_type}: unknown key(s) {bad} (limits carry their unit in the "
                f"name); allowed: {PRESET_KEYS}"
            )
        for key in LIMIT_KEYS:
            check_limit(key, preset.get(key), label=f"{p}: presets.{task_type}.{key}")
        for key in THRESHOLD_KEYS:
            if key in preset:
                check_fraction(f"{p}: presets.{task_type}.{key}", preset[key])
        for key, unit_of in zip(WRAP_UP_KEYS, ("max_total_tokens", "max_cost_usd"), strict=True):
            check_limit(unit_of, preset.get(key), label=f"{p}: presets.{task_type}.{key}")
        alerts = preset.get(ALERT_LIMITS_KEY)
        if alerts is not None:
            if not isinstance(alerts, dict):
                raise ValueError(
                    f"{p}: presets.{task_type}.{ALERT_LIMITS_KEY} must be a mapping of limit -> value"
                )
            for key, value in alerts.items():
                if key not in LIMIT_KEYS:
                    raise ValueError(
                        f"{p}: presets.{task_type}.{ALERT_LIMITS_KEY}: unknown limit {key!r}; allowed: {LIMIT_KEYS}"
                    )
                check_limit(key, value, label=f"{p}: presets.{task_type}.{ALERT_LIMITS_KEY}.{key}")
    return doc


def load_preset(task_type: str, path: str | os.PathLike) -> dict[str, Any]:
    """The limits of ``task_type`` as ``RunBudget`` keyword arguments (``basis`` dropped), with
    the preset's thresholds (``warn_at``, ``downgrade_at``, ``summarize_at``) and
    ``alert_limits`` when it has them.

    Logs a warning (``budgetlens.guard.preset_file``) naming the task type and its number of runs
    when the preset's ``basis`` marks it low-sample (fewer than 20 runs: its P95 is a rough guess).

    Raises KeyError naming the task type and the ones available; ValueError as
    :func:`read_preset_document`, and for a preset that sets no limit (a guard built from it would
    silently fall back to the 64,000-token default).
    """
    presets = read_preset_document(path)["presets"]
    if task_type not in presets:
        raise KeyError(f"no preset for task type {task_type!r} in {path}; available: {sorted(presets)}")
    preset = presets[task_type]
    _warn_low_sample(task_type, preset.get(BASIS_KEY), path)
    limits = {k: preset[k] for k in LIMIT_KEYS if preset.get(k) is not None}
    alerts = {k: v for k, v in (preset.get(ALERT_LIMITS_KEY) or {}).items() if v is not None}
    if not limits and not alerts:
        raise ValueError(
            f"{path}: presets.{task_type} sets no limit; a preset sets at least one of {LIMIT_KEYS}"
            f" (or {ALERT_LIMITS_KEY})"
        )
    for key in WHOLE_NUMBER_LIMITS:  # checked whole by read_preset_document: 91000.0 -> 91000
        if key in limits:
            limits[key] = int(limits[key])
        if key in alerts:
            alerts[key] = int(alerts[key])
    options: dict[str, Any] = dict(limits)
    options.update({k: preset[k] for k in THRESHOLD_KEYS if k in preset})
    options.update({k: preset[k] for k in WRAP_UP_KEYS if preset.get(k) is not None})
    if "wrap_up_tokens" in options:
        options["wrap_up_tokens"] = int(options["wrap_up_tokens"])
    if alerts:
        options[ALERT_LIMITS_KEY] = alerts
    return options


def _warn_low_sample(task_type: str, basis: Any, path: str | os.PathLike) -> None:
    """Log once per load that ``task_type``'s preset rests on a low-sample basis."""
    if isinstance(basis, dict) and basis.get("low_sample") is True:
        logger.warning(
            "preset %r in %s is low-sample: it rests on %s runs (fewer than %d), so its P95 is a rough "
            "guess; collect more runs and export the presets again",
            task_type,
            path,
            basis.get("n_runs", "an unknown number of"),
            LOW_SAMPLE_RUNS,
        )
