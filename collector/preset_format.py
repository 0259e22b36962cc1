"""The preset file format shared by ``budgetlens presets`` (writer) and ``RunBudget.from_preset``
(reader). The same document is written as YAML, TOML or JSON; keys whose value is unknown are
omitted (TOML has no null).

Shape::

    budgetlens_presets: 1                 # format version (int)
    generated_utc: "2026-11-29T10:00:00Z"
    multiplier: 1.5                       # preset = P95 x multiplier, rounded up
    window_days: 14
    presets:
      code_generation:                    # task type
        max_total_tokens: 91000           # tokens, rounded up to the next 1,000
        max_input_tokens: 80000
        max_output_tokens: 12000
        max_turns: 31                     # counts rounded up to the next integer
        max_tool_calls: 45
        max_duration_s: 305               # seconds rounded up to the next 5
        max_cost_usd: 1.7                 # USD, rounded up to 2 significant figures
        basis:                            # the evidence; ignored by the guard
          n_runs: 212
          low_sample: false               # true below 20 runs
          p50_total_tokens: 38211.5
          p95_total_tokens: 60400.0
"""

from __future__ import annotations

FORMAT_KEY = "budgetlens_presets"
FORMAT_VERSION = 1
TOP_LEVEL_KEYS = (FORMAT_KEY, "generated_utc", "multiplier", "window_days", "presets")

#: Limit keys of one preset, in the guard's constructor argument names (units in the names).
LIMIT_KEYS = (
    "max_total_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "max_turns",
    "max_tool_calls",
    "max_duration_s",
    "max_cost_usd",
)
BASIS_KEY = "basis"
PRESET_KEYS = LIMIT_KEYS + (BASIS_KEY,)
