"""The run's call peaks on ``runs`` (issue 25, ``schema.RUN_PEAK_COLUMNS``): every write path keeps
them equal to the run's ``run_totals`` aggregates (file writer batch after batch, the rebuild, the
DuckLake writer, the back-fill of older stores), and the fast what-if that reads them instead of
joining ``run_totals`` keeps the full replay's values."""

from __future__ import annotations

import pytest
from test_store_rollup import _stream
from test_whatif_peaks import _budgets, _same, _varied_rows

from budgetlens.analysis import whatif, whatif_peaks
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, rebuild_runs, write_batch, write_connection
from budgetlens.store.lake import close_all
from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION
from budgetlens.store.schema import RUN_PEAK_COLUMNS

#: The migration that adds the peaks (its number may change when migrations are merged).
PEAKS_VERSION = next(version for version, script in MIGRATIONS if "ADD COLUMN calls_end_utc" in script)
#: Per run: its peaks on ``runs`` and the ``run_totals`` columns they come from.
_BOTH = (
    "SELECT r.run_id, "
    + ", ".join(f"r.{peak}, t.{total}" for peak, total in RUN_PEAK_COLUMNS.items())
    + " FROM runs r LEFT JOIN run_totals t ON t.run_id = r.run_id ORDER BY r.run_id"
)


def _assert_peaks_equal_totals(conn) -> int:
    rows = conn.execute(_BOTH).fetchall()
    for row in rows:
        values = row[1:]
        assert values[0::2] == values[1::2], row[0]
    return len(rows)


def test_every_batch_keeps_each_runs_peaks_equal_to_its_run_totals(store_path):
    with write_connection(store_path) as conn:
        for calls, records, events in _stream(seed=7, runs=14, batches=5):
            write_batch(conn, calls, records, events)
            assert _assert_peaks_equal_totals(conn) > 0
        rebuild_runs(conn)
        assert _assert_peaks_equal_totals(conn) > 0
    with read_connection(store_path) as conn:
        tool_runs = conn.execute("SELECT count(*) FROM runs WHERE tool_events > 0").fetchone()[0]
        priced = conn.execute("SELECT count(*) FROM runs WHERE calls_cost_usd IS NOT NULL").fetchone()[0]
    assert tool_runs > 0 and priced > 0  # the stream has tool events and priced calls


def test_a_store_from_before_the_peaks_is_back_filled(store_path):
    with write_connection(store_path) as conn:
        for calls, records, events in _stream(seed=3, runs=12, batches=4):
            write_batch(conn, calls, records, events)
        for peak in RUN_PEAK_COLUMNS:  # as a store of the version before had it
            conn.execute(f"ALTER TABLE runs DROP COLUMN {peak}")
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", [PEAKS_VERSION])
    with write_connection(store_path) as conn:  # migrates: the peaks' version again
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
        assert _assert_peaks_equal_totals(conn) > 0


@pytest.mark.system  # DuckLake: seconds
def test_the_lake_writer_keeps_the_peaks(tmp_path):
    lake = f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    try:
        with write_connection(lake) as conn:
            for calls, records, events in _stream(seed=5, runs=10, batches=3):
                write_batch(conn, calls, records, events)
        with read_connection(lake) as conn:
            assert _assert_peaks_equal_totals(conn) > 0
    finally:
        close_all()


def test_the_fast_replay_reading_the_peaks_equals_the_full_one_batch_after_batch(tmp_path):
    path = tmp_path / "varied.duckdb"
    calls, records, events = _varied_rows(13, 150)
    third = len(calls) // 3
    with write_connection(path) as conn:  # the peaks of a run grow over three commits
        write_batch(conn, calls[:third], [], events[: len(events) // 2])
        write_batch(conn, calls[third : 2 * third], records, [])
        write_batch(conn, calls[2 * third :], [], events[len(events) // 2 :])
    with read_connection(path) as conn:
        assert _assert_peaks_equal_totals(conn) > 0
        fast = whatif_peaks.replay_many(conn, Filters(), _budgets())
        for budget, mine in zip(_budgets(), fast, strict=True):
            full = whatif.replay(conn, Filters(), budget)
            _same(mine.summary, full.summary, summed=True)
            # a run's USD over calls stored by three commits: summed in another order (last bits)
            _same(mine.runs, full.runs, summed=True)
