"""The dashboard's one display rule for tables (``_tables.display_frame``), item 10 of issue 24:
a missing cost of a run whose usage is unknown reads "unknown usage", not "unpriced"; quality
flags read empty when there are none, never "None"."""

from __future__ import annotations

import pandas as pd

from budgetlens.dashboard.app_pages import _tables


def test_a_missing_cost_reads_unknown_usage_when_the_usage_is_unknown():
    frame = pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "cost_usd": [0.0042, None, None],
            "usage_status": ["reported", "unknown", "reported"],
        }
    )
    shown, _ = _tables.display_frame(frame)
    assert list(shown["cost_usd"]) == ["$0.0042", _tables.UNKNOWN_USAGE, "unpriced"]


def test_quality_flags_read_empty_when_none():
    frame = pd.DataFrame({"quality": [None, "time_repaired", ""]})
    shown, config = _tables.display_frame(frame)
    assert list(shown["quality"]) == ["", "time_repaired", ""]
    assert "quality" in config
