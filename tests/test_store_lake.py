"""The DuckLake store (a DuckDB-file catalog and a local data path): same schema, same rollup,
same dedup as the file store; locations, maintenance and copy between the two kinds."""

from __future__ import annotations

import pytest
from test_store_rollup import _runs, _stream

from budgetlens.store import (
    StoreError,
    StoreMissing,
    read_connection,
    rebuild_runs,
    schema_version,
    write_batch,
    write_connection,
)
from budgetlens.store.lake import close_all, is_lake_connection, lake_ddl
from budgetlens.store.lake_compact import compact
from budgetlens.store.location import ENV_LAKE_DATA_PATH, LakeLocation, parse_lake, store_location
from budgetlens.store.migrations import SCHEMA_VERSION


@pytest.fixture
def lake(tmp_path):
    """A fresh DuckLake location: DuckDB-file catalog, local data directory."""
    yield f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    close_all()


def test_a_lake_location_parses_catalog_and_data_path():
    location = parse_lake("ducklake:postgres:dbname=bl host=10.0.0.5 port=5433?data_path=s3://b/lake/")
    assert location == LakeLocation("postgres:dbname=bl host=10.0.0.5 port=5433", "s3://b/lake/")
    assert location.is_postgres


def test_the_data_path_comes_from_the_environment_when_the_location_has_none(monkeypatch):
    monkeypatch.setenv(ENV_LAKE_DATA_PATH, "/srv/lake/")
    assert parse_lake("ducklake:postgres:dbname=bl").data_path == "/srv/lake/"
    assert parse_lake("ducklake:postgres:dbname=bl?data_path=/x/").data_path == "/x/"


def test_a_password_never_shows_in_the_location_text():
    shown = str(parse_lake("ducklake:postgres:dbname=bl password=hunter2 host=h"))
    assert "hunter2" not in shown and "password=***" in shown


@pytest.mark.parametrize(
    "text, rule",
    [("ducklake:", "catalog is missing"), ("ducklake:x.ducklake?data_path=", "data_path= is empty")],
)
def test_a_bad_lake_location_names_the_rule(text, rule):
    with pytest.raises(ValueError, match=rule):
        parse_lake(text)


def test_a_plain_path_stays_a_file_store(tmp_path):
    assert store_location(tmp_path / "a.duckdb") == tmp_path / "a.duckdb"


def test_lake_ddl_drops_primary_keys_only():
    assert lake_ddl("CREATE TABLE t (a VARCHAR PRIMARY KEY, b INT NOT NULL)") == (
        "CREATE TABLE t (a VARCHAR, b INT NOT NULL)"
    )


@pytest.mark.system  # DuckLake: seconds
def test_a_new_lake_is_migrated_on_first_write(lake):
    with write_connection(lake) as conn:
        assert is_lake_connection(conn)
        assert schema_version(conn) == SCHEMA_VERSION
        assert conn.execute("SELECT folds FROM lake_fold").fetchall() == [(0,)]  # the fold token
        staged = {row[0] for row in conn.execute("SHOW TABLES").fetchall() if row[0].startswith("staged_")}
        assert staged == {"staged_model_calls", "staged_run_records", "staged_budget_events"}


def test_reading_a_lake_that_does_not_exist_says_so(tmp_path):
    missing = f"ducklake:{tmp_path / 'none.ducklake'}"
    with pytest.raises(StoreMissing, match="no budgetlens store here yet"), read_connection(missing):
        pass
    close_all()


def test_a_new_lake_without_a_data_path_is_refused_naming_both_ways(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_LAKE_DATA_PATH, raising=False)
    new = f"ducklake:{tmp_path / 'new.ducklake'}"
    with pytest.raises(StoreError, match=f"data_path=.*{ENV_LAKE_DATA_PATH}"), write_connection(new):
        pass
    close_all()


@pytest.mark.system  # DuckLake: seconds each
@pytest.mark.parametrize("seed", range(3))
def test_the_lake_rollup_equals_the_file_store_rollup(lake, tmp_path, seed):
    stream = list(_stream(seed, runs=25, batches=12))
    results = []
    for location in (tmp_path / "file.duckdb", lake):
        with write_connection(location) as conn:
            for calls, records, events in stream:
                write_batch(conn, calls, records, events)
            results.append(_runs(conn))
    assert results[0] == results[1] and results[0]
    with write_connection(lake) as conn:  # and the full rebuild gives the same runs on the lake
        assert rebuild_runs(conn) == len(results[0])
        assert _runs(conn) == results[0]


@pytest.mark.system  # DuckLake: seconds each
def test_a_resent_batch_is_stored_once_on_the_lake(lake):
    calls, records, events = next(_stream(seed=5, batches=1))
    with write_connection(lake) as conn:
        first = write_batch(conn, calls, records, events)
        before = _runs(conn)
        again = write_batch(conn, calls, records, events)
        assert _runs(conn) == before
        stored = conn.execute("SELECT count(*), count(DISTINCT span_id) FROM model_calls").fetchone()
    assert first.calls == len(calls) == stored[0] == stored[1]
    assert (again.calls, again.records, again.events, again.runs) == (0, 0, 0, 0)


@pytest.mark.system  # DuckLake: seconds each
def test_a_read_connection_reads_one_snapshot_while_a_writer_commits(lake):
    stream = list(_stream(seed=8, runs=10, batches=4))
    with write_connection(lake) as writer:
        write_batch(writer, *stream[0])
        with read_connection(lake) as reader:
            before = reader.execute("SELECT count(*) FROM model_calls").fetchone()
            for batch in stream[1:]:
                write_batch(writer, *batch)  # not blocked by the open reader
            assert reader.execute("SELECT count(*) FROM model_calls").fetchone() == before
        with read_connection(lake) as reader:
            after = reader.execute("SELECT count(*) FROM model_calls").fetchone()
    assert after[0] > before[0]


@pytest.mark.system  # DuckLake: seconds each
def test_compact_merges_the_small_files_of_many_commits_and_keeps_every_row(lake, tmp_path):
    with write_connection(lake) as conn:
        for calls, records, events in _stream(seed=2, runs=30, batches=20):
            write_batch(conn, calls, records, events)
        before = _runs(conn)
        files_before = _live_files(conn)
        counts = compact(conn, expire_older_than_s=0)
        files_after = _live_files(conn)
        assert _runs(conn) == before
    assert counts["merged_files"] > 0 or counts["rewritten_files"] > 0
    assert files_after < files_before


def _live_files(conn) -> int:
    """Data files of the current snapshot, over the tables of the rollup and the calls."""
    return sum(
        conn.execute(f"SELECT count(*) FROM ducklake_list_files('budgetlens_lake', '{table}')").fetchone()[0]
        for table in ("model_calls", "run_totals", "runs")
    )


@pytest.mark.system  # DuckLake: seconds each
def test_store_copy_moves_a_file_store_into_a_lake_and_back_with_equal_counts(lake, tmp_path):
    from budgetlens.cli import main

    source = tmp_path / "source.duckdb"
    with write_connection(source) as conn:
        for calls, records, events in _stream(seed=4, runs=20, batches=6):
            write_batch(conn, calls, records, events)
        expected = _runs(conn)
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("model_calls", "runs")}
    assert main(["store", "copy", "--from", str(source), "--to", lake, "--batch-rows", "7"]) == 0
    back = tmp_path / "back.duckdb"
    assert main(["store", "copy", "--from", lake, "--to", str(back)]) == 0
    for location in (lake, back):
        with read_connection(location) as conn:
            assert _runs(conn) == expected
            assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == counts["model_calls"]


@pytest.mark.system  # DuckLake: seconds each
def test_store_copy_refuses_a_destination_that_holds_rows(lake, tmp_path, capsys):
    from budgetlens.cli import main

    source = tmp_path / "source.duckdb"
    with write_connection(source) as conn:
        write_batch(conn, *next(_stream(seed=1, runs=3, batches=1)))
    assert main(["store", "copy", "--from", str(source), "--to", lake]) == 0
    assert main(["store", "copy", "--from", str(source), "--to", lake]) == 1
    assert "already holds rows" in capsys.readouterr().err


def test_store_compact_on_a_file_store_says_it_needs_none(tmp_path, capsys):
    from budgetlens.cli import main

    assert main(["store", "compact", "--db", str(tmp_path / "a.duckdb")]) == 1
    assert "needs no compaction" in capsys.readouterr().err


@pytest.mark.system  # DuckLake: seconds each
def test_analysis_commands_read_a_lake(lake, capsys):
    from budgetlens.cli import main

    with write_connection(lake) as conn:
        for calls, records, events in _stream(seed=6, runs=15, batches=4):
            write_batch(conn, calls, records, events)
        expected = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert main(["runs", "--db", lake, "--limit", "0", "--window-days", "0", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == expected + 1  # header + one line per run
    assert main(["baselines", "--db", lake, "--window-days", "0", "--format", "json"]) == 0
    assert '"task_type"' in capsys.readouterr().out


def test_each_collector_on_a_lake_has_its_own_journal_directory(monkeypatch, tmp_path):
    from budgetlens.config import ENV_JOURNAL_DIR
    from budgetlens.ingest.queue import journal_dir

    lake = "ducklake:postgres:dbname=bl host=h?data_path=s3://bucket/lake/"
    monkeypatch.delenv(ENV_JOURNAL_DIR, raising=False)
    default = journal_dir(lake)
    assert default.name.startswith("budgetlens-lake-") and default.name.endswith(".journal")
    assert journal_dir("ducklake:postgres:dbname=other host=h") != default  # one per lake
    monkeypatch.setenv(ENV_JOURNAL_DIR, str(tmp_path / "j1"))
    assert journal_dir(lake) == tmp_path / "j1"
    assert journal_dir(tmp_path / "a.duckdb") == tmp_path / "a.duckdb.journal"  # a file store: as before


def test_a_lake_location_stays_as_written_through_the_configuration(monkeypatch):
    from budgetlens.config import ENV_DB, resolve_db_path
    from budgetlens.store.location import display

    lake = "ducklake:postgres:dbname=bl host=h password=pw?data_path=s3://bucket/lake/"
    monkeypatch.setenv(ENV_DB, lake)
    assert resolve_db_path(None) == lake  # s3:// keeps both slashes (a Path would not)
    assert display(lake) == "ducklake:postgres:dbname=bl host=h password=***"
