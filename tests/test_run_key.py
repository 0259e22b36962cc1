"""The integer run key (issue 25, schema version 10): every call and event carries its run's
``run_key`` (``schema.RUN_KEY``), from the file writer, the DuckLake writer and the back-fill of
older stores; the fast what-if reads the walked runs by it and, where a key is shared or
missing, by run id, with the full replay's values either way."""

from __future__ import annotations

import duckdb
import pytest
from test_store_rollup import _stream
from test_whatif_peaks import _budgets, _same, _varied_rows

from budgetlens.analysis import whatif, whatif_peaks
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection
from budgetlens.store.lake import close_all
from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION
from budgetlens.store.schema import RUN_KEY, run_key, run_key_of

#: The migration that adds the run key (its number may change when migrations are merged).
RUN_KEY_VERSION = next(version for version, script in MIGRATIONS if "ADD COLUMN run_key" in script)
_KEYED = f"SELECT count(*), count(*) FILTER (WHERE run_key = {RUN_KEY}) FROM "


def _keys_of(conn) -> list[tuple[int, int]]:
    return [conn.execute(_KEYED + table).fetchone() for table in ("model_calls", "budget_events")]


def _write(location) -> None:
    with write_connection(location) as conn:
        for calls, records, events in _stream(seed=3, runs=12, batches=4):
            write_batch(conn, calls, records, events)


@pytest.mark.system  # store writes: seconds
def test_every_call_and_event_written_carries_its_run_key(store_path):
    _write(store_path)
    with read_connection(store_path) as conn:
        (calls, keyed_calls), (events, keyed_events) = _keys_of(conn)
    assert calls == keyed_calls > 0 and events == keyed_events > 0


@pytest.mark.system  # migrates a store: seconds
def test_a_store_from_before_the_run_key_is_back_filled(store_path):
    _write(store_path)
    with write_connection(store_path) as conn:  # as a store from before the run key was
        for table in ("model_calls", "budget_events"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN run_key")
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", [RUN_KEY_VERSION])
    with write_connection(store_path) as conn:  # migrates: the run key's version again
        (calls, keyed_calls), (events, keyed_events) = _keys_of(conn)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
    assert calls == keyed_calls > 0 and events == keyed_events > 0


@pytest.mark.system  # DuckLake: seconds
def test_the_lake_writer_fills_the_run_key(tmp_path):
    lake = f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    try:
        _write(lake)
        with read_connection(lake) as conn:
            (calls, keyed_calls), (events, keyed_events) = _keys_of(conn)
    finally:
        close_all()
    assert calls == keyed_calls > 0 and events == keyed_events > 0


@pytest.fixture
def varied_path(tmp_path):
    path = tmp_path / "varied.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *_varied_rows(11, 160))
    return path


@pytest.mark.system  # store writes: seconds
def test_the_walk_reads_by_run_key_and_by_run_id_only_when_a_key_is_shared(varied_path):
    budgets = _budgets()
    with read_connection(varied_path) as conn:
        replays = whatif_peaks.prepare(conn, Filters(), budgets)
    assert replays is not None and len(replays.walk.walk_ui) > 0 and replays.walk.read_by == "run_key"
    with write_connection(varied_path) as conn:
        conn.execute(f"UPDATE model_calls SET run_key = (SELECT min({RUN_KEY}) FROM runs)")
    with read_connection(varied_path) as conn:
        replays = whatif_peaks.prepare(conn, Filters(), budgets)
    assert replays is not None and replays.walk.read_by == "run_id"


@pytest.mark.parametrize("damage", ["shared key", "missing key", "events not keyed"])
@pytest.mark.system  # full and fast replays of a store: seconds
def test_the_fast_replay_equals_the_full_one_when_keys_are_shared_or_missing(varied_path, damage):
    with write_connection(varied_path) as conn:
        runs = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        if damage == "shared key":  # every run's calls and events under one run's key
            for table in ("model_calls", "budget_events"):
                conn.execute(f"UPDATE {table} SET run_key = (SELECT min({RUN_KEY}) FROM runs)")
        elif damage == "missing key":  # half the calls written without one
            conn.execute("UPDATE model_calls SET run_key = NULL WHERE run_id < ?", [runs[len(runs) // 2]])
        else:
            conn.execute("UPDATE budget_events SET run_key = NULL")
    budgets = _budgets()
    with read_connection(varied_path) as conn:
        fast = whatif_peaks.replay_many(conn, Filters(), budgets)
        for budget, mine in zip(budgets, fast, strict=True):
            full = whatif.replay(conn, Filters(), budget)
            _same(mine.summary, full.summary, summed=True)
            _same(mine.runs, full.runs)


@pytest.mark.parametrize("run_id", ["bench-0", "run-1-0001", "", "é€ run 🙂", "x" * 300])
def test_the_python_run_key_equals_the_sql_one(run_id):
    conn = duckdb.connect()
    assert (
        run_key(run_id) == conn.execute(f"SELECT {run_key_of('$run_id')}", {"run_id": run_id}).fetchone()[0]
    )
