"""Issue 25's store process, fast parts: the statement check, the long-lived connection and its
checkpoints, the read endpoint (called directly, real DuckDB file), the wire format, discovery."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat

import duckdb
import pyarrow as pa
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from budgetlens.ingest.store_api import StoreApi
from budgetlens.store import connect, write_batch
from budgetlens.store.host import NotReadOnly, QueryTimeout, StoreHost, check_read_only
from budgetlens.store.readers import RemoteResult, discover, publish, sidecar_paths, unpublish
from budgetlens.store.wire import decode_params, encode_params


def _calls(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "span_id": f"s{start + i}",
            "trace_id": "t1",
            "run_id": f"run-{(start + i) % 3}",
            "source": "otlp",
            "usage_status": "reported",
            "input_tokens": 10 + i,
            "output_tokens": 1,
            "start_utc": dt.datetime(2026, 1, 1, 12, 0),
        }
        for i in range(n)
    ]


@pytest.fixture
def host(tmp_path):
    store = StoreHost(tmp_path / "s.duckdb", checkpoint_interval_s=30.0)
    yield store
    store.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "with a as (select 1 as x) select * from a",
        "FROM model_calls",
        "select count(*) from runs;",
    ],
)
def test_one_select_is_read_only(sql):
    check_read_only(sql)


@pytest.mark.parametrize(
    ("sql", "rule"),
    [
        ("INSERT INTO runs (run_id) VALUES ('x')", "got INSERT"),
        ("DELETE FROM model_calls", "got DELETE"),
        ("UPDATE runs SET task_type = 'x'", "got UPDATE"),
        ("SELECT 1; DROP TABLE runs", "exactly one statement"),
        ("CREATE TABLE x (a INT)", "got CREATE"),
        ("ATTACH '/tmp/other.duckdb'", "got ATTACH"),
        ("COPY runs TO '/tmp/out.csv'", "got COPY"),
        ("", "exactly one statement"),
        ("SELEKT 1", "cannot be parsed"),
    ],
)
def test_anything_but_one_select_is_refused_with_the_rule(sql, rule):
    with pytest.raises(NotReadOnly, match=rule):
        check_read_only(sql)


def test_a_session_also_takes_create_and_drop_for_temp_tables():
    check_read_only("CREATE TEMP TABLE z AS SELECT 1", session=True)
    check_read_only("DROP TABLE IF EXISTS z", session=True)
    with pytest.raises(NotReadOnly, match="got INSERT"):
        check_read_only("INSERT INTO z VALUES (1)", session=True)


@pytest.mark.system  # reader processes: seconds
def test_readers_see_each_commit_of_the_long_lived_connection(host):
    with host.write() as conn:
        write_batch(conn, _calls(5))
    assert host.query("SELECT count(*) AS n FROM model_calls").to_pylist() == [{"n": 5}]
    with host.write() as conn:
        write_batch(conn, _calls(5, start=5))
    assert host.query("SELECT count(*) AS n FROM model_calls").to_pylist() == [{"n": 10}]


def test_the_read_transaction_cannot_write_the_store_even_past_the_check(host):
    with host.write() as conn:
        write_batch(conn, _calls(1))
    cursor = host._open().cursor()
    with pytest.raises(duckdb.TransactionException, match="read-only"):
        host._run(cursor, "INSERT INTO run_records (run_id, source) VALUES ('x', 'y')", None)
    assert host.query("SELECT count(*) AS n FROM run_records WHERE run_id = 'x'").to_pylist() == [{"n": 0}]


def test_sql_cannot_read_other_files(host, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    with host.write():
        pass
    with pytest.raises(duckdb.PermissionException):
        host.query(f"SELECT * FROM read_text('{secret}')")


def test_a_session_keeps_its_temp_tables_and_only_them(host):
    with host.write() as conn:
        write_batch(conn, _calls(3))
    session = host.open_session()
    host.query("CREATE OR REPLACE TEMP TABLE picked AS SELECT * FROM model_calls", session=session)
    assert host.query("SELECT count(*) AS n FROM picked", session=session).to_pylist() == [{"n": 3}]
    with pytest.raises(duckdb.TransactionException):  # a table in the store: refused
        host.query("CREATE TABLE stored AS SELECT 1 AS a", session=session)
    host.close_session(session)
    with pytest.raises(KeyError, match="unknown or expired"):
        host.query("SELECT 1", session=session)


@pytest.mark.system  # checkpoints of a store file: seconds
def test_timed_checkpoint_folds_the_wal_into_the_file(host):
    with host.write() as conn:
        write_batch(conn, _calls(50))
    assert host.wal_bytes() > 0  # a long-lived connection: the commit did not checkpoint
    assert not host.checkpoint_if_due()  # not due yet
    assert host.checkpoint_due(now=host._last_checkpoint + 30.0)
    assert host.checkpoint_if_due(now=host._last_checkpoint + 30.0)
    assert host.wal_bytes() == 0 and host.checkpoints == 1
    assert host.query("SELECT count(*) AS n FROM model_calls").to_pylist() == [{"n": 50}]


def test_a_wal_past_its_size_is_checkpointed_on_commit(tmp_path):
    sized = StoreHost(tmp_path / "s.duckdb", checkpoint_wal_bytes=4096)
    try:
        with sized.write() as conn:
            write_batch(conn, _calls(500))
        assert sized.wal_bytes() == 0
    finally:
        sized.close()


@pytest.mark.system  # checkpoints of a store file: seconds
def test_close_checkpoints_and_the_file_reads_back(tmp_path):
    path = tmp_path / "s.duckdb"
    store = StoreHost(path)
    with store.write() as conn:
        write_batch(conn, _calls(7))
    store.close()
    assert not os.path.exists(f"{path}.wal") or os.path.getsize(f"{path}.wal") == 0
    with connect(path) as conn:  # no collector: the file itself
        assert isinstance(conn, duckdb.DuckDBPyConnection)
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone() == (7,)


def test_read_connection_in_the_same_process_reads_through_the_host(host):
    from budgetlens.store import read_connection

    with host.write() as conn:
        write_batch(conn, _calls(4))
    with read_connection(host.path) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone() == (4,)


def _client(host: StoreHost | None, token: str = "tok") -> TestClient:
    return TestClient(Starlette(routes=StoreApi(host, token).routes()))


def _query(client: TestClient, body: dict, token: str = "tok"):
    return client.post("/v1/store/query", json=body, headers={"Authorization": f"Bearer {token}"})


def test_the_endpoint_answers_arrow_for_a_select(host):
    with host.write() as conn:
        write_batch(conn, _calls(6))
    response = _query(
        _client(host),
        {
            "sql": "SELECT count(*) AS n FROM model_calls WHERE start_utc >= $start",
            "params": encode_params({"start": dt.datetime(2026, 1, 1)}),
        },
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(response.content).read_all()
    assert table.to_pylist() == [{"n": 6}]


@pytest.mark.parametrize(
    ("sql", "status", "message"),
    [
        (
            "INSERT INTO runs (run_id) VALUES ('x')",
            400,
            "only SELECT statements are allowed here (got INSERT)",
        ),
        ("SELECT 1; SELECT 2", 400, "exactly one statement is allowed (got 2)"),
        ("SELECT * FROM no_such_table", 400, "query failed: CatalogException"),
    ],
)
def test_the_endpoint_refuses_with_a_clear_error(host, sql, status, message):
    with host.write():
        pass
    response = _query(_client(host), {"sql": sql})
    assert response.status_code == status
    assert message in response.json()["error"]


def test_the_endpoint_refuses_a_wrong_or_missing_token(host):
    client = _client(host)
    assert _query(client, {"sql": "SELECT 1"}, token="nope").status_code == 401
    response = client.post("/v1/store/query", json={"sql": "SELECT 1"})
    assert response.status_code == 401 and response.json()["error"] == "missing or wrong bearer token"


@pytest.mark.parametrize(
    ("body", "message"),
    [({"params": []}, "sql: required"), ({"sql": "SELECT 1", "params": 3}, "params: a JSON list or object")],
)
def test_the_endpoint_names_the_bad_field(host, body, message):
    response = _query(_client(host), body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_the_endpoint_without_a_file_store_says_so():
    response = _query(_client(None), {"sql": "SELECT 1"})
    assert response.status_code == 503 and "no store file" in response.json()["error"]


def test_params_survive_the_wire():
    params = {
        "start": dt.datetime(2026, 5, 1, 8, 30),
        "day": dt.date(2026, 5, 1),
        "names": ["a", None],
        "n": 3,
    }
    assert decode_params(json.loads(json.dumps(encode_params(params)))) == params


def test_remote_results_read_as_duckdb_results():
    conn = duckdb.connect()
    table = conn.sql("SELECT sum(x) AS total, 1.25::DECIMAL(5, 2) AS d FROM range(4) t(x)").to_arrow_table()
    result = RemoteResult(table)
    assert (
        result.fetchall() == conn.execute("SELECT sum(x), 1.25::DECIMAL(5, 2) FROM range(4) t(x)").fetchall()
    )
    assert result.fetchone() is None
    frame = RemoteResult(table).df()
    assert frame["total"].tolist() == [6] and frame["d"].dtype == "float64"


def test_discovery_reads_the_sidecar_and_ignores_a_dead_collector(tmp_path):
    db = tmp_path / "s.duckdb"
    publish(db, "http://127.0.0.1:1", "tok")
    info, token = sidecar_paths(db)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    found = discover(db)
    assert found is not None and found.url == "http://127.0.0.1:1" and found.token == "tok"
    info.write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": 2**22 + 12345}))  # no such process
    assert discover(db) is None
    info.write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": os.getpid()}))
    unpublish(db)
    assert not info.exists() and not token.exists()


def test_a_published_collector_that_does_not_answer_falls_back_to_the_file(tmp_path):
    db = tmp_path / "s.duckdb"
    store = StoreHost(db)
    with store.write() as conn:
        write_batch(conn, _calls(2))
    store.close()
    publish(db, "http://127.0.0.1:9", "tok")  # this process is alive, nothing listens there
    try:
        with connect(db, timeout_s=1.0) as conn:
            assert isinstance(conn, duckdb.DuckDBPyConnection)
            assert conn.execute("SELECT count(*) FROM model_calls").fetchone() == (2,)
    finally:
        unpublish(db)


@pytest.mark.system  # a statement kept running for 3 s (until the read timeout)
def test_past_the_session_limit_the_least_recently_used_idle_session_is_closed(host):
    """Past ``MAX_SESSIONS`` the session closed is the one least recently used, not the first
    opened (a dashboard's what-if render keeps its temp table in a session it uses all along),
    and never one whose statement is running."""
    import threading

    from budgetlens.store.host import MAX_SESSIONS

    kept = host.open_session()
    host.query("CREATE TEMP TABLE mine AS SELECT 42 AS x", session=kept)
    others = [host.open_session() for _ in range(MAX_SESSIONS - 1)]
    host.query("SELECT * FROM mine", session=kept)  # now the most recently used
    extra = host.open_session()  # one past the limit: the least recently used goes
    assert host.query("SELECT * FROM mine", session=kept).to_pylist() == [{"x": 42}]
    with pytest.raises(KeyError, match="unknown or expired"):
        host.query("SELECT 1", session=others[0])

    busy = others[1]
    host.query("CREATE TEMP TABLE slow AS SELECT 7 AS x", session=busy)
    started, outcome = threading.Event(), []

    def long_statement() -> None:  # runs until the read timeout stops it
        started.set()
        try:
            host.query("SELECT count(*) FROM slow, range(1000000000000000)", session=busy, timeout_s=3.0)
        except QueryTimeout as error:
            outcome.append(error)

    worker = threading.Thread(target=long_statement)
    worker.start()
    started.wait()
    for session in [kept, extra, *others[2:]]:  # every other session used after the busy one started
        host.query("SELECT 1", session=session)
    assert worker.is_alive()  # its statement still runs
    host.open_session()
    worker.join()
    assert len(outcome) == 1
    assert host.query("SELECT x FROM slow", session=busy).to_pylist() == [{"x": 7}]
