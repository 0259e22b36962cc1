"""Two collectors and a dashboard on one DuckLake with a real PostgreSQL catalog.

The real OTel SDK exporter sends to both collectors: some batches to one, some to both (a load
balancer retry), and runs whose run span goes to one collector and whose call spans go to the
other. One collector is killed with -9 mid-stream and started again on its journal. Then every
acknowledged span is stored exactly once, and each run's rollup counts the calls that reached
either collector.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest
import requests
from _collector_helpers import SpanRecorder
from _postgres import PostgresServer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from test_store_rollup import _stream

from budgetlens import semconv as sc
from budgetlens.config import ENV_DB, ENV_JOURNAL_DIR
from budgetlens.store import read_connection, sql, write_connection
from budgetlens.store.lake import close_all

pytestmark = [
    pytest.mark.system,
]

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


@pytest.fixture(scope="module")
def postgres():
    with PostgresServer() as server:
        yield server
    close_all()


class Collector:
    """``budgetlens collector`` on the lake as a subprocess with its own journal directory."""

    def __init__(self, lake: str, journal: Path, timeout_s: float = 180.0):
        env = dict(os.environ, **{ENV_JOURNAL_DIR: str(journal)})
        self.log = journal.with_suffix(".log")
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "budgetlens.cli", "-v", "collector", "--db", lake, "--port", "0"],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        ready = select.select([self.process.stdout], [], [], timeout_s)[0]
        line = self.process.stdout.readline() if ready else ""
        if "listening on" not in line:
            self.process.kill()
            tail = "".join(self.log.read_text().splitlines(keepends=True)[-30:])
            raise RuntimeError(f"collector did not start in {timeout_s:.0f} s: {line}{tail}")
        self.url = line.rsplit(" ", 1)[1].strip()

    def stop(self) -> None:
        """SIGTERM: the collector loads its journal into the lake, then exits."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(120)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


def _span_id(span) -> str:
    return format(span.context.span_id, "016x")


def _runs(count: int):
    """``count`` guard runs of 3 calls each; returns (run span, call spans) per run id."""
    recorder = SpanRecorder()
    for index in range(count):
        calls = [("gpt-4o", 100 + index, 10), ("gpt-4o", 200, 20), ("gpt-4o-mini", 300, 30)]
        recorder.guard_run(f"lake-run-{index:04d}", "lake_test", calls, tools=1)
    by_run: dict[str, dict] = {}
    for span in recorder.spans():
        run_id = span.attributes[sc.BUDGET_RUN_ID]
        entry = by_run.setdefault(run_id, {"run": None, "calls": []})
        if span.attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.OPERATION_INVOKE_AGENT:
            entry["run"] = span
        else:
            entry["calls"].append(span)
    return by_run


def _send(url: str, batches, acknowledged: Counter, lock: threading.Lock, stop: threading.Event):
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=5)
    for batch in batches:
        if stop.is_set():
            return
        if exporter.export(batch) == SpanExportResult.SUCCESS:
            with lock:
                acknowledged.update(_span_id(span) for span in batch)


def test_two_collectors_on_one_lake_store_each_acknowledged_span_once(postgres, tmp_path, monkeypatch):
    lake = postgres.location("two_collectors", tmp_path / "lake-data")
    runs = _runs(240)
    to_a, to_b = [], []
    for index, (_run_id, entry) in enumerate(sorted(runs.items())):
        spans = [entry["run"], *entry["calls"]]
        if index % 3 == 0:  # a load balancer retry: the same spans to both collectors
            to_a.append(spans)
            to_b.append(spans)
        elif index % 3 == 1:  # the run span to one collector, its calls to the other
            to_a.append([entry["run"]])
            to_b.append(entry["calls"])
        else:
            (to_a if index % 2 else to_b).append(spans)
    acknowledged: Counter = Counter()
    lock = threading.Lock()
    a = Collector(lake, tmp_path / "journal-a")
    b = Collector(lake, tmp_path / "journal-b")
    try:
        stop_b = threading.Event()
        senders = [
            threading.Thread(target=_send, args=(a.url, to_a, acknowledged, lock, threading.Event())),
            threading.Thread(target=_send, args=(b.url, to_b[:120], acknowledged, lock, stop_b)),
        ]
        for sender in senders:
            sender.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and requests.get(f"{b.url}/healthz", timeout=5).status_code == 200:
            with lock:
                if len(acknowledged) >= 200:
                    break
            time.sleep(0.01)
        b.kill()  # mid-stream: b's requests are in flight, its acknowledged rows partly loaded
        stop_b.set()
        senders[1].join(60)
        _dashboard_reads_the_lake_while_collectors_write(lake, monkeypatch)
        b = Collector(lake, tmp_path / "journal-b")  # replays b's journal
        second = threading.Thread(target=_send, args=(b.url, to_b, acknowledged, lock, threading.Event()))
        second.start()
        second.join(300)
        senders[0].join(300)
    finally:
        a.stop()
        b.stop()
    close_all()
    with read_connection(lake) as conn:
        stored = conn.execute("SELECT span_id, run_id FROM model_calls").fetchall()
        records = conn.execute("SELECT run_id FROM run_records").fetchall()
        rollup = dict(conn.execute("SELECT run_id, model_calls FROM runs").fetchall())
        totals = dict(conn.execute("SELECT run_id, total_tokens FROM runs").fetchall())
    stored_ids = Counter(span_id for span_id, _ in stored)
    call_ids = {_span_id(s) for entry in runs.values() for s in entry["calls"]}
    run_span_ids = {_span_id(entry["run"]): run_id for run_id, entry in runs.items()}
    assert max(stored_ids.values()) == 1, "a span is stored twice"
    assert Counter(run_id for (run_id,) in records).most_common(1)[0][1] == 1, "a run record is stored twice"
    assert {s for s in acknowledged if s in call_ids} == set(stored_ids), "stored calls != acknowledged calls"
    acknowledged_runs = {run_span_ids[s] for s in acknowledged if s in run_span_ids}
    assert acknowledged_runs <= {run_id for (run_id,) in records}
    for run_id, entry in runs.items():  # the rollup counts the calls that reached either collector
        calls = sum(1 for s in entry["calls"] if _span_id(s) in acknowledged)
        if calls or run_id in acknowledged_runs:
            assert rollup[run_id] == calls, run_id
        if run_id in acknowledged_runs:  # the run span's totals win: 3 calls' tokens
            index = int(run_id.rsplit("-", 1)[1])
            assert totals[run_id] == (100 + index + 10) + 220 + 330
    assert len(acknowledged) > 0 and any(n > 1 for n in acknowledged.values())  # duplicates were sent


def _dashboard_reads_the_lake_while_collectors_write(lake: str, monkeypatch) -> None:
    """The dashboard's entrypoint (Streamlit AppTest) renders from the lake while a collector
    writes; its Runs tile shows at least the runs committed before it started."""
    from streamlit.testing.v1 import AppTest

    deadline = time.monotonic() + 120
    committed = 0
    while committed == 0 and time.monotonic() < deadline:
        with read_connection(lake) as conn:
            row = conn.execute("SELECT count(*) FROM runs").fetchone()
        committed = row[0] if row else 0
        time.sleep(0.5)
    assert committed > 0, "no run committed to the lake within 120 s"
    monkeypatch.setenv(ENV_DB, lake)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    tiles = {m.label: m.value for m in at.metric}
    assert int(tiles["Runs"].replace(",", "")) >= committed


def test_stages_never_conflict_and_of_two_folds_at_once_one_commits(postgres, tmp_path):
    """Two DuckDB instances (as two collectors) on one lake stage the same batch in interleaved
    transactions: both commit (inserts only). Their folds overlap: the one that commits second
    conflicts on the fold token, and after it the lake holds every row once."""
    from budgetlens.store import lake_ingest
    from budgetlens.store.lake import attach, rollback
    from budgetlens.store.location import parse_lake
    from budgetlens.store.writer import _TABLES, _as_table

    location = parse_lake(postgres.location("two_writers", tmp_path / "data"))
    with write_connection(location):
        pass  # create and migrate
    close_all()
    calls, records, events = next(_stream(seed=7, runs=6, batches=1))
    first, second = attach(location, create=False), attach(location, create=False)
    for conn in (first, second):
        for (table, columns, key, name), rows in zip(_TABLES, (calls, records, events)):
            conn.register(name, _as_table(table, columns, key, rows))
        conn.execute("BEGIN TRANSACTION")
        for statement in lake_ingest._STAGE.values():
            conn.execute(statement)
    first.execute("COMMIT")
    second.execute("COMMIT")  # no conflict: a stage only inserts
    second.execute("BEGIN TRANSACTION")  # a fold of the second collector, under way ...
    second.execute(lake_ingest.SELECT_MARKS).fetchone()
    second.execute(sql.LAKE_TAKE_FOLD_TOKEN)
    folded = lake_ingest.fold(first)  # ... when the first collector's fold commits
    with pytest.raises(duckdb.Error, match="onflict"):
        second.execute("COMMIT")
    rollback(second)
    assert folded is not None and folded.calls == len(calls)
    assert lake_ingest.fold(second) is None  # nothing left unfolded
    staged = first.execute("SELECT count(*) FROM staged_model_calls").fetchone()[0]
    stored = first.execute("SELECT count(*), count(DISTINCT call_id) FROM model_calls").fetchone()
    runs = first.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchone()
    assert staged == 2 * len(calls) and stored == (len(calls), len(calls))
    assert runs[0] == runs[1] == len({row["run_id"] for row in calls})
    first.close()
    second.close()


def _healthz(url: str) -> dict:
    """/healthz's body: 200 while the store is written, 503 with the reason from the first
    failed load on (issue 24: never ok beside a store error), never another status."""
    response = requests.get(f"{url}/healthz", timeout=5)
    assert response.status_code in (200, 503), response.text
    body = response.json()
    assert (response.status_code == 503) == (body["status"] != "ok"), response.text
    if body["store_error"] is not None:
        assert body["status"] == f"store unavailable: {body['store_error']}", response.text
    return body


def test_a_collector_journals_while_postgres_is_down_and_after_kill_9_and_loads_when_it_is_back(
    postgres, tmp_path
):
    """PostgreSQL stops under a running collector: requests are still acknowledged and
    /healthz says why nothing loads; the collector is killed with -9 and started again while
    PostgreSQL is still down (it listens at once, its journal waiting); PostgreSQL comes back:
    every acknowledged span is stored once."""
    lake = postgres.location("pg_down", tmp_path / "lake-data")
    runs = sorted(_runs(30).items())
    batches = [[entry["run"], *entry["calls"]] for _, entry in runs]
    acknowledged: Counter = Counter()
    lock, go = threading.Lock(), threading.Event()
    collector = Collector(lake, tmp_path / "journal")
    try:
        _send(collector.url, batches[:10], acknowledged, lock, threading.Event())
        postgres.stop()
        try:
            _send(collector.url, batches[10:20], acknowledged, lock, threading.Event())
            assert len(acknowledged) == 20 * 4, "requests were refused while PostgreSQL was down"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _healthz(collector.url)["store_error"] is None:
                time.sleep(0.2)
            health = _healthz(collector.url)
            assert health["store_error"] and health["backlog_spans"] > 0
            assert health["status"].startswith("store unavailable"), health  # answered 503
            collector.kill()
            collector = Collector(lake, tmp_path / "journal")  # replays once the lake is back
            assert _healthz(collector.url)["backlog_spans"] > 0
            _send(collector.url, batches[20:], acknowledged, lock, go)
        finally:
            postgres.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _healthz(collector.url)["backlog_spans"]:
            time.sleep(0.5)
    finally:
        collector.stop()
    close_all()
    with read_connection(lake) as conn:
        stored = Counter(row[0] for row in conn.execute("SELECT span_id FROM model_calls").fetchall())
        run_ids = [row[0] for row in conn.execute("SELECT run_id FROM runs").fetchall()]
    call_ids = {_span_id(s) for _, entry in runs for s in entry["calls"]}
    assert set(stored) == {s for s in acknowledged if s in call_ids} and len(stored) == 90
    assert max(stored.values()) == 1 and sorted(run_ids) == sorted(run_id for run_id, _ in runs)
