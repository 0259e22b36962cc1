"""Names the CLI, the dashboard and the analysis share, defined once (no pandas or DuckDB import,
so the CLI's argument parser stays light): the preset multiplier, the preset document formats and
the headline baseline columns."""

from __future__ import annotations

__all__ = ["BASELINE_HEADLINE_COLUMNS", "BASIS_COLUMNS", "DEFAULT_MULTIPLIER", "FORMATS"]

#: Preset = P95 x this unless told otherwise (design §6).
DEFAULT_MULTIPLIER = 1.5

#: Preset document formats and their file suffixes (the CLI's --format and the dashboard's
#: downloads; ``budgetlens.analysis.preset_export.render``).
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

#: The headline columns of a baseline table, in order: the CLI's table format and the first
#: columns of the dashboard's Baselines table (json and csv carry every column).
BASELINE_HEADLINE_COLUMNS = (
    "task_type",
    "model",
    "n",
    "low_sample",
    *BASIS_COLUMNS[:-1],
    "n_cost",
    BASIS_COLUMNS[-1],
)
