"""The calls insert of a batch without response ids (every OTLP body) skips the anti-join on
stored response ids (``sql.INSERT_CALLS_WITHOUT_RESPONSE_IDS``): the same rows stored and
returned as the reference ``sql.INSERT_CALLS``, on the same batches; it inserts with ``DO
NOTHING``, and the stored calls re-sent with another digest are flagged and reported as the
reference's ``DO UPDATE`` branch does (``resends.flag_stored``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _collector_helpers import SpanRecorder
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from budgetlens.otlp.mapping import map_request
from budgetlens.otlp.memory import SpanMemory
from budgetlens.store import sql, write_batch, write_connection, writer

_TABLES = ("model_calls", "run_records", "budget_events", "run_totals", "runs")


def _batch(run_id: str, output_tokens: int = 10):
    recorder = SpanRecorder()
    recorder.guard_run(run_id, "insert-task", [("gpt-4o", 100, output_tokens), ("gpt-4o-mini", 50, 5)])
    return map_request(encode_spans(recorder.spans()), price=False, memory=SpanMemory()).tables()


def _with_call_ids_of(tables, other):
    """``tables``' calls under the ids of ``other``'s calls (a resend with other content)."""
    calls = tables[0]
    for name in ("call_id", "span_id", "trace_id", "run_id"):
        calls = calls.set_column(calls.schema.get_field_index(name), name, other[0].column(name))
    return (calls, *tables[1:])


def _joined(a, b):
    """One batch of the rows of batches ``a`` and ``b``."""
    return tuple(pa.concat_tables([x, y]) for x, y in zip(a, b))


def _stored(conn) -> dict[str, list[tuple]]:
    return {name: conn.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall() for name in _TABLES}


def _results(db_path, batches) -> tuple[list, dict]:
    results = []
    with write_connection(db_path) as conn:
        for batch in batches:
            result = write_batch(conn, *batch)
            resent = None if result.resent is None else sorted(result.resent.column("call_id").to_pylist())
            results.append((result.calls, result.records, result.events, result.runs, resent))
        return results, _stored(conn)


@pytest.mark.system  # store writes: seconds
def test_the_insert_without_response_ids_stores_and_returns_what_the_reference_does(tmp_path, monkeypatch):
    first, second = _batch("run-a"), _batch("run-b")
    batches = [
        first,
        second,
        first,  # an identical resend
        _with_call_ids_of(_batch("run-c", output_tokens=999), first),  # other content, same ids
        _with_call_ids_of(_batch("run-c", output_tokens=998), first),  # again: already flagged
        # new calls and a resend of run-b's with other content in one batch
        _joined(_batch("run-d"), _with_call_ids_of(_batch("run-e", output_tokens=77), second)),
    ]
    assert all(batch[0].column("response_id").null_count == len(batch[0]) for batch in batches)
    fast = _results(tmp_path / "fast.duckdb", batches)
    monkeypatch.setattr(writer, "_insert_calls_for", lambda calls: sql.INSERT_CALLS)
    reference = _results(tmp_path / "reference.duckdb", batches)
    assert fast == reference
    assert all(fast[0][i][4] is not None for i in (3, 4, 5))  # each resend with other content reported
    assert fast[0][5][0] > 0  # beside the new calls of its batch


@pytest.mark.system  # store writes: seconds
def test_a_batch_with_a_response_id_still_skips_a_stored_response(db_path):
    calls, records, events = _batch("run-a")
    calls = calls.set_column(
        calls.schema.get_field_index("response_id"), "response_id", pa.array(["resp-1"] * len(calls))
    )
    assert writer._insert_calls_for(calls) == sql.INSERT_CALLS
    later = _batch("run-b")[0]  # other call ids, the same response id
    later = later.set_column(
        later.schema.get_field_index("response_id"), "response_id", calls.column("response_id")
    )
    with write_connection(db_path) as conn:
        write_batch(conn, calls.slice(0, 1), records, events)
        assert write_batch(conn, later.slice(0, 1)).calls == 0


def _checked_runs(monkeypatch) -> list[int]:
    """Count each batch that falls back from the optimistic insert to the checked one."""
    checked = writer._insert_calls_checked
    runs: list[int] = []

    def counted(conn, calls):
        runs.append(len(calls))
        return checked(conn, calls)

    monkeypatch.setattr(writer, "_insert_calls_checked", counted)
    return runs


@pytest.mark.system  # store writes: seconds
def test_the_optimistic_insert_stores_and_counts_what_the_checked_insert_does(tmp_path, monkeypatch):
    first, second, third = _batch("run-a"), _batch("run-b"), _batch("run-c")
    stored_call = tuple(table.slice(0, 1) for table in first)
    batches = [
        first,  # fresh: the plain insert
        _joined(second, stored_call),  # new calls beside a duplicate of a stored call
        _joined(third, tuple(table.slice(0, 1) for table in third)),  # a call twice in one batch
        first,  # an identical resend of a whole batch
        _joined(_batch("run-d"), _with_call_ids_of(_batch("run-e", output_tokens=77), second)),
    ]
    fallbacks = _checked_runs(monkeypatch)
    optimistic = _results(tmp_path / "optimistic.duckdb", batches)
    # the fresh batches (the first, and the one with a duplicate inside it) took the plain insert
    assert len(fallbacks) == 3
    monkeypatch.setattr(writer, "_insert_calls", writer._insert_calls_checked)
    checked = _results(tmp_path / "checked.duckdb", batches)
    assert optimistic == checked
    results = optimistic[0]
    assert results[0][0] == len(first[0]) and results[2][0] == len(third[0])  # the in-batch copy once
    assert results[1][0] == len(second[0])  # the stored call is not counted again
    assert results[3][0] == 0 and results[4][4] is not None  # the resend with other content reported


@pytest.mark.system  # store writes: seconds
def test_a_fresh_batch_takes_the_plain_insert_a_stored_call_id_the_checked_one(db_path, monkeypatch):
    first, second = _batch("run-a"), _batch("run-b")
    fallbacks = _checked_runs(monkeypatch)
    with write_connection(db_path) as conn:
        assert write_batch(conn, *first).calls == len(first[0])
        assert write_batch(conn, *second).calls == len(second[0])
        assert fallbacks == []
        again = write_batch(conn, *_joined(_batch("run-c"), tuple(t.slice(0, 1) for t in first)))
        assert fallbacks == [len(first[0]) + 1]
        assert again.calls == len(first[0])  # run-c's calls, not the stored one
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == 3 * len(first[0])
