"""The CLI's table (``write_frame``): a missing text value (no team, no quality flag) prints as an
empty cell, never ``None`` (issue 24, item 10); JSON keeps it null."""

from __future__ import annotations

import io
import json

import pandas as pd

from budgetlens.cli._analysis import write_frame


def test_missing_text_prints_empty_not_none():
    frame = pd.DataFrame({"run_id": ["r1", "r2"], "team": [None, "infra"], "quality": [None, "future_time"]})
    out = io.StringIO()
    write_frame(frame, "table", out=out)
    assert "None" not in out.getvalue()
    assert "future_time" in out.getvalue() and "infra" in out.getvalue()
    out = io.StringIO()
    write_frame(frame, "json", out=out)
    assert json.loads(out.getvalue())[0]["quality"] is None
