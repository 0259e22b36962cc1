"""Issue 25's store process against a real collector subprocess fed by the real OTel SDK
exporter: readers through the collector see new data while it writes (also with four busy
readers, issue 23's starvation), analysis views read the same through the endpoint as from the
file, the fallback once it is gone, the SQL endpoint's refusals, kill -9 after acknowledgement."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import duckdb
import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens.analysis import views
from budgetlens.analysis.views import Filters
from budgetlens.store import connect, read_connection
from budgetlens.store.readers import RemoteStore, discover, sidecar_paths

pytestmark = pytest.mark.system


def _spans(prefix: int, count: int):
    return SpanRecorder().chat_calls(count, prefix * 1_000_000)


def _export(url: str, spans) -> list[str]:
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    return [format(span.context.span_id, "016x") for span in spans]


def _span_ids(conn) -> set[str]:
    return {row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall()}


def _wait_visible(db_path, wanted: set[str], timeout_s: float = 30.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        with connect(db_path) as conn:
            assert isinstance(conn, RemoteStore)
            seen = _span_ids(conn)
        if wanted <= seen or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def test_readers_through_the_collector_see_new_data_while_it_writes(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (_, url):
        assert discover(db_path) is not None
        first = set(_export(url, _spans(1, 50)))
        assert first <= _wait_visible(db_path, first)
        second = set(_export(url, _spans(2, 50)))
        assert first | second <= _wait_visible(db_path, second)


def test_four_busy_readers_do_not_keep_new_data_out(tmp_path, python):
    """Issue 23: four readers each busy 0.4 s, idle 0.05 s (here through the collector, as the
    dashboard reads now) no longer starve the writer: new spans become visible while they run."""
    db_path = tmp_path / "store.duckdb"
    stop = threading.Event()
    errors: list[BaseException] = []

    def busy_reader():
        try:
            while not stop.is_set():
                with connect(db_path) as conn:
                    ends = time.monotonic() + 0.4
                    while time.monotonic() < ends:
                        conn.execute("SELECT count(*), sum(input_tokens) FROM model_calls").fetchall()
                time.sleep(0.05)
        except BaseException as error:
            errors.append(error)

    with collector_process(python, db_path) as (_, url):
        _export(url, _spans(1, 10))
        readers = [threading.Thread(target=busy_reader) for _ in range(4)]
        for reader in readers:
            reader.start()
        try:
            new = set(_export(url, _spans(2, 200)))
            seen = _wait_visible(db_path, new)
            health = requests.get(f"{url}/healthz", timeout=5).json()
        finally:
            stop.set()
            for reader in readers:
                reader.join(30)
    assert not errors
    assert new <= seen
    assert health["store_error"] is None


def test_analysis_views_read_the_same_through_the_collector_as_from_the_file(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    recorder = SpanRecorder()
    for run in range(6):
        calls = [("gpt-4o", 1_000 * (run + 1), 10 * (i + 1)) for i in range(3)]
        recorder.guard_run(run_id=f"run-{run}", task_type="triage" if run % 2 else "code", calls=calls)
    spans = recorder.spans()
    f = Filters()
    with collector_process(python, db_path) as (_, url):
        _export(url, spans)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with connect(db_path) as conn:
                if views.data_extent(conn)[2] == 6:
                    break
            time.sleep(0.1)
        with connect(db_path) as conn:
            assert isinstance(conn, RemoteStore)
            through = (views.data_extent(conn), views.baselines(conn, f), views.runs_table(conn, f))
    info, token = sidecar_paths(db_path)
    assert not info.exists() and not token.exists()  # removed at a clean exit
    with connect(db_path) as conn:  # no collector now: the file itself
        assert isinstance(conn, duckdb.DuckDBPyConnection)
        direct = (views.data_extent(conn), views.baselines(conn, f), views.runs_table(conn, f))
    assert through[0] == direct[0]
    assert through[1].astype(str).equals(direct[1].astype(str))
    assert list(through[2]["run_id"]) == list(direct[2]["run_id"])


def test_the_sql_endpoint_refuses_writes_several_statements_and_a_bad_token(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (_, url):
        _export(url, _spans(1, 5))
        endpoint = discover(db_path)
        assert endpoint is not None
        good = {"Authorization": f"Bearer {endpoint.token}"}

        def post(sql, headers=good):
            return requests.post(f"{url}/v1/store/query", json={"sql": sql}, headers=headers, timeout=10)

        assert post("SELECT 1", {"Authorization": "Bearer wrong"}).status_code == 401
        assert post("SELECT 1", {}).status_code == 401
        refused = post("DELETE FROM model_calls")
        assert refused.status_code == 400 and "got DELETE" in refused.json()["error"]
        refused = post("SELECT 1; DROP TABLE runs")
        assert refused.status_code == 400 and "exactly one statement" in refused.json()["error"]
        cli = subprocess.run(
            [
                python,
                "-m",
                "budgetlens.cli",
                "store",
                "sql",
                "--db",
                str(db_path),
                "SELECT count(*) AS n FROM model_calls",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.splitlines()[0] == "n"
        refused_cli = subprocess.run(
            [python, "-m", "budgetlens.cli", "store", "sql", "--db", str(db_path), "DROP TABLE runs"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused_cli.returncode == 2 and "got DROP" in refused_cli.stderr
        with connect(db_path) as conn:
            assert conn.execute("SELECT count(*) FROM model_calls").fetchone() == (5,)


def test_kill_9_after_acknowledgement_loses_nothing(tmp_path, python):
    """Acknowledged spans survive kill -9 of a collector holding the store open: those already
    committed are in DuckDB's WAL, the others in the journal, which the next start replays."""
    db_path = tmp_path / "store.duckdb"
    acknowledged: set[str] = set()
    with collector_process(python, db_path) as (process, url):
        acknowledged |= set(_export(url, _spans(1, 100)))
        _wait_visible(db_path, acknowledged)
        acknowledged |= set(_export(url, _spans(2, 100)))  # perhaps not loaded yet
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    assert discover(db_path) is None  # its sidecar names a dead process
    with collector_process(python, db_path) as (_, url):
        seen = _wait_visible(db_path, acknowledged)
    assert acknowledged <= seen
    with read_connection(db_path) as conn:
        assert acknowledged <= _span_ids(conn)
