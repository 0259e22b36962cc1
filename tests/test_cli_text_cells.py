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


def test_count_columns_print_as_integers_with_blanks_even_once_one_value_is_missing():
    # a run without a tool-call count makes pandas store tool_calls (and turns) as float
    frame = pd.DataFrame(
        {
            "run_id": ["r1", "r2", "r3"],
            "turns": [3.0, None, 12.0],
            "tool_calls": [0.0, 1234.0, None],
            "total_tokens": [1200.0, None, 900.0],
            "p50_turns": [2.5, 3.0, 1.0],  # an interpolated percentile keeps its decimals
        }
    )
    out = io.StringIO()
    write_frame(frame, "table", out=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["run_id", "turns", "tool_calls", "total_tokens", "p50_turns"]
    assert lines[1].split() == ["r1", "3", "0", "1,200", "2.50"]
    assert lines[2].split() == ["r2", "1,234", "3.00"]
    assert lines[3].split() == ["r3", "12", "900", "1.00"]
    assert "0.00" not in lines[1] and ".0 " not in out.getvalue()
    for fmt in ("json", "csv"):
        out = io.StringIO()
        write_frame(frame, fmt, out=out)
        if fmt == "json":
            rows = json.loads(out.getvalue())
            assert [r["tool_calls"] for r in rows] == [0, 1234, None]
            assert [r["turns"] for r in rows] == [3, None, 12]
        else:
            assert out.getvalue().splitlines()[1].startswith("r1,3,0,")


def test_a_nullable_integer_count_prints_blank_not_na():
    # an imported run without a tool-call count comes out of DuckDB as pandas' nullable Int64
    # (new-user report: `budgetlens runs` showed <NA> where every other empty cell is blank)
    frame = pd.DataFrame(
        {
            "run_id": ["r1", "r2"],
            "tool_calls": pd.array([1234, None], dtype="Int64"),
            "turns": pd.array([None, 7], dtype="Int64"),
        }
    )
    out = io.StringIO()
    write_frame(frame, "table", out=out)
    lines = out.getvalue().splitlines()
    assert "<NA>" not in out.getvalue()
    assert lines[1].split() == ["r1", "1,234"] and lines[2].split() == ["r2", "7"]
    out = io.StringIO()
    write_frame(frame, "json", out=out)
    assert json.loads(out.getvalue())[1]["tool_calls"] is None
