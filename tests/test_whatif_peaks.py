"""The fast what-if (``whatif_peaks``: per-run peaks, calls read only where a walk is needed)
gives the full SQL replay's values, row for row, on varied stores: censored runs (old budgets of
every kind, larger and smaller than the candidate), multi-limit budgets, runs without calls,
unknown-usage calls, tool-call events, runs sent without a task type and an empty window."""

from __future__ import annotations

import datetime as dt
import math
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from budgetlens.analysis import presets, whatif, whatif_peaks
from budgetlens.analysis.filters import fetch_arrays
from budgetlens.analysis.views import Filters
from budgetlens.limits import LIMIT_KEYS
from budgetlens.sample import write_sample
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 10, 1, 8, 0, 0)
pytestmark = pytest.mark.system  # the full SQL replay against the fast path on generated stores: seconds each

TASKS = ("qa", "code", None)
#: An old budget's stop reason and the limit column it records.
OLD_STOPS = {
    "budget_tokens": ("limit_total_tokens", 2_000),
    "budget_turns": ("limit_turns", 4),
    "budget_tools": ("limit_tool_calls", 3),
    "budget_time": ("limit_duration_s", 60.0),
    "budget_cost": ("limit_cost_usd", 0.05),
}


def _varied_rows(seed: int, runs: int):
    rng = random.Random(seed)
    calls, records, events = [], [], []
    for r in range(runs):
        run_id = f"run-{seed}-{r:04d}"
        task = rng.choice(TASKS)
        start = T0 + dt.timedelta(minutes=7 * r)
        kind = rng.random()
        n_calls = 0 if kind < 0.08 else rng.randint(1, 9)
        t, total_tokens, cost = 0.0, 0, 0.0
        for i in range(n_calls):
            t += rng.choice([0.0, 1.5, 4.0, 12.0, 30.0])
            unknown = rng.random() < 0.05
            tokens = rng.randint(50, 1_500)
            price = round(rng.uniform(0.0001, 0.02), 6) if rng.random() > 0.1 else None
            row: dict[str, Any] = dict(
                span_id=f"{run_id}.c{i}",
                run_id=run_id,
                source="test",
                task_type=task,
                request_model="gpt-4.1-mini",
                start_utc=start + dt.timedelta(seconds=t),
                end_utc=start + dt.timedelta(seconds=t + rng.uniform(0.1, 3)),
                turn=i + 1,
                cost_usd=price,
                usage_status="unknown" if unknown else "reported",
            )
            if unknown:
                row["reserved_tokens"] = tokens
            else:
                row.update(input_tokens=tokens - tokens // 3, output_tokens=tokens // 3, total_tokens=tokens)
                total_tokens += tokens
            cost += price or 0.0
            calls.append(row)
        for k in range(rng.choice([0, 0, 1, 3, 6])):  # tool calls between the model calls
            events.append(
                dict(
                    event_id=f"{run_id}.t{k}",
                    run_id=run_id,
                    ts_utc=start + dt.timedelta(seconds=rng.uniform(0, t + 1)),
                    name="budgetlens.tool_call",
                    tool_name="search",
                )
            )
        record: dict[str, Any] = dict(
            run_id=run_id,
            source="test",
            task_type=task,
            start_utc=start,
            end_utc=start + dt.timedelta(seconds=t + 5),
            stop_reason="completed",
        )
        if n_calls == 0:  # an importer's summary only: judged on its totals
            record.update(
                total_tokens=rng.randint(100, 9_000),
                turns=rng.randint(1, 8),
                tool_calls=rng.randint(0, 6),
                cost_usd=rng.uniform(0, 0.1),
            )
        elif kind > 0.7:  # the old budget stopped it (censored or stopped by the candidate)
            reason = rng.choice(sorted(OLD_STOPS))
            column, value = OLD_STOPS[reason]
            record.update(stop_reason=reason, **{column: value * rng.choice([0.5, 1, 3])})
            if rng.random() < 0.3:
                record["limit_turns"] = rng.randint(2, 10)
        elif kind > 0.6:
            record["tool_calls"] = rng.randint(0, 8)  # counted, maybe not recorded one by one
        records.append(record)
    return calls, records, events


@pytest.fixture(scope="module")
def varied_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("peaks") / "varied.duckdb"
    with write_connection(path) as conn:
        for seed in (1, 2):
            write_batch(conn, *_varied_rows(seed, 150))
    return path


def _budgets() -> list[whatif.Budget]:
    rng = random.Random(7)
    budgets = [
        whatif.Budget.uniform(),  # no limits: only the old stops count
        whatif.Budget.uniform(max_total_tokens=3_000),
        whatif.Budget.uniform(max_turns=3, max_tool_calls=2),
        whatif.Budget.uniform(max_duration_s=20, max_cost_usd=0.03),
        whatif.Budget(
            limits={"qa": {"max_input_tokens": 2_000, "max_output_tokens": 700}, None: {"max_turns": 2}},
            default={"max_cost_usd": 0.01},
        ),
    ]
    for _ in range(6):  # multi-limit budgets
        limits = {
            "max_total_tokens": rng.choice([None, 1_000, 4_000, 8_000]),
            "max_input_tokens": rng.choice([None, 1_500, 5_000]),
            "max_output_tokens": rng.choice([None, 600, 2_000]),
            "max_turns": rng.choice([None, 2, 4, 8]),
            "max_tool_calls": rng.choice([None, 1, 3]),
            "max_duration_s": rng.choice([None, 10.0, 45.0, 120.0]),
            "max_cost_usd": rng.choice([None, 0.01, 0.04, 0.2]),
        }
        budgets.append(whatif.Budget.uniform(**limits))
    return budgets


def _values(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain Python values (NULL/NaN as None, numbers by value): dtypes aside."""

    def plain(value):
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
            return None
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    return [{k: plain(v) for k, v in row.items()} for row in frame.astype(object).to_dict("records")]


#: Per-task sums of USD over runs: the same per-run values added in another order (DuckDB's
#: hash aggregate vs numpy), so equal to the last bits only; every other value is identical.
SUMMED_USD = ("avoided_cost_usd", "avoided_cost_share")


def _same(fast: pd.DataFrame, full: pd.DataFrame, summed: bool = False) -> None:
    assert list(fast.columns) == list(full.columns)
    mine, theirs = _values(fast), _values(full)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        if summed:
            for key in (k for k in SUMMED_USD if k in a):
                assert a.pop(key) == pytest.approx(b.pop(key), rel=1e-12, abs=1e-15), key
        assert a == b


@pytest.mark.parametrize(
    "f",
    [
        Filters(),
        Filters(start_utc=T0 + dt.timedelta(hours=6), end_utc=T0 + dt.timedelta(hours=14)),
        Filters(task_types=("qa",), tz="Europe/Berlin"),
    ],
    ids=["all", "window", "one-task-type"],
)
def test_fast_replay_equals_the_full_replay_for_every_budget(varied_store, f):
    budgets = _budgets()
    with read_connection(varied_store) as conn:
        fast = whatif_peaks.replay_many(conn, f, budgets)
        for budget, mine in zip(budgets, fast, strict=True):
            full = whatif.replay(conn, f, budget)
            _same(mine.summary, full.summary, summed=True)
            _same(mine.runs, full.runs)
            assert mine.run_count == full.run_count == len(full.runs)


def test_limits_that_differ_per_task_type_replay_as_the_full_replay(varied_store):
    # The old stops are compared per task type's slice and the tool-call limit only over the
    # runs past the task type's smallest one: each task type its own limits, one with none.
    budgets = [
        whatif.Budget(
            limits={
                "qa": {"max_tool_calls": tools, "max_total_tokens": 2_000 + 1_000 * i, "max_turns": 3},
                "code": {"max_tool_calls": 3 - tools, "max_cost_usd": 0.02 * (i + 1), "max_duration_s": 30.0},
                None: {"max_input_tokens": 1_500 * (i + 1), "max_output_tokens": 600},
            }
        )
        for i, tools in enumerate((1, 2, 3))
    ]
    with read_connection(varied_store) as conn:
        fast = whatif_peaks.replay_many(conn, Filters(), budgets)
        for budget, mine in zip(budgets, fast, strict=True):
            full = whatif.replay(conn, Filters(), budget)
            _same(mine.summary, full.summary, summed=True)
            _same(mine.runs, full.runs)
            assert full.summary["stopped"].sum() > 0


def test_the_varied_store_has_what_the_comparison_is_about(varied_store):
    with read_connection(varied_store) as conn:
        full = [whatif.replay(conn, Filters(), b) for b in _budgets()]
    summary = pd.concat([r.summary for r in full])
    runs = pd.concat([r.runs for r in full])
    assert summary["censored"].sum() > 0 and summary["runs_without_calls"].sum() > 0
    assert set(runs["stop_reason"].dropna()) == set(OLD_STOPS)  # every reason occurs
    assert "unknown" in set(summary["task_type"])  # runs sent without a task type
    assert runs["avoided_tokens"].gt(0).any() and runs["stop_turn"].isna().any()


def test_fast_curve_and_plan_equal_the_full_replay(varied_store):
    with read_connection(varied_store) as conn:
        f = Filters()
        ev = whatif.evidence(conn, f)
        for method in ("auto", "plain"):
            fast = whatif.tradeoff(conn, f, ev, method=method)
            full = whatif.tradeoff(conn, f, ev, method=method, full_replay=True)
            _same(fast, full, summed=True)
        fast_plan = whatif.plan_for_target(conn, f, 0.1, run_limit=5)
        full_plan = whatif.plan_for_target(conn, f, 0.1, full_replay=True)
    _same(fast_plan.presets, full_plan.presets, summed=True)
    _same(fast_plan.replay.summary, full_plan.replay.summary, summed=True)
    _same(fast_plan.replay.runs, full_plan.replay.runs.head(5))  # only the rows shown
    assert fast_plan.replay.run_count == len(full_plan.replay.runs) > 5


def test_fast_curve_equals_the_full_replay_on_a_sample_store(tmp_path):
    path = tmp_path / "sample.duckdb"
    write_sample(path, days=4, seed=5, runs_per_day=20)
    with read_connection(path) as conn:
        ev = whatif.evidence(conn, Filters())
        fast = whatif.tradeoff(conn, Filters(), ev)
        full = whatif.tradeoff(conn, Filters(), ev, full_replay=True)
    _same(fast, full, summed=True)
    assert len(fast) == len(whatif.CURVE_MULTIPLIERS) * fast["task_type"].nunique(dropna=False)


def test_fast_replay_of_an_empty_window_has_the_documented_columns(varied_store):
    empty = Filters(task_types=("no-such-task",))
    with read_connection(varied_store) as conn:
        (mine,) = whatif_peaks.replay_many(conn, empty, [whatif.Budget.uniform(max_turns=1)])
        curve = whatif.tradeoff(conn, empty)
    assert list(mine.summary.columns) == list(whatif.SUMMARY_COLUMNS) and mine.summary.empty
    assert list(mine.runs.columns) == list(whatif.RUN_COLUMNS) and mine.runs.empty
    assert curve.empty


def test_fetch_arrays_gives_nan_for_null_numbers_and_none_for_null_strings(varied_store):
    with read_connection(varied_store) as conn:
        arrays = fetch_arrays(
            conn, "SELECT CAST(NULL AS DOUBLE) AS x, CAST(NULL AS VARCHAR) AS s, $v AS v", {"v": 2, "w": 3}
        )
    assert np.isnan(arrays["x"][0]) and arrays["s"][0] is None and arrays["v"][0] == 2


def test_every_limit_key_is_replayed(varied_store):
    # The fast path names each key of the one limit table: a new key fails here, not silently.
    with read_connection(varied_store) as conn:
        for key in LIMIT_KEYS:
            value = 0.001 if key == "max_cost_usd" else 1
            budget = whatif.Budget.uniform(**{key: value})
            (mine,) = whatif_peaks.replay_many(conn, Filters(), [budget])
            _same(mine.runs, whatif.replay(conn, Filters(), budget).runs)


def test_a_budget_that_stops_nothing_reads_no_calls_and_equals_the_full_replay(tmp_path):
    path = tmp_path / "calm.duckdb"
    calls = [
        dict(
            span_id=f"r{i}.c{k}",
            run_id=f"r{i}",
            source="test",
            task_type="qa",
            start_utc=T0 + dt.timedelta(minutes=i, seconds=k),
            turn=k + 1,
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            cost_usd=0.01,
            usage_status="reported",
        )
        for i in range(4)
        for k in range(2)
    ]
    with write_connection(path) as conn:
        write_batch(conn, calls, [], [])
    roomy, tight = whatif.Budget.uniform(max_turns=5), whatif.Budget.uniform(max_total_tokens=20)
    with read_connection(path) as conn:
        fast = whatif_peaks.replay_many(conn, Filters(), [roomy, tight])
        full = [whatif.replay(conn, Filters(), b) for b in (roomy, tight)]
    for mine, theirs in zip(fast, full, strict=True):
        _same(mine.summary, theirs.summary, summed=True)
        _same(mine.runs, theirs.runs)
    assert fast[0].run_count == 0 and fast[1].run_count == 4
    assert fast[1].summary["avoided_tokens"].iloc[0] == 4 * 15  # each stopped at its 2nd call


def test_the_preset_grid_gives_the_limits_of_each_multipliers_presets(varied_store):
    with read_connection(varied_store) as conn:
        ev = whatif.evidence(conn, Filters())
    for method in ("auto", "plain", "kaplan-meier"):
        grid = presets.preset_grid(ev.baselines, ev.censoring, whatif.CURVE_MULTIPLIERS, method)
        for multiplier, limits in zip(whatif.CURVE_MULTIPLIERS, grid, strict=True):
            expected = whatif.Budget.from_presets(whatif.evidence_presets(ev, multiplier, method))
            assert limits == expected.limits and any(limits.values()), (method, multiplier)
    with pytest.raises(ValueError, match="multiplier"):
        presets.preset_grid(ev.baselines, ev.censoring, [0.0])


@pytest.mark.system  # a collector subprocess holds the file; the reads go through its endpoint
def test_the_fast_path_reads_through_the_collector_as_from_the_file(tmp_path, python):
    from _collector_helpers import collector_process

    from budgetlens.analysis.censoring import censored_baselines
    from budgetlens.store import connect
    from budgetlens.store.readers import RemoteStore

    path = tmp_path / "held.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *_varied_rows(3, 120))
    budgets = _budgets()
    with read_connection(path) as conn:
        from_file = whatif_peaks.replay_many(conn, Filters(), budgets)
        km_file = censored_baselines(conn, Filters())
    with collector_process(python, path) as _, connect(path) as remote:
        assert isinstance(remote, RemoteStore)
        through = whatif_peaks.replay_many(remote, Filters(), budgets)
        km_remote = censored_baselines(remote, Filters())
    for mine, theirs in zip(through, from_file, strict=True):
        _same(mine.summary, theirs.summary)
        _same(mine.runs, theirs.runs)
    assert km_remote.to_dict("records") == km_file.to_dict("records")


def test_a_budget_made_of_the_curves_presets_replays_from_the_curves_walk(varied_store):
    with read_connection(varied_store) as conn:
        f = Filters()
        ev = whatif.evidence(conn, f)
        grid = presets.preset_grid(ev.baselines, ev.censoring, whatif.CURVE_MULTIPLIERS, "auto")
        budgets = [whatif.Budget(limits=entry) for entry in grid]
        replays = whatif_peaks.prepare(conn, f, budgets)
        assert replays is not None
        # each task type at another multiplier, as the What-if page's chosen presets are
        mixed = whatif.Budget(limits={t: grid[(3 + 7 * i) % len(grid)][t] for i, t in enumerate(grid[0])})
        assert replays.covers(mixed) and not replays.covers(whatif.Budget.uniform(max_turns=1))
        mine, full = replays.whatif(mixed, run_limit=7), whatif.replay(conn, f, mixed)
    _same(mine.summary, full.summary, summed=True)
    _same(mine.runs, full.runs.head(7))
    assert mine.run_count == len(full.runs)


def test_the_evidence_from_one_read_equals_the_plain_and_kaplan_meier_references(varied_store):
    from budgetlens.analysis.censoring import censored_baselines
    from budgetlens.analysis.views import baselines

    with read_connection(varied_store) as conn:
        for f in (Filters(), Filters(task_types=("unknown",)), Filters(task_types=("no-such-task",))):
            ev = whatif.evidence(conn, f)
            expected = baselines(conn, f)
            if expected.empty:
                assert ev.baselines.empty and list(ev.baselines.columns) == list(expected.columns)
            else:
                pd.testing.assert_frame_equal(ev.baselines, expected, check_exact=True)
            pd.testing.assert_frame_equal(ev.censoring, censored_baselines(conn, f), check_exact=True)


def test_the_kept_runs_are_put_in_rowid_order_and_their_table_is_dropped(varied_store):
    import pyarrow as pa

    from budgetlens.analysis import peak_queries as pq

    ui = np.array([2, 0, 1])
    numbers, table = whatif_peaks._in_rowid_order(
        {"ui": ui, "calls": np.array([30.0, 10.0, 20.0])}, pa.table({"run_id": ["c", "a", "b"]})
    )
    assert numbers["calls"].tolist() == [10.0, 20.0, 30.0] and "ui" not in numbers
    assert table.column("run_id").to_pylist() == ["a", "b", "c"]
    with read_connection(varied_store) as conn:
        whatif_peaks.replay_many(conn, Filters(), _budgets())
        kept = conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, $name)",
            {"name": pq.UNDER_TABLE},
        ).fetchone()[0]
    assert kept == 0


class _RenderInside:
    """A connection on which, right after the first walk's table is created, a second render
    (``replay_many`` of ``budgets``) runs to its end on the same connection: two renders sharing
    one connection or one collector session, as a page re-run while the first still reads."""

    def __init__(self, conn, budgets: list[whatif.Budget]):
        self.conn, self.budgets, self.inner = conn, budgets, None

    def execute(self, sql: str, params: Any = None):
        result = self.conn.execute(sql, params)
        if self.inner is None and sql.lstrip().startswith("CREATE") and " TEMP TABLE " in sql:
            self.inner = whatif_peaks.replay_many(self.conn, Filters(), self.budgets)
        return result


class _Session:
    """``execute`` through one collector session (``StoreHost.query``, as the read endpoint runs it)."""

    def __init__(self, host, session: str):
        self.host, self.session = host, session

    def execute(self, sql: str, params: Any = None):
        from budgetlens.store.readers import RemoteResult

        return RemoteResult(self.host.query(sql, params, session=self.session))


@pytest.mark.parametrize("through", ["connection", "collector-session"])
def test_two_renders_on_one_connection_keep_their_own_runs(varied_store, tmp_path, through):
    # each walk's temp table has a name of its own: the render started inside the other
    # neither replaces nor drops the outer one's runs; both equal the full replay.
    import shutil

    from budgetlens.store.host import StoreHost

    outer, other = _budgets()[:6], _budgets()[6:]
    with read_connection(varied_store) as conn:
        expected = [whatif.replay(conn, Filters(), b) for b in (*outer, *other)]
    if through == "connection":
        with read_connection(varied_store) as conn:
            shared = _RenderInside(conn, other)
            got = whatif_peaks.replay_many(shared, Filters(), outer)
    else:
        copy = tmp_path / "held.duckdb"
        shutil.copy(varied_store, copy)
        host = StoreHost(copy)
        try:
            shared = _RenderInside(_Session(host, host.open_session()), other)
            got = whatif_peaks.replay_many(shared, Filters(), outer)
        finally:
            host.close()
    assert shared.inner is not None  # the second render did run inside the first
    for mine, full in zip([*got, *shared.inner], expected, strict=True):
        _same(mine.summary, full.summary, summed=True)
        _same(mine.runs, full.runs)


def test_the_target_presets_are_each_task_types_evidence_presets_at_its_multiplier(varied_store):
    # target_presets chooses the P95s once for every task type's multiplier; the reference is
    # evidence_presets at each chosen multiplier, row by row.
    with read_connection(varied_store) as conn:
        ev = whatif.evidence(conn, Filters())
        curve = whatif.tradeoff(conn, Filters(), ev)
    seen = set()
    for method in ("auto", "plain", "kaplan-meier"):
        for target in (0.0, 0.05, 0.2, 1.0):
            chosen = whatif.target_presets(ev, curve, target, method)
            assert len(chosen) == curve["task_type"].nunique(dropna=False)
            for _, row in chosen.iterrows():
                table = whatif.evidence_presets(ev, row["multiplier"], method)
                same_task = table["task_type"].eq(row["task_type"]) | (
                    table["task_type"].isna() & pd.isna(row["task_type"])
                )
                expected = table[same_task].iloc[0]
                _same(pd.DataFrame([row[table.columns]]), pd.DataFrame([expected]))
                seen.add(row["multiplier"])
    assert len(seen) > 1  # task types at different multipliers


def test_the_fast_path_reads_inside_one_transaction_as_in_autocommit(varied_store, tmp_path):
    """A reader of a DuckLake and a reader in a collector's process (``StoreHost.snapshot_cursor``)
    run every query in one transaction, where a new temp table's ``rowid``s start at DuckDB's
    transaction-local base (2^55), not at 0: the kept runs' positions must not come from the
    raw ``rowid`` (the walk failed there: INT32 cast out of range)."""
    from budgetlens.store import open_hosts
    from budgetlens.store.host import StoreHost

    budgets = _budgets()
    with read_connection(varied_store) as conn:
        expected = whatif_peaks.replay_many(conn, Filters(), budgets)
        conn.execute("BEGIN TRANSACTION READ ONLY")
        in_transaction = [whatif_peaks.replay_many(conn, Filters(), budgets) for _ in range(2)]
        conn.execute("ROLLBACK")
    held = tmp_path / "held.duckdb"
    with write_connection(held) as conn:
        for seed in (1, 2):
            write_batch(conn, *_varied_rows(seed, 150))
    host = StoreHost(held)
    try:
        with host.write():
            pass
        open_hosts.register(held, host)
        with read_connection(held) as conn:  # the collector's own cursor in one READ ONLY transaction
            in_process = whatif_peaks.replay_many(conn, Filters(), budgets)
    finally:
        host.close()
    for got in (*in_transaction, in_process):
        for mine, theirs in zip(got, expected, strict=True):
            _same(mine.summary, theirs.summary)
            _same(mine.runs, theirs.runs)


def test_a_failure_in_the_walk_raises_its_own_error_and_the_next_replay_works(varied_store, monkeypatch):
    """A statement failing between the kept runs' table and its drop raises its own error, not
    the drop's (inside a transaction, the failure aborts it and the drop cannot run), in
    autocommit the table is dropped, and the next replay on the same connection gives the same
    values."""
    from budgetlens.analysis import peak_queries as pq
    from budgetlens.analysis import whatif_walk

    budgets = _budgets()

    def failing_read(self, conn, *_):  # fails as it runs (a bind error leaves a transaction open)
        conn.execute("SELECT CAST(run_id AS INTEGER) FROM runs")

    kept = "SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, $name)"  # any walk's
    for transaction in (False, True):
        with read_connection(varied_store) as conn:
            expected = whatif_peaks.replay_many(conn, Filters(), budgets)
            if transaction:
                conn.execute("BEGIN TRANSACTION READ ONLY")
            with monkeypatch.context() as patch:
                patch.setattr(whatif_walk.Walk, "_read", failing_read)
                with pytest.raises(Exception, match="Could not convert"):
                    whatif_peaks.replay_many(conn, Filters(), budgets)
            if transaction:
                conn.execute("ROLLBACK")
            assert conn.execute(kept, {"name": pq.UNDER_TABLE}).fetchone()[0] == 0
            again = whatif_peaks.replay_many(conn, Filters(), budgets)
        for mine, theirs in zip(again, expected, strict=True):
            _same(mine.summary, theirs.summary)
            _same(mine.runs, theirs.runs)
