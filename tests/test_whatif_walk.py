"""The walk of the fast what-if (``whatif_walk``): a short run's running USD summed in numpy has
the bits of DuckDB's window sum (the reference replay's), a long run's comes from the window, and
the fast replay equals the full one on long runs, at limits tied to a run's exact running sums
and where the stopping call failed mid-way (unknown usage: its reservation counts)."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import duckdb
import numpy as np
import pytest

from budgetlens.analysis import peak_queries as pq
from budgetlens.analysis import whatif, whatif_peaks
from budgetlens.analysis.views import Filters
from budgetlens.analysis.whatif_walk import _cost_before, _segments
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 10, 1, 8, 0, 0)


def test_a_short_runs_running_usd_has_the_bits_of_duckdbs_window_sum():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, pq.SHORT_STREAM_ROWS + 1, 3_000)
    run = np.repeat(np.arange(lengths.size), lengths)
    order = np.concatenate([np.arange(n) for n in lengths])
    cost = rng.random(run.size) * 10.0 ** rng.integers(-9, 1, run.size)
    cost[rng.random(run.size) < 0.3] = 0.0  # tool-call events cost nothing
    conn = duckdb.connect()
    conn.execute(
        "CREATE TABLE s AS SELECT unnest($run) AS run, unnest($o) AS o, unnest($cost) AS cost",
        {"run": run.tolist(), "o": order.tolist(), "cost": cost.tolist()},
    )
    window = conn.execute(
        "SELECT run, cost, sum(cost) OVER (PARTITION BY run ORDER BY o ROWS UNBOUNDED PRECEDING) - cost "
        "AS before FROM s ORDER BY run, o"
    ).fetchnumpy()
    first, segment = _segments(window["run"])
    mine = _cost_before(window["cost"], np.full(run.size, np.nan), first, segment)
    assert np.array_equal(mine, window["before"])  # the same bits, not only close


def test_a_long_runs_running_usd_is_the_windows():
    window = np.array([0.0, 0.1, 0.30000000000000004, np.nan, np.nan])
    first, segment = _segments(np.array([1, 1, 1, 2, 2]))
    mine = _cost_before(np.array([0.1, 0.2, 0.3, 0.5, 0.25]), window, first, segment)
    assert mine[:3].tolist() == window[:3].tolist() and mine[3:].tolist() == [0.0, 0.5]


def _long_rows(seed: int, runs: int):
    rng = random.Random(seed)
    calls, events = [], []
    for r in range(runs):
        run_id = f"long-{r:03d}"
        start = T0 + dt.timedelta(minutes=11 * r)
        t = 0.0
        for i in range(rng.randint(3, 40)):
            t += rng.choice([0.5, 2.0, 7.0])
            unknown = rng.random() < 0.08  # a call that failed mid-way: its reservation counts
            tokens = rng.randint(20, 900)
            row: dict[str, Any] = dict(
                span_id=f"{run_id}.c{i}",
                run_id=run_id,
                source="test",
                task_type="agent",
                start_utc=start + dt.timedelta(seconds=t),
                end_utc=start + dt.timedelta(seconds=t + 0.4),
                turn=i + 1,
                cost_usd=rng.uniform(1e-5, 3e-3),
                usage_status="unknown" if unknown else "reported",
            )
            if unknown:
                row["reserved_tokens"] = tokens
            else:
                row.update(input_tokens=tokens - tokens // 4, output_tokens=tokens // 4, total_tokens=tokens)
            calls.append(row)
        if r % 2:  # tool calls between the model calls (even runs have none)
            for k in range(rng.randint(1, 12)):
                events.append(
                    dict(
                        event_id=f"{run_id}.t{k}",
                        run_id=run_id,
                        ts_utc=start + dt.timedelta(seconds=rng.uniform(0, t)),
                        name="budgetlens.tool_call",
                        tool_name="search",
                    )
                )
    return calls, [], events


@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("walk") / "long.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *_long_rows(11, 80))
    return path


#: The reference's running sums of the runs without tool-call events (their stream is their
#: calls), at a call in the middle of each: limits tied to them stop a run exactly there.
_PREFIXES = """
SELECT run_id, turn,
       sum(coalesce(cost_usd, 0)) OVER w AS cost_through,
       sum(coalesce(total_tokens, input_tokens + output_tokens,
                    CASE WHEN usage_status = 'unknown' THEN reserved_tokens END, 0)) OVER w AS tokens_through
FROM model_calls
WHERE run_id NOT IN (SELECT run_id FROM budget_events)
WINDOW w AS (PARTITION BY run_id ORDER BY start_utc, turn ROWS UNBOUNDED PRECEDING)
"""


@pytest.mark.system  # the full SQL replay beside the fast one: seconds
def test_fast_replay_equals_the_full_replay_on_long_runs_at_tied_limits(long_store):
    with read_connection(long_store) as conn:
        prefixes = conn.execute(_PREFIXES).df()
        mid = prefixes[prefixes["turn"] == 20]  # runs longer than one leaf block of the window
        assert len(mid) >= 3
        budgets = [whatif.Budget.uniform(max_cost_usd=float(v)) for v in mid["cost_through"][:3]]
        budgets += [whatif.Budget.uniform(max_total_tokens=int(v)) for v in mid["tokens_through"][:3]]
        budgets += [
            whatif.Budget.uniform(max_cost_usd=0.01, max_tool_calls=4),
            whatif.Budget.uniform(max_input_tokens=2_500, max_duration_s=60),
        ]
        fast = whatif_peaks.replay_many(conn, Filters(), budgets)
        replays = whatif_peaks.prepare(conn, Filters(), budgets)
        full = [whatif.replay(conn, Filters(), b) for b in budgets]
    for mine, theirs in zip(fast, full, strict=True):
        assert mine.summary.drop(columns=["avoided_cost_usd", "avoided_cost_share"]).equals(
            theirs.summary.drop(columns=["avoided_cost_usd", "avoided_cost_share"])
        )
        assert mine.summary["avoided_cost_usd"].to_numpy() == pytest.approx(
            theirs.summary["avoided_cost_usd"].to_numpy(), rel=1e-12
        )
        # a long run's spend is summed by DuckDB's hash aggregate in the reference, in call order
        # here: its avoided USD equal to the last bits only (as the summaries' sums)
        assert mine.runs["avoided_cost_usd"].to_numpy() == pytest.approx(
            theirs.runs["avoided_cost_usd"].to_numpy(), rel=1e-12, abs=1e-15
        )
        rest = [c for c in theirs.runs.columns if c != "avoided_cost_usd"]
        assert mine.runs[rest].astype(object).to_dict("records") == theirs.runs[rest].astype(object).to_dict(
            "records"
        )
    # what the comparison is about: long walked runs, stops at the tied call for cost and tokens
    assert replays is not None and (replays.walk.n_rows > pq.SHORT_STREAM_ROWS).any()
    tied = set(mid["run_id"][:3])
    for theirs, reason in ((full[0], "budget_cost"), (full[3], "budget_tokens")):
        at_tie = theirs.runs[theirs.runs["run_id"].isin(tied) & theirs.runs["stop_reason"].eq(reason)]
        assert not at_tie.empty
