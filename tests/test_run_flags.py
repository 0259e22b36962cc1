"""The run's flags on ``runs`` (issue 25, ``schema.RUN_FLAG_COLUMNS``): every write path keeps each
flag equal to its rule over the rest of the row (file writer batch after batch, the rebuild, the
DuckLake writer, the back-fill of an older store), and the pages that count the stored flags read
the same figures as with the rules evaluated at read time (the statements before the flags)."""

from __future__ import annotations

import pandas as pd
import pytest
from test_page_reads_evidence import _windows, store  # noqa: F401  (the fixture)
from test_store_rollup import _stream

from budgetlens.analysis import censoring, drift, runaways, spenders
from budgetlens.analysis import views as analysis
from budgetlens.store import read_connection, rebuild_runs, write_batch, write_connection
from budgetlens.store.lake import close_all
from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION
from budgetlens.store.schema import RUN_FLAG_COLUMNS

#: The migration that adds the flags (its number may change when migrations are merged).
FLAGS_VERSION = next(version for version, script in MIGRATIONS if "ADD COLUMN budget_stop" in script)
#: Runs whose stored flag differs from its rule (NULLs included).
_DIFFERENT = "SELECT count(*) FROM runs WHERE " + " OR ".join(
    f"{flag} IS DISTINCT FROM ({rule})" for flag, rule in RUN_FLAG_COLUMNS.items()
)
#: ``runs`` as the pages read it before the flags: each flag evaluated from its rule at read time
#: (a temporary table shadows ``main.runs`` on this connection only).
_RULES_AT_READ_TIME = (
    "CREATE TEMP TABLE runs AS SELECT * REPLACE ("
    + ", ".join(f"{rule} AS {flag}" for flag, rule in RUN_FLAG_COLUMNS.items())
    + ") FROM main.runs"
)


def _assert_flags_equal_rules(conn) -> int:
    assert conn.execute(_DIFFERENT).fetchone()[0] == 0
    return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_every_batch_keeps_each_runs_flags_equal_to_their_rules(store_path):
    with write_connection(store_path) as conn:
        for calls, records, events in _stream(seed=11, runs=16, batches=6):
            write_batch(conn, calls, records, events)
            assert _assert_flags_equal_rules(conn) > 0
        rebuild_runs(conn)
        assert _assert_flags_equal_rules(conn) > 0
        kinds = conn.execute(
            "SELECT count_if(budget_stop), count_if(NOT budget_stop), count_if(budgeted), "
            "count_if(NOT budgeted), count_if(cost_known), count_if(NOT cost_known) FROM runs"
        ).fetchone()
    assert all(kinds), kinds  # the stream has each flag both ways


def test_a_store_from_before_the_flags_is_back_filled(store_path):
    with write_connection(store_path) as conn:
        for calls, records, events in _stream(seed=4, runs=12, batches=4):
            write_batch(conn, calls, records, events)
        for flag in RUN_FLAG_COLUMNS:  # as a store of the version before had it
            conn.execute(f"ALTER TABLE runs DROP COLUMN {flag}")
        conn.execute("DELETE FROM schema_migrations WHERE version = ?", [FLAGS_VERSION])
    with write_connection(store_path) as conn:  # migrates: the flags' version again
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
        assert _assert_flags_equal_rules(conn) > 0


@pytest.mark.system  # DuckLake: seconds
def test_the_lake_writer_keeps_the_flags(tmp_path):
    lake = f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    try:
        with write_connection(lake) as conn:
            for calls, records, events in _stream(seed=5, runs=10, batches=3):
                write_batch(conn, calls, records, events)
        with read_connection(lake) as conn:
            assert _assert_flags_equal_rules(conn) > 0
    finally:
        close_all()


def _page_reads(conn, f: analysis.Filters) -> list:
    """What the Overview, Cost, Hit rate, Baselines and Presets pages read that counts a flag."""
    ov = analysis.overview(conn, f)
    plain, km = censoring.evidence_frames(conn, f)
    found = runaways.runaways(conn, f, k=1.5, repeats=3)
    return [
        {k: v for k, v in vars(ov).items() if k != "per_task"},
        ov.per_task,
        analysis.hit_rate_by_task(conn, f),
        analysis.hit_rate_daily(conn, f),
        analysis.hit_rate_daily(conn, f, "hour"),
        analysis.baselines(conn, f),
        analysis.baselines(conn, f, by_model=True),
        plain,
        km,
        drift.drift(conn, f),
        spenders.spend_by(conn, f, "team"),
        found.runs,
        (found.count, found.cost_usd, found.cost_share),
    ]


def _assert_same(got, expected):
    for a, b in zip(got, expected, strict=True):
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b)
        else:
            assert a == b


def test_pages_counting_the_stored_flags_equal_the_rules_read_at_read_time(store):  # noqa: F811
    for f in _windows(store):
        with read_connection(store) as conn:
            assert _assert_flags_equal_rules(conn) > 0
            stored = _page_reads(conn, f)
            conn.execute(_RULES_AT_READ_TIME)
            _assert_same(stored, _page_reads(conn, f))
    with read_connection(store) as conn:  # the comparison covers each flag both ways
        ov = analysis.overview(conn, _windows(store)[0])
    assert ov.budgeted_runs < ov.finished_runs and ov.hit_rate and ov.partially_priced_runs
