"""The store foundation: migrations, idempotent batches, the rollup rule, and the connection
protocol with a writer and a reader in two separate processes on one file."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import textwrap

import pytest

from budgetlens.store import (
    StoreError,
    StoreMissing,
    migrate,
    read_connection,
    rebuild_runs,
    schema_version,
    write_batch,
    write_connection,
)
from budgetlens.store.migrations import SCHEMA_VERSION
from budgetlens.store.schema import RUN_COLUMNS
from budgetlens.store.writer import rows_to_table

T0 = dt.datetime(2026, 11, 2, 9, 0, 0)


def _call(run_id, turn, **fields):
    row = dict(
        span_id=f"{run_id}.c{turn}",
        run_id=run_id,
        source="test",
        task_type="qa",
        request_model="gpt-4.1-mini",
        response_model="gpt-4.1-mini",
        start_utc=T0 + dt.timedelta(seconds=10 * turn),
        end_utc=T0 + dt.timedelta(seconds=10 * turn + 5),
        turn=turn,
        input_tokens=1000,
        output_tokens=100,
        total_tokens=1100,
        cost_usd=0.001,
        usage_status="reported",
    )
    row.update(fields)
    return row


def _run(conn, run_id):
    row = conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return dict(zip(RUN_COLUMNS, row))


def test_new_store_records_every_migration(db_path):
    with write_connection(db_path) as conn:
        assert schema_version(conn) == SCHEMA_VERSION
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations").fetchall()]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_migrating_twice_applies_nothing_new(db_path):
    with write_connection(db_path) as conn:
        migrate(conn)
        applied = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
    assert applied == SCHEMA_VERSION


def test_store_with_newer_schema_is_refused(db_path):
    with write_connection(db_path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (?, now()::TIMESTAMP)", [SCHEMA_VERSION + 1])
    with pytest.raises(StoreError, match="newer"), write_connection(db_path):
        pass


@pytest.mark.parametrize("opener", [read_connection, write_connection])
@pytest.mark.parametrize(
    "what, expected",
    [
        ("directory", "expected a DuckDB database file, not a directory"),
        ("text file", "expected a DuckDB database file (a budgetlens store)"),
    ],
)
def test_a_path_duckdb_cannot_open_is_a_store_error_naming_it(tmp_path, opener, what, expected):
    path = tmp_path / "store"
    if what == "directory":
        path.mkdir()
    else:
        path.write_text("name,value\n")
    with pytest.raises(StoreError, match="cannot open the store") as error, opener(path):
        pass
    assert str(error.value).startswith(f"{path}: ") and expected in str(error.value)


def test_reading_a_missing_store_raises_store_missing(db_path):
    with pytest.raises(StoreMissing, match="no budgetlens store"), read_connection(db_path):
        pass


@pytest.mark.system  # store writes: seconds
def test_same_batch_twice_is_stored_once(store_path):
    calls = [_call("r1", 1), _call("r1", 2)]
    events = [dict(event_id="r1.e0", run_id="r1", name="budgetlens.warning", ts_utc=T0)]
    with write_connection(store_path) as conn:
        first = write_batch(conn, calls, [], events)
        second = write_batch(conn, calls, [], events)
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM model_calls), (SELECT count(*) FROM budget_events),"
            " (SELECT count(*) FROM runs)"
        ).fetchone()
    assert (first.calls, first.events) == (2, 1)
    assert (second.calls, second.events) == (0, 0)
    assert counts == (2, 1, 1)


def test_run_record_values_win_over_call_aggregates(store_path):
    record = dict(
        run_id="r1",
        source="test",
        task_type="research",
        total_tokens=9999,
        turns=7,
        stop_reason="budget_tokens",
        limit_total_tokens=10000,
    )
    with write_connection(store_path) as conn:
        write_batch(conn, [_call("r1", 1), _call("r1", 2)], [record], [])
        run = _run(conn, "r1")
    assert run["total_tokens"] == 9999
    assert run["turns"] == 7
    assert run["input_tokens"] == 2000  # not in the record: aggregated from calls
    assert run["model_calls"] == 2
    assert run["stop_reason"] == "budget_tokens"
    assert run["limit_total_tokens"] == 10000


@pytest.mark.parametrize(
    "record_tool_calls, tool_events, expected",
    [
        (None, 0, None),  # no source counts tool calls: unknown, not 0
        (0, 0, 0),  # a source that knows the run made none
        (None, 2, 2),  # counted from budgetlens.tool_call events
        (5, 2, 5),  # the run record wins
    ],
)
@pytest.mark.system  # store writes: seconds
def test_tool_calls_are_unknown_when_no_source_counts_them(
    store_path, record_tool_calls, tool_events, expected
):
    record = dict(run_id="r1", source="test", tool_calls=record_tool_calls)
    events = [
        dict(event_id=f"e{i}", run_id="r1", name="budgetlens.tool_call", ts_utc=T0, tool_name="shell")
        for i in range(tool_events)
    ]
    with write_connection(store_path) as conn:
        write_batch(conn, [_call("r1", 1)], [record], events)
        incremental = _run(conn, "r1")["tool_calls"]
        rebuild_runs(conn)
        rebuilt = _run(conn, "r1")["tool_calls"]
    assert incremental == rebuilt == expected


def test_unknown_usage_is_charged_its_reservation_never_zero(store_path):
    unknown = _call(
        "r1",
        2,
        input_tokens=None,
        output_tokens=None,
        total_tokens=None,
        cost_usd=None,
        usage_status="unknown",
        reserved_tokens=4000,
    )
    with write_connection(store_path) as conn:
        write_batch(conn, [_call("r1", 1), unknown], [], [])
        run = _run(conn, "r1")
    assert run["usage_status"] == "unknown"
    assert run["total_tokens"] == 1100 + 4000
    assert run["unknown_usage_calls"] == 1
    assert run["unpriced_calls"] == 0


def test_unpriced_run_has_null_cost_not_zero(store_path):
    with write_connection(store_path) as conn:
        write_batch(conn, [_call("r1", 1, cost_usd=None, response_model="my-llama")], [], [])
        run = _run(conn, "r1")
    assert run["cost_usd"] is None
    assert run["unpriced_calls"] == 1


def test_failed_call_without_record_makes_the_run_failed(store_path):
    with write_connection(store_path) as conn:
        write_batch(conn, [_call("r1", 1, error_type="RateLimitError")], [], [])
        assert _run(conn, "r1")["stop_reason"] == "failed"


@pytest.mark.parametrize(
    "row, message",
    [
        (
            {"span_id": "s", "run_id": "r", "source": "t", "usage_status": "reported", "prompt": "hi"},
            "unknown field",
        ),
        ({"span_id": "s", "run_id": "r", "source": "t"}, "usage_status"),
    ],
)
def test_malformed_call_row_is_refused_naming_the_field(row, message):
    from budgetlens.store.schema import MODEL_CALL_COLUMNS

    with pytest.raises(ValueError, match=message):
        rows_to_table("model_calls", MODEL_CALL_COLUMNS, [row])


_WRITER = textwrap.dedent("""
    import datetime as dt, os, sys, time
    from budgetlens.store import write_batch, write_connection
    path, batches, per_batch, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    t0 = dt.datetime(2026, 11, 2)
    while not os.path.exists(ready):      # start once the reader is up
        time.sleep(0.01)
    for b in range(batches):
        time.sleep(0.02)                  # a collector flushes a batch now and then
        calls = [dict(span_id=f"b{b}.r{i}.c1", run_id=f"b{b}.r{i}", source="test",
                      task_type="qa", start_utc=t0 + dt.timedelta(minutes=b), turn=1,
                      input_tokens=10, output_tokens=5, total_tokens=15,
                      usage_status="reported") for i in range(per_batch)]
        with write_connection(path, timeout_s=60) as conn:
            write_batch(conn, calls, [], [])
    print("writer done")
""")

_READER = textwrap.dedent("""
    import json, pathlib, sys, time
    from budgetlens.store import StoreMissing, read_connection
    path, expected = sys.argv[1], int(sys.argv[2])
    pathlib.Path(sys.argv[3]).touch()     # imports done: the writer may start
    seen, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with read_connection(path, timeout_s=60) as conn:
                n = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        except StoreMissing:
            continue
        except Exception as error:
            if "runs" in str(error) and "does not exist" in str(error):
                continue  # the writer has created the file but not yet the schema
            raise
        seen.append(n)
        if n >= expected:
            break
    print(json.dumps(seen))
""")


@pytest.mark.system
def test_writer_and_reader_processes_share_one_file_without_errors(db_path, python, tmp_path):
    batches, per_batch = 40, 25
    writer_py, reader_py = tmp_path / "writer.py", tmp_path / "reader.py"
    writer_py.write_text(_WRITER)
    reader_py.write_text(_READER)
    ready = tmp_path / "reader.ready"
    reader = subprocess.Popen(
        [python, str(reader_py), str(db_path), str(batches * per_batch), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer = subprocess.Popen(
        [python, str(writer_py), str(db_path), str(batches), str(per_batch), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    w_out, w_err = writer.communicate(timeout=180)
    r_out, r_err = reader.communicate(timeout=180)
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, r_err
    assert "Error" not in w_err and "Traceback" not in r_err
    seen = json.loads(r_out)
    assert seen == sorted(seen), "a reader never sees rows disappear"
    assert seen[-1] == batches * per_batch
    assert len(seen) > 1, "the reader read while the writer was writing"
    with read_connection(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == batches * per_batch


@pytest.mark.parametrize("opener", ["read", "write"])
def test_a_fifo_or_a_path_without_a_name_is_refused_at_once(tmp_path, opener):
    """Breaker round of 2026-12-03: a FIFO as --db hung ``runs``, ``sample`` and ``collector``."""
    import os

    from budgetlens.store import read_connection as read
    from budgetlens.store import write_connection as write

    fifo = tmp_path / "store.duckdb"
    os.mkfifo(fifo)
    open_store = read if opener == "read" else write
    with pytest.raises(StoreError, match="not a regular file"), open_store(fifo):
        pass
    with pytest.raises(StoreError, match="names no file"), open_store(tmp_path / ".."):
        pass
