"""The evidence read in two halves side by side (issue 25: ``evidence_arrays.read_arrays`` on a
read-only file runs ``CENSORING_ARRAYS_TEXT`` and ``_NUMBERS`` on two cursors) gives the same
arrays, and so the same baselines, as the one statement ``CENSORING_ARRAYS`` (read where the
connection may write); on a store of several row groups, which DuckDB scans in parallel."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from budgetlens.analysis import censoring, evidence_arrays
from budgetlens.analysis.filters import Filters
from budgetlens.store import read_connection, write_connection

#: Runs of several row groups (DuckDB's are 122,880 rows): budget stops, unpriced and unknown
#: usage, NULL metrics and task types, ties and distinct durations.
_RUNS = """
INSERT INTO runs BY NAME
SELECT 'r-' || i AS run_id,
       CASE WHEN i % 11 = 0 THEN NULL ELSE ['a', 'b', 'c'][1 + i % 3] END AS task_type,
       TIMESTAMP '2026-11-01' + to_microseconds(i * 1000) AS start_utc,
       CASE WHEN i % 97 = 0 THEN NULL ELSE (i * 7919) % 50000 END AS total_tokens,
       (i * 31) % 40000 AS input_tokens, (i * 17) % 9000 AS output_tokens,
       CAST(i % 19 AS INTEGER) AS turns, CAST(i % 7 AS INTEGER) AS tool_calls,
       ((i * 2654435761) % 1000003) / 1000.0 AS duration_s,
       CASE WHEN i % 13 = 0 THEN NULL ELSE ((i * 7919) % 50000) * 2.5e-6 END AS cost_usd,
       CASE WHEN i % 29 = 0 THEN 1 ELSE 0 END AS unpriced_calls,
       CASE WHEN i % 31 = 0 THEN 'unknown' ELSE 'reported' END AS usage_status,
       CASE WHEN i % 9 = 0 THEN 'budget_tokens' WHEN i % 9 = 1 THEN 'failed' ELSE 'completed' END
           AS stop_reason
FROM range(300000) t(i)
"""


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("halves") / "runs.duckdb"
    with write_connection(path) as conn:
        conn.execute(_RUNS)
    return path


def _filters() -> list[Filters]:
    return [
        Filters(),
        Filters(start_utc=dt.datetime(2026, 11, 1, 0, 1), end_utc=dt.datetime(2026, 11, 1, 0, 4)),
        Filters(task_types=("b",)),
    ]


def test_the_two_halves_side_by_side_equal_the_one_statement(big_store):
    for f in _filters():
        with read_connection(big_store) as conn:
            assert evidence_arrays._side_by_side(conn)
            halves = evidence_arrays.read_arrays(conn, f)
            frames = censoring.baselines_evidence(conn, f)
        with write_connection(big_store) as conn:  # may write: the one statement
            assert not evidence_arrays._side_by_side(conn)
            whole = evidence_arrays.read_arrays(conn, f)
            expected = censoring.baselines_evidence(conn, f)
        assert halves.groups == whole.groups and halves.runs == whole.runs
        assert halves.censored_runs == whole.censored_runs
        assert halves.cost_known_runs == whole.cost_known_runs
        assert halves.values.keys() == whole.values.keys()
        for key, got in halves.values.items():
            np.testing.assert_array_equal(got.ordered, whole.values[key].ordered)
            np.testing.assert_array_equal(got.censored, whole.values[key].censored)
        for got, want in zip(frames, expected, strict=True):
            pd.testing.assert_frame_equal(got, want, check_exact=True)
