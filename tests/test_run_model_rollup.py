"""``run_model_rollup`` (issue 25) equals a scan of ``model_calls``, batch after batch: multi-model
runs, unpriced and partly priced calls, unknown usage, re-sent spans, aggregates, the rebuild,
the schema 7 back-fill and the DuckLake writer; its latency sketch gives quantiles near exact."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pandas as pd
import pytest

from budgetlens.analysis.queries import FILTERED, MULTI_MODEL_RUNS, cost_by_period_model
from budgetlens.store import read_connection, rebuild_runs, rollups, write_batch, write_connection
from budgetlens.store.connection import migrate
from budgetlens.store.migrations import SCHEMA_VERSION

T0 = dt.datetime(2026, 11, 2, 9, 0, 0)
MODELS = ("gpt-4o", "claude-x", "llama")


def _maybe(rng, value, p=0.3):
    return None if rng.random() < p else value


def _call(rng, run, index, parent=None):
    status = rng.choice(["reported"] * 5 + ["unknown"])
    reported = status == "reported"
    return dict(
        span_id=f"{run}.c{index}",
        run_id=run,
        trace_id=f"t-{run}",
        parent_span_id=parent,
        source="test",
        request_model=_maybe(rng, rng.choice(MODELS), 0.1),
        response_model=_maybe(rng, rng.choice(MODELS), 0.6),
        start_utc=T0 + dt.timedelta(seconds=index),
        duration_s=_maybe(rng, rng.choice([0.0, 0.004, rng.lognormvariate(0, 1.5), 20000.0]), 0.1),
        turn=index,
        input_tokens=rng.randint(0, 5000) if reported else None,
        output_tokens=_maybe(rng, rng.randint(0, 900), 0.1) if reported else None,
        total_tokens=_maybe(rng, rng.randint(0, 9000), 0.7) if reported else None,
        cache_read_tokens=_maybe(rng, rng.randint(0, 100)),
        cache_write_tokens=_maybe(rng, rng.randint(0, 100), 0.6),
        reasoning_tokens=_maybe(rng, 7),
        reserved_tokens=_maybe(rng, 4000, 0.2),
        # multiples of 1/1024 add up exactly in any order, so sums compare exactly
        cost_usd=_maybe(rng, rng.randint(1, 500) / 1024, 0.3) if reported else None,
        unpriced_parts=_maybe(rng, "web_search_requests", 0.8),
        usage_status=status,
    )


def _scan(conn) -> dict:
    """The rollup computed in Python from the stored calls (the slow path)."""
    rows = conn.execute(
        "SELECT run_id, coalesce(response_model, request_model, 'unknown'), input_tokens, output_tokens, "
        "total_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, reserved_tokens, cost_usd, "
        "unpriced_parts, usage_status, duration_s FROM model_calls"
    ).fetchall()
    out: dict = {}

    def add(acc, key, value):
        if value is not None:
            acc[key] = (acc[key] or 0) + value

    for run, model, inp, outp, tot, cr, cw, rs, reserved, cost, parts, status, dur in rows:
        acc = out.setdefault((run, model), {c: None for c in rollups.ROLLUP_COLUMNS[2:]})
        for c in ("calls", "unpriced_calls", "unknown_usage_calls", "timed_calls", *rollups.LATENCY_COLUMNS):
            acc[c] = acc[c] or 0
        acc["calls"] += 1
        for key, value in (
            ("input_tokens", inp),
            ("output_tokens", outp),
            ("cache_read_tokens", cr),
            ("cache_write_tokens", cw),
            ("reasoning_tokens", rs),
            ("cost_usd", cost),
        ):
            add(acc, key, value)
        charged = tot if tot is not None else (inp + outp if inp is not None and outp is not None else None)
        if charged is None and status == "unknown":
            charged = reserved
        add(acc, "total_tokens", charged)
        acc["unpriced_calls"] += int((cost is None or parts is not None) and status == "reported")
        acc["unknown_usage_calls"] += int(status == "unknown")
        if dur is not None:
            acc["timed_calls"] += 1
            acc[rollups.LATENCY_COLUMNS[rollups.latency_bucket(dur)]] += 1
            acc["min_duration_s"] = dur if acc["min_duration_s"] is None else min(acc["min_duration_s"], dur)
            acc["max_duration_s"] = dur if acc["max_duration_s"] is None else max(acc["max_duration_s"], dur)
    return out


def _stored(conn) -> dict:
    columns = ", ".join(rollups.ROLLUP_COLUMNS)
    rows = conn.execute(f"SELECT {columns} FROM {rollups.TABLE}").fetchall()
    return {(r[0], r[1]): dict(zip(rollups.ROLLUP_COLUMNS[2:], r[2:])) for r in rows}


def _batches(rng, runs=12):
    calls = [_call(rng, f"r{run}", i) for run in range(runs) for i in range(rng.randint(1, 8))]
    rng.shuffle(calls)
    batches = []
    while calls:
        size = rng.randint(1, 15)
        batch, calls = calls[:size], calls[size:]
        if batches and rng.random() < 0.4:  # a re-sent span is stored once
            batch = batch + rng.sample(batches[-1], min(2, len(batches[-1])))
        batches.append(batch)
    return batches


@pytest.mark.system  # seconds per random stream, seed 0 too
@pytest.mark.parametrize("seed", range(6))
def test_the_rollup_equals_a_scan_of_the_calls_batch_after_batch(tmp_path, seed):
    rng = random.Random(seed)
    with write_connection(tmp_path / "s.duckdb") as conn:
        for batch in _batches(rng):
            write_batch(conn, calls=batch)
            assert _stored(conn) == _scan(conn)
        assert any(
            len({k[1] for k in _stored(conn) if k[0] == run}) > 1 for run in {k[0] for k in _scan(conn)}
        )
        before = _stored(conn)
        rebuild_runs(conn)
        assert _stored(conn) == before


@pytest.mark.system  # several store writes: seconds
def test_an_aggregate_deleted_later_leaves_its_runs_rollup_recounted(tmp_path):
    rng = random.Random(3)
    parent = _call(rng, "r1", 0) | {"request_model": "gpt-4o", "response_model": None}
    with write_connection(tmp_path / "s.duckdb") as conn:
        write_batch(conn, calls=[parent, _call(rng, "r2", 0)])
        child = _call(rng, "r1", 1, parent=parent["span_id"])
        write_batch(conn, calls=[child])  # the parent is an aggregate: deleted, r1 recounted
        assert conn.execute("SELECT count(*) FROM model_calls WHERE run_id = 'r1'").fetchone() == (1,)
        assert _stored(conn) == _scan(conn)


@pytest.mark.system  # migrates a store: seconds
def test_schema_8_back_fills_the_rollup_of_an_older_store(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "old.duckdb"
    with write_connection(path) as conn:
        for batch in _batches(rng):
            write_batch(conn, calls=batch)
        expected = _scan(conn)
        conn.execute(f"DROP TABLE {rollups.TABLE}")  # as a store of schema version 7 had it
        conn.execute("DELETE FROM schema_migrations WHERE version = 8")
        assert migrate(conn) == SCHEMA_VERSION  # 8 re-applied; later versions stay applied
        assert _stored(conn) == expected
    with read_connection(path) as conn:
        assert _stored(conn) == expected


@pytest.mark.system  # DuckLake: seconds
def test_the_lake_writer_keeps_the_same_rollup(tmp_path):
    lake = f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    rng = random.Random(11)
    batches = _batches(rng, runs=6)
    with write_connection(lake) as conn:
        for batch in batches:
            write_batch(conn, calls=batch)
        assert _stored(conn) == _scan(conn)


@pytest.mark.parametrize("seed", range(5))
def test_sketch_quantiles_lie_in_the_buckets_of_the_exact_ones(seed):
    rng = np.random.default_rng(seed)
    values = rng.lognormal(mean=rng.uniform(-3, 3), sigma=rng.uniform(0.1, 2.5), size=rng.integers(1, 3000))
    counts = [0] * rollups.LATENCY_BUCKETS
    for value in values:
        counts[rollups.latency_bucket(float(value))] += 1
    qs = [0.0, 0.5, 0.95, 1.0]
    estimates = rollups.sketch_quantiles(counts, float(values.min()), float(values.max()), qs)
    ordered = np.sort(values)
    for q, estimate in zip(qs, estimates):
        rank = (len(values) - 1) * q
        low = rollups.bucket_bounds(rollups.latency_bucket(float(ordered[int(np.floor(rank))])))[0]
        high = rollups.bucket_bounds(rollups.latency_bucket(float(ordered[int(np.ceil(rank))])))[1]
        assert estimate is not None and low <= estimate <= high
    assert estimates[0] == values.min() and estimates[-1] == values.max()


def test_an_empty_sketch_has_no_quantile_and_a_bad_q_is_refused():
    assert rollups.sketch_quantiles([0] * rollups.LATENCY_BUCKETS, 0, 0, [0.5]) == [None]
    with pytest.raises(ValueError, match="quantile"):
        rollups.sketch_quantiles([1] + [0] * (rollups.LATENCY_BUCKETS - 1), 0, 0, [1.5])


#: The slow reference of ``rollup_queries.COST_BY_PERIOD_MODEL``: the multi-model runs split by
#: their calls (``model_calls``), unpriced = a reported call without cost.
REFERENCE_COST_BY_PERIOD_MODEL = cost_by_period_model(f"""
    SELECT any_value(m.start_utc) AS start_utc,
           coalesce(c.response_model, c.request_model, 'unknown') AS key,
           sum(c.cost_usd) AS cost_usd,
           count(*) FILTER (WHERE c.cost_usd IS NULL AND c.usage_status = 'reported') AS unpriced
    FROM model_calls c JOIN {MULTI_MODEL_RUNS} m ON c.run_id = m.run_id
    GROUP BY c.run_id, key
""")

#: The exact reference of ``rollup_queries.model_latency``: per model (the response model, else the
#: requested one) the calls of the filtered runs, with P50, P95 and max call duration
#: (``model_calls.duration_s``, s) over the ``timed_calls`` that have one; with a model filter,
#: only the calls of those models.
REFERENCE_MODEL_LATENCY = f"""
WITH {FILTERED},
c AS (
    SELECT coalesce(response_model, request_model, 'unknown') AS model, duration_s
    FROM model_calls
    WHERE run_id IN (SELECT run_id FROM filtered)
)
SELECT model, calls, timed_calls, q[1] AS p50_duration_s, q[2] AS p95_duration_s, max_duration_s
FROM (
    SELECT model, count(*) AS calls, count(duration_s) AS timed_calls,
           quantile_cont(duration_s, [0.5, 0.95]) AS q, max(duration_s) AS max_duration_s
    FROM c
    WHERE len(CAST($models AS VARCHAR[])) = 0 OR list_contains(CAST($models AS VARCHAR[]), model)
    GROUP BY model
)
ORDER BY calls DESC, model
"""


@pytest.mark.system  # generated stores, every page query twice: seconds per seed
@pytest.mark.parametrize("seed", range(3))
def test_the_pages_rollup_queries_equal_their_model_calls_references(tmp_path, seed):
    from budgetlens.analysis import rollup_queries
    from budgetlens.analysis.filters import Filters, run_query

    rng = random.Random(seed)
    with write_connection(tmp_path / "s.duckdb") as conn:
        for batch in _batches(rng, runs=20):
            # the reference counts only a call without cost as unpriced: leave no unpriced part
            # and durations inside the sketch's finite buckets (each spans < 1.34x)
            write_batch(
                conn,
                calls=[
                    c | {"unpriced_parts": None, "duration_s": min(max(c["duration_s"], 0.02), 5000.0)}
                    if c["duration_s"] is not None
                    else c | {"unpriced_parts": None}
                    for c in batch
                ],
            )
        for f in (Filters(), Filters(models=["gpt-4o", "llama"])):
            params = {**f.params(), "period": "hour"}
            new = run_query(conn, rollup_queries.COST_BY_PERIOD_MODEL, params)
            old = run_query(conn, REFERENCE_COST_BY_PERIOD_MODEL, params)
            assert new.to_dict("records") == old.to_dict("records")
            fast = rollup_queries.model_latency(conn, f)
            exact = run_query(conn, REFERENCE_MODEL_LATENCY, f.params())
            cols = ["model", "calls", "timed_calls", "max_duration_s"]
            assert fast[cols].to_dict("records") == exact[cols].to_dict("records")
            for a, b in zip(fast["p95_duration_s"], exact["p95_duration_s"]):
                assert (np.isnan(a) and np.isnan(b)) or b / 1.34 - 1e-9 <= a <= b * 1.34 + 1e-9


def test_the_latency_of_filters_keeping_every_run_reads_every_rollup_row_with_the_same_result(tmp_path):
    from budgetlens.analysis import rollup_queries
    from budgetlens.analysis.filters import Filters, data_extent, run_query
    from budgetlens.sample.generator import default_end_utc, write_sample

    path = tmp_path / "sample.duckdb"
    write_sample(path, days=3, seed=4, runs_per_day=25, end_utc=default_end_utc())
    with read_connection(path) as conn:
        first, last, _ = data_extent(conn)
        every = [
            Filters(),
            Filters(start_utc=first, end_utc=last + dt.timedelta(microseconds=1), tz="Europe/Berlin"),
        ]
        some = [
            Filters(start_utc=first + dt.timedelta(microseconds=1)),  # leaves the oldest run out
            Filters(end_utc=last),  # leaves the newest out
            Filters(task_types=("no-such-task",)),
            Filters(models=("gpt-4.1",)),
        ]
        assert all(rollup_queries.keeps_every_run(conn, f) for f in every)
        assert not any(rollup_queries.keeps_every_run(conn, f) for f in some)
        reference = run_query(conn, rollup_queries.MODEL_LATENCY_SKETCH, every[0].params())
        assert len(reference) > 1 and reference["calls"].sum() > 100
        for f in every:
            got = run_query(conn, rollup_queries.MODEL_LATENCY_SKETCH_ALL, f.params())
            pd.testing.assert_frame_equal(
                got, run_query(conn, rollup_queries.MODEL_LATENCY_SKETCH, f.params())
            )
        for f in every + some:  # the page's function takes the fast statement only where it holds
            via_join = run_query(conn, rollup_queries.MODEL_LATENCY_SKETCH, f.params())
            frame = rollup_queries.model_latency(conn, f)
            assert frame["calls"].tolist() == via_join["calls"].tolist()
            assert frame["model"].tolist() == via_join["model"].tolist()
