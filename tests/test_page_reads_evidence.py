"""The one-pass forms of the Overview's reads (issue 25) equal their references: the headline
figures and the per-task rows in one statement (``queries.OVERVIEW``, grouping sets) equal the two
statements read before; the runaways picked before their tool streaks are joined equal the
statement that joined every run's streaks first. On a generated sample plus a parent with
children (spend counted once), a tool loop and a run over its task type's P95."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from _store_rows import call_row

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis import queries as q
from budgetlens.analysis import runaways as runaway_analysis
from budgetlens.analysis import views as analysis
from budgetlens.analysis.filters import run_query
from budgetlens.analysis.spend_queries import HAS_CHILD_RUNS, SPEND, SPEND_FLAT, for_store
from budgetlens.sample.generator import default_end_utc, write_sample
from budgetlens.store import read_connection, write_batch, write_connection

#: The references of the Overview's reads (the statements before issue 25's page work): the
#: rates and token parts with ``FILTER`` clauses, the totals and per-task rows as two statements.
_RATES_FILTERED = f"""
    count(stop_reason) AS finished_runs,
    count(*) FILTER (WHERE {q._IS_BUDGETED_FINISHED}) AS budgeted_runs,
    count(*) FILTER (WHERE {q.IS_BUDGET_STOP}) AS budget_stops,
    count(*) FILTER (WHERE {q._IS_BUDGETED_FINISHED} AND {q._IS_INTERVENTION}) AS interventions,
    budget_stops / nullif(budgeted_runs, 0) AS hit_rate,
    interventions / nullif(budgeted_runs, 0) AS intervention_rate,
    count(*) FILTER (WHERE {q.IS_ANSWERED_STOP}) AS answered_stops,
    answered_stops / nullif(budget_stops, 0) AS answered_share"""
_TOKEN_PARTS_FILTERED = """
    sum(own_input_tokens) AS input_tokens,
    sum(own_output_tokens) AS output_tokens,
    sum(own_cache_read_tokens) AS cache_read_tokens,
    sum(own_cache_write_tokens) AS cache_write_tokens,
    sum(own_reasoning_tokens) AS reasoning_tokens,
    sum(own_cache_read_tokens) FILTER (WHERE input_tokens IS NOT NULL)
        / nullif(sum(own_input_tokens) FILTER (WHERE cache_read_tokens IS NOT NULL), 0)
        AS cache_read_share,
    sum(own_cache_write_tokens) FILTER (WHERE input_tokens IS NOT NULL)
        / nullif(sum(own_input_tokens) FILTER (WHERE cache_write_tokens IS NOT NULL), 0)
        AS cache_write_share,
    sum(own_reasoning_tokens) FILTER (WHERE output_tokens IS NOT NULL)
        / nullif(sum(own_output_tokens) FILTER (WHERE reasoning_tokens IS NOT NULL), 0)
        AS reasoning_share"""
_OVERVIEW_TOTALS = f"""
WITH {q.FILTERED},
{SPEND}
SELECT
    count(*) AS runs,
    {_RATES_FILTERED},
    {_TOKEN_PARTS_FILTERED},
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
_OVERVIEW_PER_TASK = f"""
WITH {q.FILTERED},
{SPEND}
SELECT
    task_type,
    count(*) AS runs,
    {_RATES_FILTERED},
    sum(own_cost_usd) AS cost_usd,
    quantile_cont(total_tokens, 0.95) AS p95_total_tokens,
    {_TOKEN_PARTS_FILTERED}
FROM spend
GROUP BY task_type
ORDER BY task_type
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
        # edge cases of the counts and shares: unknown usage, flagged, an answered budget stop
        # with cache parts; a task type without limits (and below: a run of calls only, no input)
        _record(
            "answered",
            start + dt.timedelta(hours=1),
            2_000,
            0.02,
            stop_reason="budget_wrap_up",
            usage_status="unknown",
            limit_cost_usd=0.02,
            cache_read_tokens=400,
            cache_write_tokens=100,
            reasoning_tokens=30,
            quality="future_time",
        ),
        *(
            _record(f"free-{i}", start + dt.timedelta(hours=i), 700 + i, None, task_type="free")
            for i in range(3)
        ),
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
    calls = [  # no run record, no input figure
        call_row(
            "unfinished",
            turn,
            start + dt.timedelta(minutes=turn),
            "gpt-4.1",
            task_type="pending",
            output_tokens=50,
        )
        for turn in (1, 2)
    ]
    with write_connection(path) as conn:
        write_batch(conn, calls, records, events)
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


def test_the_overview_per_task_and_totals_equal_the_filtered_aggregates_they_replace(store):
    with read_connection(store) as conn:
        for f in _windows(store):
            frame = run_query(conn, q.OVERVIEW, f.params())
            total = frame[frame["is_total"]].drop(columns=["is_total", "task_type"]).reset_index(drop=True)
            expected_total = run_query(conn, _OVERVIEW_TOTALS, f.params())
            pd.testing.assert_frame_equal(total[expected_total.columns], expected_total, check_dtype=False)
            per_task = frame[~frame["is_total"]].reset_index(drop=True)
            expected = run_query(conn, _OVERVIEW_PER_TASK, f.params())
            pd.testing.assert_frame_equal(per_task[expected.columns], expected, check_dtype=False)
            got = run_query(conn, q.OVERVIEW_PER_TASK, f.params())
            pd.testing.assert_frame_equal(got, expected, check_dtype=False)
            ov = analysis.overview(conn, f)
            assert ov.runs == int(expected_total["runs"].iloc[0])
            pd.testing.assert_frame_equal(ov.per_task, expected[list(ov.per_task.columns)], check_dtype=False)
    with read_connection(store) as conn:  # the store has what the comparison must cover
        whole = analysis.overview(conn, _windows(store)[0])
    assert whole.runs > 200 and len(whole.per_task) >= 3 and whole.budgeted_runs > 0
    assert whole.unknown_usage_runs and whole.flagged_runs and "pending" in set(whole.per_task["task_type"])
    assert whole.cache_write_share is not None


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


def test_the_cost_tiles_equal_the_overviews_spend_figures(store, childless_store):
    from budgetlens.analysis import cost_totals

    for path in (store, childless_store):
        with read_connection(path) as conn:
            for f in _windows(path):
                ov = analysis.overview(conn, f)
                got = cost_totals.cost_totals(conn, f)
                for name in (
                    "runs",
                    "priced_runs",
                    "partially_priced_runs",
                    "unpriced_calls",
                    "unknown_usage_runs",
                ):
                    assert getattr(got, name) == getattr(ov, name), name
                assert got.tool_cost_usd == pytest.approx(ov.tool_cost_usd, rel=1e-12)
                assert got.cost_usd == (
                    None if ov.cost_usd is None else pytest.approx(ov.cost_usd, rel=1e-12)
                )
                assert got.cost_is_lower_bound == ov.cost_is_lower_bound
    with read_connection(store) as conn:  # the comparison covers every figure
        whole = cost_totals.cost_totals(conn, analysis.Filters())
    assert (
        whole.partially_priced_runs and whole.unpriced_calls and whole.unknown_usage_runs and whole.cost_usd
    )


#: The runaways' share's denominator as it was read before the basis (issue 25): runs, cost_usd.
_SPEND_TOTAL = f"WITH {q.FILTERED}, {SPEND} SELECT count(*) AS runs, sum(own_cost_usd) AS cost_usd FROM spend"


def test_runaways_from_a_given_basis_equal_the_one_statement_that_computes_its_p95(store, childless_store):
    assert "quantile_cont" in eq.RUNAWAYS and "quantile_cont" not in eq.RUNAWAYS_GIVEN_P95
    for path in (store, childless_store):
        with read_connection(path) as conn:
            for f in _windows(path):
                ov = analysis.overview(conn, f)
                totals = run_query(conn, _SPEND_TOTAL, f.params()).iloc[0]
                for k, repeats in ((3.0, 10), (1.5, 3), (1e-9, 2)):
                    expected = run_query(conn, eq.RUNAWAYS, {**f.params(), "k": k, "repeats": repeats})
                    read = runaway_analysis.runaways(conn, f, k=k, repeats=repeats)
                    given = runaway_analysis.runaways(
                        conn, f, k=k, repeats=repeats, basis=runaway_analysis.basis_of(ov)
                    )
                    for found in (read, given):
                        pd.testing.assert_frame_equal(found.runs, expected.drop(columns=["own_cost_usd"]))
                        assert found.total_runs == int(totals["runs"]) == ov.runs
                        own = expected["own_cost_usd"].sum(min_count=1)
                        assert found.cost_usd == (None if pd.isna(own) else pytest.approx(own, rel=1e-12))
                        if pd.isna(totals["cost_usd"]) or not totals["cost_usd"]:
                            assert found.cost_share is None
                        else:
                            assert found.cost_share == pytest.approx(
                                (found.cost_usd or 0.0) / totals["cost_usd"], rel=1e-12
                            )
    with read_connection(store) as conn:  # the comparison covers both kinds and a run without a type
        found = runaway_analysis.runaways(conn, analysis.Filters(), k=3.0, repeats=10)
        assert {"huge", "lead-3"} <= set(found.runs["run_id"])
        assert len(runaway_analysis.basis_of(analysis.overview(conn, analysis.Filters())).task_types) >= 3


#: The references of the statements issue 25 rewrote without ``FILTER`` clauses: the same
#: statements with them (hit rate per period, baselines, window coverage, drift).


def _with_filter_clauses(statement: str) -> str:
    """``statement`` with each ``count_if(c)`` written ``count(*) FILTER (WHERE c)``."""
    return statement.replace("count_if(", "count(*) FILTER (WHERE ")


_COST_QUANTILES = (  # (the statement's cost quantiles and max, with a FILTER clause)
    f"quantile_cont(CASE WHEN {q.COST_KNOWN} THEN cost_usd END, [0.5, 0.95]) AS q_cost_usd, "
    f"max(CASE WHEN {q.COST_KNOWN} THEN cost_usd END) AS max_cost_usd",
    f"quantile_cont(cost_usd, [0.5, 0.95]) FILTER (WHERE {q.COST_KNOWN}) AS q_cost_usd, "
    f"max(cost_usd) FILTER (WHERE {q.COST_KNOWN}) AS max_cost_usd",
)


def _baselines_filtered(statement: str) -> str:
    return _with_filter_clauses(statement.replace(*_COST_QUANTILES))


_DRIFT_FILTERED = f"""
WITH {q.FILTERED},
tagged AS (
    SELECT *, start_utc >= CAST($split_utc AS TIMESTAMP) AS recent, {q.COST_KNOWN} AS cost_known
    FROM filtered
)
SELECT task_type,
       count(*) FILTER (WHERE recent) AS n_recent,
       count(*) FILTER (WHERE NOT recent) AS n_previous,
       quantile_cont(total_tokens, 0.95) FILTER (WHERE recent) AS p95_total_tokens_recent,
       quantile_cont(total_tokens, 0.95) FILTER (WHERE NOT recent) AS p95_total_tokens_previous,
       quantile_cont(cost_usd, 0.95) FILTER (WHERE recent AND cost_known) AS p95_cost_usd_recent,
       quantile_cont(cost_usd, 0.95) FILTER (WHERE NOT recent AND cost_known)
           AS p95_cost_usd_previous
FROM tagged
GROUP BY task_type
ORDER BY task_type
"""


def test_counts_without_filter_clauses_equal_the_filtered_statements(store):
    assert "FILTER" not in q.HIT_RATE_DAILY + q.BASELINES_BY_TASK + q.WINDOW_COVERAGE
    assert _COST_QUANTILES[0] in q.BASELINES_BY_TASK
    with read_connection(store) as conn:
        for f in _windows(store):
            params = {
                **f.params(),
                "low_sample_runs": 20,
                "window_start": f.start_utc,
                "window_end": f.end_utc,
            }
            for statement, reference in (
                (q.HIT_RATE_DAILY, _with_filter_clauses(q.HIT_RATE_DAILY)),
                (q.HIT_RATE_HOURLY, _with_filter_clauses(q.HIT_RATE_HOURLY)),
                (q.WINDOW_COVERAGE, _with_filter_clauses(q.WINDOW_COVERAGE)),
                (q.BASELINES_BY_TASK, _baselines_filtered(q.BASELINES_BY_TASK)),
                (q.BASELINES_BY_TASK_MODEL, _baselines_filtered(q.BASELINES_BY_TASK_MODEL)),
            ):
                pd.testing.assert_frame_equal(
                    run_query(conn, statement, params), run_query(conn, reference, params), check_dtype=False
                )


def test_drift_per_window_groups_equals_four_filtered_quantiles(store):
    with read_connection(store) as conn:
        first, last, _ = analysis.data_extent(conn)
        end = last + dt.timedelta(microseconds=1)
        for split in (
            end - dt.timedelta(days=1),
            end - dt.timedelta(days=4),
            end,
        ):  # the last: nothing recent
            for f in _windows(store):
                params = {**f.params(), "start_utc": first, "split_utc": split, "end_utc": end}
                got = run_query(conn, eq.DRIFT, params)
                expected = run_query(conn, _DRIFT_FILTERED, params)
                pd.testing.assert_frame_equal(got, expected, check_dtype=False)


@pytest.fixture(scope="module")
def childless_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("childless") / "store.duckdb"
    write_sample(path, days=5, seed=11, runs_per_day=30, end_utc=default_end_utc())
    return path


def _spend_statements() -> list[str]:
    from budgetlens.analysis import rollup_queries, spenders

    return [
        q.OVERVIEW,
        q.OVERVIEW_PER_TASK,
        q.COST_BY_PERIOD_TASK,
        rollup_queries.COST_BY_PERIOD_MODEL,
        eq.RUNAWAYS,
        eq.RUNAWAY_BASIS,
        *spenders._STATEMENTS.values(),
    ]


def test_spend_without_child_runs_reads_each_run_whole_with_the_same_values(childless_store, store):
    params = {"period": "day", "k": 1.5, "repeats": 3, "none": "(none)"}
    with read_connection(childless_store) as conn:
        assert not conn.execute(HAS_CHILD_RUNS).fetchone()[0]
        for f in _windows(childless_store):
            for statement in _spend_statements():
                fast = for_store(conn, statement)
                assert SPEND_FLAT in fast and SPEND not in fast
                expected = run_query(conn, statement, {**f.params(), **params})
                pd.testing.assert_frame_equal(run_query(conn, fast, {**f.params(), **params}), expected)
    with read_connection(store) as conn:  # a parent with children: the join stays
        assert all(for_store(conn, s) == s for s in _spend_statements())
    with pytest.raises(ValueError, match="SPEND"):
        for_store(None, q.BASELINES_BY_TASK)


def test_plain_baselines_from_the_kaplan_meier_read_equal_the_sql_baselines(store, childless_store):
    from budgetlens.analysis import censoring, evidence_arrays

    for path in (store, childless_store):
        with read_connection(path) as conn:
            for f in _windows(path):
                plain, km = censoring.evidence_frames(conn, f)
                expected = analysis.baselines(conn, f)
                if expected.empty:
                    assert plain.empty and list(plain.columns) == list(expected.columns)
                else:
                    pd.testing.assert_frame_equal(plain, expected, check_exact=True)
                pd.testing.assert_frame_equal(km, censoring.censored_baselines(conn, f))
    # the quantile formula is DuckDB's to the last bit, integer columns too
    rng = np.random.default_rng(5)
    with read_connection(store) as conn:
        for n in (1, 2, 3, 10, 57, 1001):
            values = np.round(rng.lognormal(9, 2, n))
            got = evidence_arrays.quantile_cont(values, (0.5, 0.95))
            sql = "SELECT quantile_cont(CAST(v AS BIGINT), [0.5, 0.95]) FROM (SELECT unnest($v) AS v)"
            assert got == conn.execute(sql, {"v": values.tolist()}).fetchone()[0]


def test_runaways_without_tool_loops_equal_the_statement_with_its_or(store, childless_store):
    """Where no stored run may be a tool loop, the runs over their P95 alone (no ``OR``, the scan
    filtered by the smallest P95) are ``RUNAWAYS``' rows; ``runaways`` takes either statement
    and equals ``RUNAWAYS`` on a store with a tool loop (12 calls of one tool) and one without."""
    paths_taken = set()
    for path in (store, childless_store):
        with read_connection(path) as conn:
            for f in _windows(path):
                basis = runaway_analysis.basis_of(analysis.overview(conn, f))
                for k, repeats in ((3.0, 10), (1.5, 3), (3.0, 13), (1e-9, 2), (100.0, 50)):
                    params = {**f.params(), "k": k, "repeats": repeats}
                    expected = run_query(conn, eq.RUNAWAYS, params)
                    may_loop = bool(run_query(conn, eq.MAY_HAVE_TOOL_LOOPS, params).iloc[0, 0])
                    paths_taken.add(may_loop)
                    if not may_loop:
                        given = {
                            **params,
                            "basis_task_types": list(basis.task_types),
                            "basis_tokens": list(basis.p95_total_tokens),
                            "least_given": min(
                                (p for p in basis.p95_total_tokens if p is not None), default=None
                            ),
                        }
                        fast = run_query(conn, for_store(conn, eq.RUNAWAYS_OVER_P95_GIVEN), given)
                        pd.testing.assert_frame_equal(fast, expected)
                    found = runaway_analysis.runaways(conn, f, k=k, repeats=repeats, basis=basis)
                    pd.testing.assert_frame_equal(found.runs, expected.drop(columns=["own_cost_usd"]))
                    own = expected["own_cost_usd"].sum(min_count=1)
                    assert found.cost_usd == (None if pd.isna(own) else pytest.approx(own, rel=1e-12))
    assert paths_taken == {True, False}  # both statements were compared
    with read_connection(store) as conn:  # the store without loops still has tool streaks
        fast = runaway_analysis.runaways(conn, analysis.Filters(), k=1e-9, repeats=13)
    assert fast.runs["longest_repeat"].max() == 12
