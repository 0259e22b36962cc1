"""``run_queries.TOP_RUNS`` (the cost cut first, then the run table's columns) lists the same
rows as ``TOP_RUNS_REFERENCE`` (one sort of the filtered runs): ties at the cut, unpriced runs,
NaN and negative costs, filters and limits from 0 past the number of runs."""

from __future__ import annotations

import datetime as dt
import random

import pandas as pd
import pytest

from budgetlens.analysis import run_queries as runq
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.store import read_connection, write_connection

T0 = dt.datetime(2026, 11, 2)


@pytest.fixture
def runs_path(store_path):
    rng = random.Random(7)
    costs = [None, 0.0, -1.0, float("nan"), 0.5, 0.5, 0.5, 2.0, 2.0, 3.0]
    rows = [
        (f"r{i:03d}", rng.choice(["qa", "code"]), T0 + dt.timedelta(hours=i), rng.choice(costs))
        for i in range(120)
    ]
    with write_connection(store_path) as conn:
        conn.executemany(
            "INSERT INTO runs (run_id, task_type, start_utc, cost_usd, model_calls) VALUES (?, ?, ?, ?, 1)",
            rows,
        )
    return store_path


@pytest.mark.parametrize("limit", [0, 1, 3, 7, 20, 500])
def test_the_top_runs_in_two_steps_equal_one_sort(runs_path, limit):
    windows = [
        Filters(),
        Filters(task_types=("code",)),
        Filters(start_utc=T0 + dt.timedelta(hours=30), end_utc=T0 + dt.timedelta(hours=90)),
        Filters(task_types=("no-such-task",)),
    ]
    with read_connection(runs_path) as conn:
        for f in windows:
            params = {**f.params(), "limit": limit}
            expected = run_query(conn, runq.TOP_RUNS_REFERENCE, params)
            pd.testing.assert_frame_equal(run_query(conn, runq.TOP_RUNS, params), expected)
        priced = conn.execute("SELECT count(cost_usd) FROM runs").fetchone()[0]
        whole = run_query(conn, runq.TOP_RUNS, {**Filters().params(), "limit": limit})
        assert len(whole) == min(limit, priced)  # the window lists as many as it may
