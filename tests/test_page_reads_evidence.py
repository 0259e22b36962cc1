"""The one-pass forms of the Overview's reads (issue 25) equal their references: the headline
figures and the per-task rows in one statement (``queries.OVERVIEW``, grouping sets) equal the two
statements read before; the runaways picked before their tool streaks are joined equal the
statement that joined every run's streaks first. On a generated sample plus a parent with
children (spend counted once), a tool loop and a run over its task type's P95."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis import queries as q
from budgetlens.analysis import runaways as runaway_analysis
from budgetlens.analysis import views as analysis
from budgetlens.analysis.filters import run_query
from budgetlens.analysis.spend_queries import SPEND
from budgetlens.sample.generator import default_end_utc, write_sample
from budgetlens.store import read_connection, write_batch, write_connection

#: The reference of ``OVERVIEW``'s total row: the statement the Overview read before issue 25.
_OVERVIEW_TOTALS = f"""
WITH {q.FILTERED},
{SPEND}
SELECT
    count(*) AS runs,
    {q._RATES},
    {q._TOKEN_PARTS},
    sum(own_cost_usd) AS cost_usd,
    count(cost_usd) AS priced_runs,
    count(*) FILTER (WHERE cost_usd IS NOT NULL AND NOT {q.COST_KNOWN}) AS partially_priced_runs,
    CAST(coalesce(sum(unpriced_calls), 0) AS BIGINT) AS unpriced_calls,
    count(*) FILTER (WHERE usage_status = 'unknown') AS unknown_usage_runs,
    count(*) FILTER (WHERE quality IS NOT NULL) AS flagged_runs,
    quantile_cont(total_tokens, 0.95) AS p95_total_tokens,
    coalesce(sum(tool_cost_usd), 0.0) AS tool_cost_usd
FROM spend
"""

#: The reference of ``RUNAWAYS``: every filtered run joined with its tool streaks, then filtered
#: (the statement before issue 25, with its tie-break between equally long streaks).
_RUNAWAYS_JOINED = f"""
WITH {q.FILTERED},
{SPEND},
p95 AS (
    SELECT task_type, quantile_cont(total_tokens, 0.95) AS p95_total_tokens
    FROM filtered GROUP BY task_type
),
tools AS (
    SELECT e.run_id, e.tool_name, e.ts_utc, e.event_id,
           row_number() OVER (PARTITION BY e.run_id ORDER BY e.ts_utc, e.event_id)
         - row_number() OVER (PARTITION BY e.run_id, e.tool_name ORDER BY e.ts_utc, e.event_id)
               AS streak
    FROM budget_events e JOIN filtered f ON f.run_id = e.run_id
    WHERE e.name = 'budgetlens.tool_call' AND e.tool_name IS NOT NULL
),
streaks AS (
    SELECT run_id, arg_max(tool_name, (n, tool_name)) AS repeated_tool, max(n) AS longest_repeat
    FROM (SELECT run_id, tool_name, streak, count(*) AS n FROM tools GROUP BY ALL)
    GROUP BY run_id
)
SELECT f.run_id, f.task_type, f.start_utc, f.total_tokens, f.cost_usd, f.stop_reason,
       p.p95_total_tokens,
       f.total_tokens / nullif(p.p95_total_tokens, 0) AS tokens_ratio,
       coalesce(s.longest_repeat, 0) AS longest_repeat,
       s.repeated_tool,
       coalesce(f.total_tokens > $k * p.p95_total_tokens, false) AS over_p95,
       coalesce(s.longest_repeat >= $repeats, false) AS tool_loop,
       f.own_cost_usd
FROM spend f
JOIN p95 p ON p.task_type IS NOT DISTINCT FROM f.task_type
LEFT JOIN streaks s ON s.run_id = f.run_id
WHERE f.total_tokens > $k * p.p95_total_tokens OR s.longest_repeat >= $repeats
ORDER BY f.total_tokens DESC NULLS LAST, f.run_id
"""


def _record(run_id: str, start: dt.datetime, total_tokens: int, cost_usd: float, **fields) -> dict:
    row = dict(
        run_id=run_id,
        source="test",
        task_type="lead",
        start_utc=start,
        total_tokens=total_tokens,
        input_tokens=total_tokens - 100,
        output_tokens=100,
        cost_usd=cost_usd,
        stop_reason="completed",
        usage_status="reported",
        retryable=False,
    )
    row.update(fields)
    return row


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("evidence") / "store.duckdb"
    end = default_end_utc()
    write_sample(path, days=7, seed=3, runs_per_day=40, end_utc=end)
    start = end - dt.timedelta(days=2)
    records = [  # a parent whose stored totals include its two children's; a run 30x the rest
        _record("parent", start, 9_000, 0.09, limit_total_tokens=50_000),
        _record("child-1", start, 4_000, 0.04, task_type="research", parent_run_id="parent"),
        _record("child-2", start, 3_000, 0.03, task_type="research", parent_run_id="parent"),
        *(_record(f"lead-{i}", start + dt.timedelta(minutes=i), 1_000, 0.01) for i in range(20)),
        _record("huge", start, 300_000, 3.0, stop_reason="budget_tokens", limit_total_tokens=300_000),
    ]
    tools = ["search"] * 12 + ["read", "search"]
    events = [
        dict(
            event_id=f"lead-3.t{k}",
            run_id="lead-3",
            ts_utc=start + dt.timedelta(minutes=3, seconds=k),
            name="budgetlens.tool_call",
            tool_name=tool,
        )
        for k, tool in enumerate(tools)
    ]
    with write_connection(path) as conn:
        write_batch(conn, [], records, events)
    return path


def _windows(path) -> list[analysis.Filters]:
    with read_connection(path) as conn:
        first, last, _ = analysis.data_extent(conn)
    end = last + dt.timedelta(microseconds=1)
    return [
        analysis.Filters(start_utc=first, end_utc=end),
        analysis.Filters(start_utc=end - dt.timedelta(days=2), end_utc=end, tz="Europe/Berlin"),
        analysis.Filters(task_types=("lead", "research")),
        analysis.Filters(start_utc=end, end_utc=end + dt.timedelta(days=1)),  # no run
    ]


def test_the_overview_in_one_pass_equals_its_totals_and_per_task_statements(store):
    with read_connection(store) as conn:
        for f in _windows(store):
            frame = run_query(conn, q.OVERVIEW, f.params())
            total = frame[frame["is_total"]].drop(columns=["is_total", "task_type"]).reset_index(drop=True)
            expected_total = run_query(conn, _OVERVIEW_TOTALS, f.params())
            pd.testing.assert_frame_equal(total[expected_total.columns], expected_total, check_dtype=False)
            per_task = frame[~frame["is_total"]].reset_index(drop=True)
            expected = run_query(conn, q.OVERVIEW_PER_TASK, f.params())
            pd.testing.assert_frame_equal(per_task[expected.columns], expected, check_dtype=False)
            ov = analysis.overview(conn, f)
            assert ov.runs == int(expected_total["runs"].iloc[0])
            pd.testing.assert_frame_equal(ov.per_task, expected[list(ov.per_task.columns)], check_dtype=False)
    with read_connection(store) as conn:  # the store has what the comparison must cover
        whole = analysis.overview(conn, _windows(store)[0])
    assert whole.runs > 200 and len(whole.per_task) >= 3 and whole.budgeted_runs > 0


def test_runaways_picked_before_their_streaks_equal_every_run_joined_first(store):
    for f in _windows(store):
        for k, repeats in ((3.0, 10), (1.5, 3), (100.0, 2)):
            params = {**f.params(), "k": k, "repeats": repeats}
            with read_connection(store) as conn:
                expected = run_query(conn, _RUNAWAYS_JOINED, params)
                got = run_query(conn, eq.RUNAWAYS, params)
            pd.testing.assert_frame_equal(got, expected)
    with read_connection(store) as conn:
        found = runaway_analysis.runaways(conn, analysis.Filters(), k=3.0, repeats=10)
    assert {"huge", "lead-3"} <= set(found.runs["run_id"])  # both kinds are in the comparison
