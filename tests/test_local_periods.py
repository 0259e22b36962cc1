"""Local day and hour buckets counted directly when the window's zone keeps one offset (issue 25,
``analysis.local_periods``) equal the statements that count 15-minute UTC buckets and convert
them (the reference), for every period and key, in zones with and without a change inside the
window; a window with a change is left to the reference."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from budgetlens.analysis import local_periods, rollup_queries
from budgetlens.analysis import queries as q
from budgetlens.analysis import views as analysis
from budgetlens.analysis.filters import run_query
from budgetlens.analysis.spend_queries import for_store
from budgetlens.sample.generator import write_sample
from budgetlens.store import read_connection

#: The sample's end: two weeks after the European autumn change and the US one (no change
#: inside a window of the last ten days), three weeks before any other.
_END = dt.datetime(2026, 11, 18, 12, 0)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("periods") / "store.duckdb"
    write_sample(path, days=28, seed=6, runs_per_day=30, end_utc=_END)  # from before the change
    return path


def _windows() -> list[analysis.Filters]:
    recent = _END - dt.timedelta(days=10)
    return [
        analysis.Filters(start_utc=recent, end_utc=_END, tz=tz)
        for tz in ("UTC", "Europe/Berlin", "Asia/Kolkata", "America/St_Johns", "Australia/Eucla")
    ] + [
        analysis.Filters(tz="Europe/Berlin"),  # the whole store: over the October change
        analysis.Filters(start_utc=recent, tz="America/New_York", task_types=("research",)),
    ]


def _statements(conn) -> list[tuple[str, str]]:
    """(statement as the views read it before the rewrite, period)."""
    out = [(q.HIT_RATE_DAILY, "day"), (q.HIT_RATE_HOURLY, "hour")]
    for statement in (q.COST_BY_PERIOD_TASK, rollup_queries.COST_BY_PERIOD_MODEL):
        out += [(for_store(conn, statement), period) for period in analysis.PERIODS]
    return out


def test_counting_local_days_and_hours_directly_equals_converting_utc_buckets(sample):
    rewritten = 0
    with read_connection(sample) as conn:
        statements = _statements(conn)
        for f in _windows():
            for statement, period in statements:
                fast, bucket = local_periods.for_window(conn, statement, f, period)
                params = {**f.params(), "period": period}
                expected = run_query(conn, statement, params)
                assert len(expected) > 0
                pd.testing.assert_frame_equal(run_query(conn, fast, {**params, **bucket}), expected)
                rewritten += fast != statement
    assert rewritten >= 5 * len(statements)  # the fixed-offset windows took the fast form


def test_a_window_over_an_offset_change_keeps_the_utc_buckets(sample):
    with read_connection(sample) as conn:
        whole = analysis.Filters(tz="Europe/Berlin")
        assert local_periods.fixed_offset_us(conn, whole) is None
        assert local_periods.for_window(conn, q.HIT_RATE_DAILY, whole, "day") == (q.HIT_RATE_DAILY, {})
        assert local_periods.fixed_offset_us(conn, analysis.Filters()) == 0
        kolkata = analysis.Filters(start_utc=_END - dt.timedelta(days=3), end_utc=_END, tz="Asia/Kolkata")
        assert local_periods.fixed_offset_us(conn, kolkata) == (5 * 3600 + 1800) * 1_000_000
        before_1970 = analysis.Filters(start_utc=dt.datetime(1969, 12, 1), end_utc=_END)
        assert local_periods.fixed_offset_us(conn, before_1970) is None


def test_the_page_functions_read_the_same_rows_either_way(sample):
    with read_connection(sample) as conn:
        for f in _windows():
            for period in ("day", "hour"):
                expected = run_query(
                    conn, q.HIT_RATE_HOURLY if period == "hour" else q.HIT_RATE_DAILY, f.params()
                )
                got = analysis.hit_rate_daily(conn, f, period)
                assert len(got) == len(expected)
                assert got["budgeted_runs"].tolist() == expected["budgeted_runs"].tolist()
            for by in ("model", "task_type"):
                statement = rollup_queries.COST_BY_PERIOD_MODEL if by == "model" else q.COST_BY_PERIOD_TASK
                expected = run_query(conn, for_store(conn, statement), {**f.params(), "period": "week"})
                pd.testing.assert_frame_equal(analysis.cost_by_period(conn, f, "week", by), expected)
    with pytest.raises(ValueError, match="bucket"):
        local_periods.for_window(None, q.STOP_REASONS, analysis.Filters(), "day")
