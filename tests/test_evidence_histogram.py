"""The Baselines page's distribution of total tokens from the evidence read
(``censoring.baselines_evidence``, ``evidence_histogram``) equals ``views.token_distribution``'s
statement to the last bit: on a generated sample plus runs at and beside every bucket bound of
a few decades (10**(k/10) rounded down, up, and the exact powers of ten), zero and no total
tokens, and runs without a task type (stored as 'unknown'); for several buckets per decade and windows."""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
import pytest

from budgetlens.analysis import censoring
from budgetlens.analysis import views as analysis
from budgetlens.sample.generator import default_end_utc, write_sample
from budgetlens.store import read_connection, write_batch, write_connection


def _record(run_id: str, start: dt.datetime, total_tokens: int | None, task_type: str | None) -> dict:
    return dict(
        run_id=run_id,
        source="test",
        task_type=task_type,
        start_utc=start,
        total_tokens=total_tokens,
        stop_reason="completed",
        usage_status="reported" if total_tokens is not None else "unknown",
        retryable=False,
    )


def _edge_totals() -> set[int]:
    """1, 2, 9 .. 101 and every bound of 10 per decade from 10 to 10**6 with its neighbours."""
    totals = {1, 2, 9, 10, 11, 99, 100, 101}
    for k in range(10, 61):
        bound = 10 ** (k / 10)
        totals |= {math.floor(bound) - 1, math.floor(bound), math.ceil(bound), math.ceil(bound) + 1}
    return totals


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("histogram") / "store.duckdb"
    end = default_end_utc()
    write_sample(path, days=5, seed=11, runs_per_day=60, end_utc=end)
    start = end - dt.timedelta(days=1)
    totals = _edge_totals()
    records = [
        _record(f"edge-{index}", start + dt.timedelta(seconds=index), total, task)
        for index, (total, task) in enumerate(
            (total, task) for total in sorted(totals) for task in ("edge", None)
        )
    ]
    records += [
        _record("zero", start, 0, "edge"),
        _record("unknown", start, None, "edge"),
        *(_record(f"tie-{i}", start, 1_000, "edge") for i in range(30)),  # many at one bound
    ]
    with write_connection(path) as conn:
        write_batch(conn, [], records, [])
    return path


def test_the_distribution_from_the_evidence_read_equals_the_statement(store):
    with read_connection(store) as conn:
        first, last, _ = analysis.data_extent(conn)
        end = last + dt.timedelta(microseconds=1)
        windows = [
            analysis.Filters(start_utc=first, end_utc=end),
            analysis.Filters(start_utc=end - dt.timedelta(days=2), end_utc=end, tz="Europe/Berlin"),
            analysis.Filters(task_types=("edge",)),
            analysis.Filters(start_utc=end, end_utc=end + dt.timedelta(days=1)),  # no run
        ]
        for f in windows:
            plain, km = censoring.evidence_frames(conn, f)
            for per_decade in (10, 1, 3, 7, 100):
                got = censoring.baselines_evidence(conn, f, per_decade=per_decade)
                expected = analysis.token_distribution(conn, f, per_decade)
                pd.testing.assert_frame_equal(got[2], expected, check_exact=True)
                pd.testing.assert_frame_equal(got[0], plain, check_exact=True)
                pd.testing.assert_frame_equal(got[1], km, check_exact=True)
        full = censoring.baselines_evidence(conn, windows[0])[2]
    edge = full[full["task_type"] == "edge"]
    assert edge["runs"].sum() == len(_edge_totals()) + 30  # every run > 0 once; zero and NULL out
    assert (full["task_type"] == "unknown").any()  # stored for the runs without a task type
