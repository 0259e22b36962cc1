"""Read one task type's limits from a preset file (the format in :mod:`collector.preset_format`).

Used by ``RunBudget.from_preset``. The file is what ``budgetlens presets`` writes: YAML, TOML or
JSON by extension (TOML through ``tomllib``). Unknown keys are rejected with their names, so a
typo or a foreign unit (``max_duration_ms``, ``max_cost_eur``) never silently drops a limit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from collector.docfile import load_document

from collector.limits import WHOLE_NUMBER_LIMITS, check_limit
from collector.preset_format import (
    FORMAT_KEY,
    FORMAT_VERSION,
    LIMIT_KEYS,
    PRESET_KEYS,
    TOP_LEVEL_KEYS,
)

__all__ = ["load_preset", "read_preset_document"]


def read_preset_document(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and validate a preset file. Returns the document (dict).

    Raises ValueError naming unknown top-level or preset keys, a wrong format version, an
    unsupported extension, or a limit that ``RunBudget`` would refuse (not a number >= 0, or not
    a whole number for token and call counts; :func:`collector.limits.check_limit`).
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
    return doc


def load_preset(task_type: str, path: str | os.PathLike) -> dict[str, Any]:
    """The limits of ``task_type`` as ``RunBudget`` keyword arguments (``basis`` dropped).

    Raises KeyError naming the task type and the ones available; ValueError as
    :func:`read_preset_document`, and for a preset that sets no limit (a guard built from it would
    silently fall back to the 64,000-token default).
    """
    presets = read_preset_document(path)["presets"]
    if task_type not in presets:
        raise KeyError(f"no preset for task type {task_type!r} in {path}; available: {sorted(presets)}")
    preset = presets[task_type]
    limits = {k: preset[k] for k in LIMIT_KEYS if preset.get(k) is not None}
    if not limits:
        raise ValueError(f"{path}: presets.{task_type} sets no limit; a preset sets at least one "
                         f"of {LIMIT_KEYS}")
    for key in WHOLE_NUMBER_LIMITS:  # checked whole by read_preset_document: 91000.0 -> 91000
        if key in limits:
            limits[key] = int(limits[key])
    return limits
