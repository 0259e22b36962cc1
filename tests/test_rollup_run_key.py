"""The run key on ``runs`` and ``run_model_rollup`` (issue 25, schema version 12): every run and
rollup row the writers store carries ``schema.RUN_KEY`` of its run id (file store, rebuild,
DuckLake, the back-fill of older stores), and the cost per model, which joins a multi-model run's
rollup rows by it, equals the join by run id and the calls' reference when keys are shared or
missing."""

from __future__ import annotations

import random

import pytest
from test_run_model_rollup import REFERENCE_COST_BY_PERIOD_MODEL, _batches

from budgetlens.analysis import rollup_queries
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.views import cost_by_period
from budgetlens.store import read_connection, rebuild_runs, rollups, write_batch, write_connection
from budgetlens.store.lake import close_all
from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION
from budgetlens.store.schema import RUN_KEY

#: The migration that adds the key to the rollup (its number may change when migrations merge).
ROLLUP_KEY_VERSION = next(v for v, script in MIGRATIONS if f"{rollups.TABLE} ADD COLUMN run_key" in script)
_TABLES = ("runs", rollups.TABLE)
_KEYED = f"SELECT count(*), count(*) FILTER (WHERE run_key = {RUN_KEY}) FROM "


def _keys_of(conn) -> list[tuple[int, int]]:
    return [conn.execute(_KEYED + table).fetchone() for table in _TABLES]


def _all_keyed(keys: list[tuple[int, int]]) -> bool:
    return all(rows == keyed > 0 for rows, keyed in keys)


def _write(location, seed: int = 2, runs: int = 16) -> None:
    rng = random.Random(seed)
    with write_connection(location) as conn:
        for batch in _batches(rng, runs=runs):
            # no unpriced part: the calls' reference counts only a call without cost as unpriced
            write_batch(conn, calls=[c | {"unpriced_parts": None} for c in batch])


@pytest.mark.system  # store writes: seconds
def test_every_run_and_rollup_row_written_carries_its_run_key(store_path):
    _write(store_path)
    with read_connection(store_path) as conn:
        assert _all_keyed(_keys_of(conn))
    with write_connection(store_path) as conn:
        rebuild_runs(conn)
        assert _all_keyed(_keys_of(conn))


@pytest.mark.system  # DuckLake: seconds
def test_the_lake_writer_fills_the_run_key_of_runs_and_rollup_rows(tmp_path):
    lake = f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    try:
        _write(lake, runs=6)
        with read_connection(lake) as conn:
            keys = _keys_of(conn)
    finally:
        close_all()
    assert _all_keyed(keys)


@pytest.mark.system  # migrates a store: seconds
def test_a_store_from_before_the_key_on_runs_is_back_filled(store_path):
    _write(store_path)
    with write_connection(store_path) as conn:  # as a store of the version before had it
        for table in _TABLES:
            conn.execute(f"ALTER TABLE {table} DROP COLUMN run_key")
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", [ROLLUP_KEY_VERSION])
    with write_connection(store_path) as conn:  # migrates: that version again
        keys = _keys_of(conn)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
    assert _all_keyed(keys)


#: How a store's keys are damaged before the cost per model is read: (what, SQL statements).
_DAMAGE = {
    "intact": [],
    # every run and rollup row under one run's key: each multi-model run joins every row
    "one key for all": [f"UPDATE {t} SET run_key = (SELECT min(run_key) FROM runs)" for t in _TABLES],
    # two runs share a key (the second takes the first's), in both tables
    "two runs share a key": [
        f"UPDATE {t} SET run_key = (SELECT run_key FROM runs ORDER BY run_id LIMIT 1) "
        "WHERE run_id = (SELECT run_id FROM runs ORDER BY run_id LIMIT 1 OFFSET 1)"
        for t in _TABLES
    ],
    "rollup rows without a key": [f"UPDATE {rollups.TABLE} SET run_key = NULL WHERE model <> 'llama'"],
    "runs without a key": ["UPDATE runs SET run_key = NULL WHERE run_id < 'r5'"],
}


@pytest.mark.parametrize("damage", list(_DAMAGE))
@pytest.mark.system  # store writes: seconds
def test_the_cost_per_model_by_run_key_equals_the_join_by_run_id_and_the_calls(store_path, damage):
    _write(store_path)
    with write_connection(store_path) as conn:
        multi = conn.execute("SELECT count(*) FROM runs WHERE contains(models, ',')").fetchone()[0]
        assert multi > 1  # the join matters
        for statement in _DAMAGE[damage]:
            conn.execute(statement)
    with read_connection(store_path) as conn:
        for f in (Filters(), Filters(models=["gpt-4o", "llama"]), Filters(task_types=("no-such-task",))):
            params = {**f.params(), "period": "hour"}
            by_key = run_query(conn, rollup_queries.COST_BY_PERIOD_MODEL, params)
            by_id = run_query(conn, rollup_queries.COST_BY_PERIOD_MODEL_BY_ID, params)
            calls = run_query(conn, REFERENCE_COST_BY_PERIOD_MODEL, params)
            # costs are multiples of 1/1024: sums are exact in any order
            assert by_key.to_dict("records") == by_id.to_dict("records") == calls.to_dict("records")
            page = cost_by_period(conn, f, "hour", "model")
            assert page.to_dict("records") == by_id.to_dict("records")
