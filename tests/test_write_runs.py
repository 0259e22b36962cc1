"""``browser.live_writer.write_runs`` (the fixtures' one-commit write of many runs) leaves the
store one ``write_batch`` per run leaves, and ``sample_store_copy`` the store ``write_sample``
leaves: every table, every row, every column (but the time each migration ran,
``schema_migrations.applied_utc``; and a cost the store sums per run equal to 12 significant
digits: the sample's runs span days, and the sum of one run's calls in one batch or in two adds
the same floats in another order)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from browser.live_writer import null_heavy_batches, task_runs, write_runs

from budgetlens.sample import write_sample
from budgetlens.store import read_connection, write_batch, write_connection

pytestmark = pytest.mark.system  # two stores written run by run: seconds


def _batches() -> list:
    """A few runs of each kind the fixtures write: guarded runs stopped or completed, imported runs
    without limits, foreign traces without run records, unpriced runs, events without a reason."""
    start = dt.datetime(2026, 11, 20, 9, 0)
    guarded = task_runs(start, dt.timedelta(minutes=7), {"hot": (2, 1), "calm": (1, 0)})
    nulls = null_heavy_batches(start)
    return guarded + [nulls[0], nulls[25], nulls[28], nulls[32], nulls[-1]]


#: Columns compared where not all: the migrations applied, not when.
_COLUMNS = {"schema_migrations": "version"}


def _cell(value):
    """``value`` with every float in it to 12 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _cell(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cell(item) for item in value)
    return value


def _tables(path: Path) -> dict[str, list]:
    with read_connection(path) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        return {
            name: sorted(
                repr(_cell(row))
                for row in conn.execute(f'SELECT {_COLUMNS.get(name, "*")} FROM "{name}"').fetchall()
            )
            for name in names
        }


def test_write_runs_stores_what_one_write_batch_per_run_stores(tmp_path):
    batches = _batches()
    one_by_one, at_once = tmp_path / "one_by_one.duckdb", tmp_path / "at_once.duckdb"
    with write_connection(one_by_one) as conn:
        for batch in batches:
            write_batch(conn, *batch)
    with write_connection(at_once) as conn:
        write_runs(conn, batches)
    expected = _tables(one_by_one)
    assert len(expected["runs"]) >= 7 and expected["model_calls"] and expected["budget_events"]
    assert _tables(at_once) == expected


def test_the_sample_fixture_stores_what_write_sample_stores(tmp_path, sample_store_copy):
    """``sample_store_copy`` (one commit, then copied) against ``write_sample`` (one commit a day)."""
    args = dict(days=3, seed=7, runs_per_day=12)
    write_sample(tmp_path / "written.duckdb", **args)
    copied = sample_store_copy(tmp_path / "copied.duckdb", **args)
    expected = _tables(tmp_path / "written.duckdb")
    assert len(expected["runs"]) >= 20 and expected["model_calls"] and expected["budget_events"]
    assert _tables(copied) == expected
