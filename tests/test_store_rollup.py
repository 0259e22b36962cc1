"""The incremental ``runs`` rollup equals a full rebuild, batch after batch, whatever arrives."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from budgetlens.store import rebuild_runs, write_batch, write_connection
from budgetlens.store.schema import MODEL_CALL_COLUMNS, RUN_COLUMNS
from budgetlens.store.writer import rows_to_table

T0 = dt.datetime(2026, 11, 2, 9, 0, 0)
EVENT_NAMES = (
    "budgetlens.warning",
    "budgetlens.downgrade",
    "budgetlens.summarize",
    "budgetlens.tool_call",
    "budgetlens.stop",
)


def _maybe(rng, value, p=0.3):
    return None if rng.random() < p else value


def _call(rng, run, index):
    status = rng.choice(["reported"] * 4 + ["unknown"])
    reported = status == "reported"
    return dict(
        span_id=f"{run}.c{index}",
        run_id=run,
        trace_id=_maybe(rng, f"t-{run}"),
        source="test",
        service_name=_maybe(rng, rng.choice(["svc-a", "svc-b"])),
        task_type=_maybe(rng, rng.choice(["qa", "triage"]), 0.5),
        request_model=_maybe(rng, rng.choice(["gpt-4o", "claude", "llama"])),
        response_model=_maybe(rng, rng.choice(["gpt-4o-2024", "claude-x"]), 0.6),
        start_utc=T0 + dt.timedelta(seconds=rng.randint(0, 3600)),
        end_utc=_maybe(rng, T0 + dt.timedelta(seconds=rng.randint(3600, 7200)), 0.1),
        turn=index,
        input_tokens=rng.randint(0, 5000) if reported else None,
        output_tokens=_maybe(rng, rng.randint(0, 900), 0.1) if reported else None,
        total_tokens=_maybe(rng, rng.randint(0, 9000), 0.7) if reported else None,
        cache_read_tokens=_maybe(rng, rng.randint(0, 100)),
        reasoning_tokens=_maybe(rng, 7),
        reserved_tokens=_maybe(rng, 4000, 0.2),
        # multiples of 1/1024 add up exactly in any order, so sums compare exactly
        cost_usd=_maybe(rng, rng.randint(1, 500) / 1024, 0.4) if reported else None,
        usage_status=status,
        error_type=_maybe(rng, "RateLimitError", 0.9),
    )


def _record(rng, run):
    return dict(
        run_id=run,
        source="test",
        trace_id=_maybe(rng, f"t-{run}"),
        task_type=_maybe(rng, "research"),
        agent_name=_maybe(rng, "agent-x"),
        service_name=_maybe(rng, "svc-r"),
        model=_maybe(rng, "gpt-4o"),
        start_utc=_maybe(rng, T0),
        end_utc=_maybe(rng, T0 + dt.timedelta(minutes=5)),
        duration_s=_maybe(rng, 12.5),
        turns=_maybe(rng, rng.randint(1, 9)),
        tool_calls=_maybe(rng, 2),
        input_tokens=_maybe(rng, 100),
        output_tokens=_maybe(rng, 10),
        total_tokens=_maybe(rng, 120, 0.6),
        cost_usd=_maybe(rng, 0.5),
        stop_reason=_maybe(rng, rng.choice(["completed", "budget_tokens", "failed"])),
        usage_status=_maybe(rng, rng.choice(["reported", "unknown"])),
        retryable=_maybe(rng, rng.random() < 0.5),
        limit_total_tokens=_maybe(rng, 10_000),
        limit_turns=_maybe(rng, 20),
        limit_cost_usd=_maybe(rng, 1.0),
    )


def _event(rng, run, index):
    return dict(
        event_id=f"{run}.e{index}",
        run_id=run,
        name=rng.choice(EVENT_NAMES),
        ts_utc=T0 + dt.timedelta(seconds=index),
        used_tokens=_maybe(rng, 100),
    )


def _stream(seed: int, runs: int = 40, batches: int = 30):
    """Batches of calls, records and events in random order, with re-sent rows and records that
    arrive before, between or after their calls (and sometimes change)."""
    rng = random.Random(seed)
    rows = []
    for r in range(runs):
        run = f"run-{r:03d}"
        rows += [("call", _call(rng, run, i)) for i in range(rng.randint(0, 6))]
        rows += [("event", _event(rng, run, i)) for i in range(rng.randint(0, 4))]
        if rng.random() < 0.7:
            rows.append(("record", _record(rng, run)))
        if rng.random() < 0.15:
            rows.append(("record", _record(rng, run)))  # a newer record of the same run
    rng.shuffle(rows)
    sent = []
    for index in range(batches):
        size = len(rows) // batches + 1
        batch = rows[index * size : (index + 1) * size]
        if sent and rng.random() < 0.5:
            batch += rng.sample(sent, min(len(sent), rng.randint(1, 8)))  # exporter retries
        sent += batch
        yield (
            [row for kind, row in batch if kind == "call"],
            [row for kind, row in batch if kind == "record"],
            [row for kind, row in batch if kind == "event"],
        )


def _runs(conn):
    return conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY run_id").fetchall()


@pytest.mark.system  # seconds per seed, seed 0 too
@pytest.mark.parametrize("seed", range(6))
def test_incremental_rollup_equals_a_full_rebuild(db_path, seed):
    with write_connection(db_path) as conn:
        for calls, records, events in _stream(seed):
            write_batch(conn, calls, records, events)
        incremental = _runs(conn)
        count = rebuild_runs(conn)
        rebuilt = _runs(conn)
    assert count == len(rebuilt) > 0
    assert incremental == rebuilt


@pytest.mark.system  # two full random streams; seed 0 of the dict stream stays fast
def test_arrow_batches_roll_up_like_dict_batches(tmp_path):
    stream = list(_stream(seed=99))
    results = []
    for name, as_arrow in (("dicts", False), ("arrow", True)):
        with write_connection(tmp_path / f"{name}.duckdb") as conn:
            for calls, records, events in stream:
                if as_arrow:
                    calls = rows_to_table("model_calls", MODEL_CALL_COLUMNS, calls)
                write_batch(conn, calls, records, events)
            results.append(_runs(conn))
    assert results[0] == results[1] and results[0]


@pytest.mark.system  # store writes: seconds
def test_a_batch_of_only_duplicates_changes_nothing(db_path):
    calls, records, events = next(_stream(seed=3, batches=1))
    with write_connection(db_path) as conn:
        first = write_batch(conn, calls, records, events)
        before = _runs(conn)
        again = write_batch(conn, calls, records, events)
        assert _runs(conn) == before
    assert first.calls == len(calls) and (again.calls, again.records, again.events, again.runs) == (
        0,
        0,
        0,
        0,
    )


def test_arrow_batch_with_a_missing_required_field_is_refused_naming_it(db_path):
    table = pa.table(
        {
            "span_id": ["s1"],
            "run_id": ["r1"],
            "source": ["t"],
            "usage_status": pa.array([None], type=pa.string()),
        }
    )
    with write_connection(db_path) as conn, pytest.raises(ValueError, match="usage_status"):
        write_batch(conn, table)
