"""Runaway runs and drift on hand-made stores, values counted by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from budgetlens.analysis import drift, runaways
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 11, 2, 12, 0, 0)


def _run(run_id, i, total_tokens, cost_usd, task_type="qa", start=None):
    return dict(
        run_id=run_id,
        source="test",
        task_type=task_type,
        start_utc=start or T0 + dt.timedelta(minutes=i),
        total_tokens=total_tokens,
        cost_usd=cost_usd,
        stop_reason="completed",
        usage_status="reported",
    )


@pytest.fixture
def runaway_store(db_path):
    records = [_run(f"n{i:02d}", i, 1000, 0.01) for i in range(19)]
    records.append(_run("loop", 30, 1000, 0.01))  # 10 x the same tool in a row
    records.append(_run("big", 31, 10_000, 1.0))  # 10 x the P95 of 1,000
    tools = ["search"] * 10 + ["read"]
    events = [
        dict(
            event_id=f"loop.t{k}",
            run_id="loop",
            ts_utc=T0 + dt.timedelta(minutes=30, seconds=k),
            name="budgetlens.tool_call",
            tool_name=name,
        )
        for k, name in enumerate(tools)
    ]
    # another run calls "search" 9 times, with "read" in between: no loop of 10
    events += [
        dict(
            event_id=f"n00.t{k}",
            run_id="n00",
            ts_utc=T0 + dt.timedelta(seconds=k),
            name="budgetlens.tool_call",
            tool_name="read" if k == 5 else "search",
        )
        for k in range(10)
    ]
    with write_connection(db_path) as conn:
        write_batch(conn, (), records, events)
    return db_path


def test_runaways_are_the_run_above_3x_p95_and_the_tool_loop(runaway_store):
    with read_connection(runaway_store) as conn:
        found = runaways.runaways(conn, Filters())
    rows = found.runs.set_index("run_id")
    # P95 of twenty 1,000s and one 10,000: rank 0.95 x 20 = 19 -> 1,000
    assert sorted(rows.index) == ["big", "loop"]
    assert bool(rows.loc["big", "over_p95"]) and rows.loc["big", "tokens_ratio"] == pytest.approx(10.0)
    assert bool(rows.loc["loop", "tool_loop"]) and rows.loc["loop", "longest_repeat"] == 10
    assert rows.loc["loop", "repeated_tool"] == "search"
    assert (found.count, found.total_runs) == (2, 21)
    assert found.cost_usd == pytest.approx(1.01)
    assert found.cost_share == pytest.approx(1.01 / (20 * 0.01 + 1.0))


def test_runaway_thresholds_are_configurable_and_checked(runaway_store):
    with read_connection(runaway_store) as conn:
        assert runaways.runaways(conn, Filters(), k=20, repeats=11).count == 0
        with pytest.raises(ValueError, match="k must"):
            runaways.runaways(conn, Filters(), k=0)
        with pytest.raises(ValueError, match="repeats"):
            runaways.runaways(conn, Filters(), repeats=1)


def test_drift_flags_a_p95_that_moved_more_than_25_percent(store_path):
    end = dt.datetime(2026, 11, 30)
    records = []
    for week, (qa, code) in enumerate(((1000, 5000), (2000, 5500))):  # previous week, this week
        for i in range(6):
            start = end - dt.timedelta(days=13 - 7 * week, hours=i)
            records.append(_run(f"qa-{week}-{i}", i, qa, None, "qa", start))
            records.append(_run(f"code-{week}-{i}", i, code, None, "code", start))
    with write_connection(store_path) as conn:
        write_batch(conn, (), records, ())
    with read_connection(store_path) as conn:
        frame = drift.drift(conn, Filters(end_utc=end)).set_index("task_type")
    assert frame.loc["qa", "change_total_tokens"] == pytest.approx(1.0)  # 1,000 -> 2,000
    assert bool(frame.loc["qa", "drifted"])
    assert frame.loc["code", "change_total_tokens"] == pytest.approx(0.1)  # 5,000 -> 5,500
    assert not bool(frame.loc["code", "drifted"])
    assert (frame.loc["qa", "n_recent"], frame.loc["qa", "n_previous"]) == (6, 6)
