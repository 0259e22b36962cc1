"""The collector's ingest path on a DuckLake (a DuckDB-file catalog, local data): a commit happens
once, the lake hands the file store's Python types, and ``/metrics`` equals the file store's."""

from __future__ import annotations

import time

import pytest
from _collector_helpers import SpanRecorder
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry
from test_store_rollup import _stream

from budgetlens import semconv as sc
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import IngestQueue
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection, write_batch, write_connection
from budgetlens.store.lake import LATEST_SNAPSHOT, close_all

#: The budget families whose samples must agree between the two kinds of store.
BUDGET_FAMILIES = (
    "budgetlens_runs",
    "budgetlens_budget_hits",
    "budgetlens_run_tokens",
    "budgetlens_model_calls",
    "budgetlens_tokens",
    "budgetlens_cost_usd",
    "budgetlens_unpriced_calls",
    "budgetlens_unknown_usage_calls",
    "budgetlens_interventions",
)


@pytest.fixture
def lake(tmp_path, monkeypatch):
    """A fresh DuckLake location (DuckDB-file catalog) and a journal directory of its own."""
    monkeypatch.setenv("BUDGETLENS_JOURNAL_DIR", str(tmp_path / "lake.journal"))
    yield f"ducklake:{tmp_path / 'catalog.ducklake'}?data_path={tmp_path / 'data'}/"
    close_all()


def _fleet_spans() -> list[list]:
    """Requests of real SDK spans: completed and budget-stopped runs, warnings, downgrades, an
    unpriced model, a run whose call spans arrive in a later request than its run span."""
    requests = []
    for index in range(12):
        recorder = SpanRecorder()
        stop = sc.STOP_BUDGET_TOKENS if index % 4 == 0 else sc.STOP_COMPLETED
        model = "gpt-4o" if index % 3 else "no-such-model"
        calls = [(model, 100 * (index + 1), 10 + index), ("gpt-4o-mini", 50, 5)]
        recorder.guard_run(f"run-{index}", f"task-{index % 3}", calls, stop_reason=stop, warnings=index % 2)
        spans = recorder.spans()
        if index == 5:  # the run span first, its calls in the next request
            run_span = [
                s for s in spans if s.attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.OPERATION_INVOKE_AGENT
            ]
            requests.append(run_span)
            requests.append([s for s in spans if s not in run_span])
        else:
            requests.append(spans)
    requests.append(requests[0])  # an exporter retry: counted once
    return requests


def _ingest(location, requests) -> CollectorMetrics:
    metrics = CollectorMetrics(CollectorRegistry())
    queue = IngestQueue(location, metrics=metrics, load_interval_s=0.05).start()
    try:
        for spans in requests:
            queue.submit(map_request(encode_spans(spans))).result(30)
            _wait(queue)
    finally:
        queue.close()
    return metrics


def _wait(queue: IngestQueue, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while queue.depth and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queue.depth == 0, f"{queue.depth} rows not loaded"


def _budget_samples(metrics: CollectorMetrics) -> dict:
    samples = {}
    for family in metrics.registry.collect():
        if family.name in BUDGET_FAMILIES:
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = round(sample.value, 12)
    return samples


@pytest.mark.system  # DuckLake: seconds each
def test_metrics_on_a_lake_equal_the_file_stores_for_the_same_spans(lake, tmp_path):
    requests = _fleet_spans()
    on_file = _budget_samples(_ingest(tmp_path / "file.duckdb", requests))
    on_lake = _budget_samples(_ingest(lake, requests))
    assert on_file == on_lake
    runs = {labels: v for (name, labels), v in on_lake.items() if name == "budgetlens_runs_total"}
    assert sum(runs.values()) == 12  # every run once, the retry not again
    # the run metrics carry the attribution labels too (issue 19): task-0's runs across them
    task0 = [
        value
        for (name, labels), value in on_lake.items()
        if name == "budgetlens_run_tokens_count" and ("task_type", "task-0") in labels
    ]
    assert sum(task0) == 4


@pytest.mark.system  # DuckLake: seconds each
def test_a_metrics_error_after_a_commit_never_commits_the_group_again(lake, monkeypatch):
    metrics = CollectorMetrics(CollectorRegistry())

    def broken(*_args):  # what a Decimal in run_tokens.observe used to raise
        raise TypeError("unsupported operand type(s)")

    monkeypatch.setattr(metrics, "observe_write", broken)
    with write_connection(lake) as conn:
        before = conn.execute(LATEST_SNAPSHOT).fetchone()[0]
    queue = IngestQueue(lake, metrics=metrics, load_interval_s=0.05).start()
    try:
        requests = _fleet_spans()[:3]
        for spans in requests:  # one request, one group, one commit each
            queue.submit(map_request(encode_spans(spans))).result(30)
            _wait(queue)
    finally:
        queue.close()
    with read_connection(lake) as conn:
        after = conn.execute(LATEST_SNAPSHOT).fetchone()[0]
        stored = conn.execute("SELECT count(*), count(DISTINCT call_id) FROM model_calls").fetchone()
        staged = conn.execute("SELECT count(*), count(DISTINCT call_id) FROM staged_model_calls").fetchone()
    assert stored == staged == (6, 6)  # each group staged once (a re-commit would stage it again)
    assert after - before <= 2 * len(requests)  # a stage per group, at most a fold per stage


@pytest.mark.system  # DuckLake: seconds each
def test_a_lake_write_returns_the_python_types_of_a_file_store_write(lake, tmp_path):
    results = []
    for location in (tmp_path / "file.duckdb", lake):
        with write_connection(location) as conn:
            for calls, records, events in _stream(seed=3, runs=8, batches=3):
                result = write_batch(conn, calls, records, events)
        results.append(result)
    for name in ("new_calls", "new_records", "new_events", "runs_rows"):
        on_file, on_lake = (getattr(result, name) for result in results)
        assert on_lake.schema == on_file.schema, name
    totals = results[1].runs_rows.column("total_tokens").to_pylist()
    assert totals and all(type(value) is int for value in totals if value is not None)


@pytest.mark.system  # DuckLake: seconds each
@pytest.mark.parametrize("seed", range(3))
def test_staged_twice_and_folded_at_any_point_the_lake_equals_the_file_store(lake, tmp_path, seed):
    """Every batch staged twice (two collectors, or a replay), folds at random points, the
    folded rows cleaned up on the way: the same rows and rollup as the file store."""
    import random

    from test_store_rollup import _runs

    from budgetlens.store import lake_ingest

    stream = list(_stream(seed, runs=25, batches=12))
    with write_connection(tmp_path / "file.duckdb") as conn:
        for batch in stream:
            write_batch(conn, *batch)
        expected = _runs(conn)
        expected_calls = conn.execute("SELECT count(*) FROM model_calls").fetchone()[0]
    rng = random.Random(seed)
    with write_connection(lake) as conn:
        for batch in stream:
            assert lake_ingest.stage_batch(conn, *batch) == lake_ingest.stage_batch(conn, *batch)
            if rng.random() < 0.4:
                lake_ingest.fold(conn)
            if rng.random() < 0.2:
                lake_ingest.clean_staged(conn)
        assert lake_ingest.fold_all(conn) <= 1 and lake_ingest.unfolded_rows(conn) == 0
        assert lake_ingest.fold(conn) is None  # nothing left: no commit
        assert _runs(conn) == expected and expected
        stored = conn.execute("SELECT count(*), count(DISTINCT call_id) FROM model_calls").fetchone()
        assert stored == (expected_calls, expected_calls)
        lake_ingest.clean_staged(conn)
        assert conn.execute("SELECT count(*) FROM staged_model_calls").fetchone()[0] == 0


@pytest.mark.system  # a live collector waiting on its store: seconds
def test_a_collector_acknowledges_while_its_replay_waits_for_the_store(tmp_path):
    """``start(replay_in_background=True)`` (the CLI's): the journal's batches are queued, not
    loaded, so a store that cannot be written does not hold up the start; new requests are
    journaled meanwhile, and everything loads once the store is writable."""
    from budgetlens.ingest.journal import Journal, encode_batch
    from budgetlens.ingest.queue import journal_dir

    db_path = tmp_path / "store.duckdb"
    mapped = [map_request(encode_spans(spans)) for spans in _fleet_spans()[:4]]
    rows = [max(1, sum(len(table) for table in m.tables())) for m in mapped]
    journal = Journal(journal_dir(db_path))
    for m in mapped[:3]:
        journal.append(encode_batch(*m.tables()))
    journal.sync()
    journal.close()
    db_path.mkdir()  # the store cannot be opened yet
    queue = IngestQueue(db_path, load_interval_s=0.05).start(replay_in_background=True)
    try:
        assert queue.depth == sum(rows[:3])  # queued, not loaded
        queue.submit(mapped[3]).result(10)  # acknowledged meanwhile
        assert queue.depth == sum(rows) and queue.alive
        db_path.rmdir()
        _wait(queue)
    finally:
        queue.close()
    with read_connection(db_path) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert runs == 4


def test_a_fold_that_loses_waits_longer_and_one_done_by_another_collector_is_skipped(monkeypatch):
    """The fold schedule (``budgetlens.ingest.fold.Folder``) with a fake clock and store: a lost
    fold waits twice as long each time (jittered, capped), a won fold is counted and resets the
    wait, and rows other collectors' folds already stored cost no fold."""
    import contextlib

    import duckdb

    from budgetlens.ingest import fold as fold_module
    from budgetlens.store import WriteResult, lake_ingest

    clock = [100.0]
    outcomes: list = []
    folds: list = []
    observed: list = []

    def fake_fold(conn):
        folds.append(clock[0])
        outcome = outcomes.pop(0)
        if outcome == "lose":
            raise duckdb.TransactionException("Transaction conflict - another transaction has altered it")
        return outcome

    monkeypatch.setattr(lake_ingest, "fold", fake_fold)
    folded_elsewhere = [False]
    monkeypatch.setattr(lake_ingest, "is_folded", lambda conn, bound: folded_elsewhere[0])
    folder = fold_module.Folder(
        "ducklake:x.ducklake",
        observed.append,
        clock=lambda: clock[0],
        connect=lambda location: contextlib.nullcontext(object()),
    )
    waits = []
    outcomes += ["lose", "lose", "lose"]
    for _ in range(3):
        assert folder.fold_if_due() is False and folder.due
        waits.append(folder.wait_s())
        assert folder.fold_if_due() is False and len(folds) == len(waits)  # not before the wait
        clock[0] += waits[-1]
    assert 1.5 <= waits[0] <= 2.5 and 3.0 <= waits[1] <= 5.0
    assert 3.0 <= waits[2] <= fold_module.MAX_FOLD_BACKOFF_S * 1.25  # capped
    outcomes.append(WriteResult(calls=3))
    assert folder.fold_if_due() is True and not folder.due and observed == [WriteResult(calls=3)]
    assert 0.75 <= folder.wait_s() - fold_module.IDLE_FOLD_INTERVAL_S <= 1.25  # the wait reset
    folder.staged((5, -1, 2))
    clock[0] += folder.wait_s()
    folded_elsewhere[0] = True
    assert folder.fold_if_due() is True and folder.skipped == 1 and len(folds) == 4  # no fold
    folder.staged((6, -1, 2))
    folder.staged(None)  # a stage whose bound is unknown: fold whatever the watermarks say
    clock[0] += folder.wait_s()
    outcomes.append(None)
    assert folder.fold_if_due() is True and len(folds) == 5 and len(observed) == 1
