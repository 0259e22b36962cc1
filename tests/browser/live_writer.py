"""A stand-in for the collector in dashboard tests: writes runs into a store, one batch each.

``python -m tests.browser.live_writer DB --prefix live- --count 200 --interval 0.3`` commits one
run per interval (as the collector does, holding the file only per batch) and prints each run id
after its commit. ``run_rows`` builds one run's rows (model calls, run record, events).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time

from budgetlens.store import write_batch, write_connection


def task_runs(start: dt.datetime, step: dt.timedelta, tasks: dict[str, tuple[int, int]]) -> list:
    """``run_rows`` batches per task type: ``tasks`` maps a task type to (runs, stopped); run
    ``index`` of a task (id ``<task>-<index:04d>``) starts ``index`` steps after ``start``, and
    its first ``stopped`` runs end with a budget stop (budget_tokens), the rest completed."""
    return [
        run_rows(
            f"{task}-{index:04d}",
            task_type=task,
            start_utc=start + step * index,
            stop_reason="budget_tokens" if index < stopped else "completed",
        )
        for task, (runs, stopped) in tasks.items()
        for index in range(runs)
    ]


def run_rows(
    run_id: str,
    *,
    task_type: str = "tool_use",
    start_utc: dt.datetime | None = None,
    turns: int = 3,
    tokens_per_turn: int = 2000,
    limit_total_tokens: int = 20000,
    stop_reason: str = "completed",
    model: str = "gpt-4o-mini",
    priced: bool = True,
):
    """Return (calls, records, events) of one run with ``turns`` model calls.

    Each call costs ``tokens_per_turn`` x 1e-6 USD, or NULL (unpriced) when ``priced`` is False.
    """
    start = start_utc or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    calls, used = [], 0
    for turn in range(1, turns + 1):
        used += tokens_per_turn
        begin = start + dt.timedelta(seconds=2 * (turn - 1))
        calls.append(
            {
                "span_id": f"{run_id}-c{turn}",
                "run_id": run_id,
                "source": "test",
                "service_name": "test-agent",
                "task_type": task_type,
                "operation_name": "chat",
                "provider_name": "openai",
                "request_model": model,
                "response_model": model,
                "start_utc": begin,
                "end_utc": begin + dt.timedelta(seconds=1.5),
                "duration_s": 1.5,
                "turn": turn,
                "input_tokens": tokens_per_turn * 3 // 4,
                "output_tokens": tokens_per_turn // 4,
                "total_tokens": tokens_per_turn,
                "reserved_tokens": tokens_per_turn + 500,
                "used_tokens": used,
                "remaining_tokens": limit_total_tokens - used,
                "cost_usd": tokens_per_turn * 1e-6 if priced else None,
                "usage_status": "reported",
            }
        )
    record = {
        "run_id": run_id,
        "source": "test",
        "service_name": "test-agent",
        "task_type": task_type,
        "model": model,
        "start_utc": start,
        "end_utc": start + dt.timedelta(seconds=2 * turns),
        "turns": turns,
        "tool_calls": turns - 1,
        "stop_reason": stop_reason,
        "usage_status": "reported",
        "limit_total_tokens": limit_total_tokens,
    }
    events = [
        {
            "event_id": f"{run_id}-e1",
            "run_id": run_id,
            "ts_utc": start + dt.timedelta(seconds=1),
            "name": "budgetlens.tool_call",
            "tool_name": "search",
            "used_tokens": tokens_per_turn,
        }
    ]
    if stop_reason.startswith("budget_"):
        events.append(
            {
                "event_id": f"{run_id}-e2",
                "run_id": run_id,
                "ts_utc": start + dt.timedelta(seconds=2 * turns),
                "name": "budgetlens.stop",
                "reason": stop_reason,
                "used_tokens": used,
                "percent": 100.0 * used / limit_total_tokens,
            }
        )
    return calls, [record], events


#: Task types of ``null_heavy_batches`` (seven: more than the five seed colours).
NULL_HEAVY_TASKS = (
    "imported_history",
    "foreign_agent",
    "local_unpriced",
    "rare_task",
    "tool_use",
    "research",
    "simple_qa",
)


def foreign_run_rows(
    run_id: str, *, start_utc: dt.datetime, calls: int = 3, task_type: str = "foreign_agent"
):
    """One run as a plain OTel GenAI trace sends it: calls without turn, reservation, budget
    figures or price, no run record (so turns, limits and the stop reason are NULL)."""
    rows = []
    for index in range(calls):
        begin = start_utc + dt.timedelta(seconds=5 * index)
        rows.append(
            {
                "span_id": f"{run_id}-c{index}",
                "run_id": run_id,
                "trace_id": run_id,
                "source": "otlp",
                "service_name": "other-agent",
                "task_type": task_type,
                "operation_name": "chat",
                "provider_name": "openai",
                "request_model": "mystery-model-1",
                "response_model": None,
                "start_utc": begin,
                "end_utc": begin + dt.timedelta(seconds=2),
                "duration_s": 2.0,
                "turn": None,
                "input_tokens": 1000 * (index + 1),
                "output_tokens": 200,
                "total_tokens": 1000 * (index + 1) + 200,
                "reserved_tokens": None,
                "used_tokens": None,
                "remaining_tokens": None,
                "cost_usd": None,
                "usage_status": "reported",
            }
        )
    return rows, [], []


def null_heavy_batches(start_utc: dt.datetime | None = None):
    """(calls, records, events) batches of a store full of NULLs, as real imports and foreign
    traces leave it:

    - ``imported_history``: 25 imported-like runs without any limit (and no reservations);
    - ``foreign_agent``: 3 runs of a plain OTel trace (no turn, no run record, unpriced model);
    - ``local_unpriced``: 4 runs of a model with no price and no model name in the record;
    - ``rare_task``: 4 runs, one stopped by its budget (25 %, but a low sample), with events
      whose reason / from_model are NULL;
    - ``tool_use``, ``research``, ``simple_qa``: 6 guarded runs each (seven task types in all).

    ``start_utc`` defaults to 09:00 UTC three days before today, inside the dashboard's default
    window (the last 14 days) on any day the tests run: a fixed date aged out of it (the app
    tests that open a page without ``window`` found no rows from 5 December 2026 on).
    """
    today = dt.datetime.now(dt.UTC).replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    start = start_utc or today - dt.timedelta(days=3) + dt.timedelta(hours=9)
    batches: list[tuple[list, list, list]] = []
    for index in range(25):
        calls, records, events = run_rows(
            f"imp-{index:04d}",
            task_type="imported_history",
            model="claude-sonnet-4-5",
            start_utc=start + dt.timedelta(hours=index),
            tokens_per_turn=1500 + 300 * index,
        )
        for call in calls:
            call.update(
                reserved_tokens=None, used_tokens=None, remaining_tokens=None, source="import:claude-code"
            )
        records[0].update(limit_total_tokens=None, stop_reason=None, source="import:claude-code")
        batches.append((calls, records, []))
    for index in range(3):
        batches.append(
            foreign_run_rows(f"foreign-{index:04d}", start_utc=start + dt.timedelta(hours=3 * index))
        )
    for index in range(4):
        calls, records, events = run_rows(
            f"local-{index:04d}",
            task_type="local_unpriced",
            model="local-llama",
            start_utc=start + dt.timedelta(hours=index),
            priced=False,
        )
        records[0].update(model=None, turns=None, tool_calls=None)
        batches.append((calls, records, events))
    for index in range(4):
        batches.append(
            run_rows(
                f"rare-{index:04d}",
                task_type="rare_task",
                start_utc=start + dt.timedelta(hours=index),
                stop_reason="budget_tokens" if index == 0 else "completed",
            )
        )
    for task in ("tool_use", "research", "simple_qa"):
        for index in range(6):
            batches.append(
                run_rows(
                    f"{task}-{index:04d}",
                    task_type=task,
                    start_utc=start + dt.timedelta(days=index % 3, hours=index),
                )
            )
    return batches


def write_runs(conn, batches) -> None:
    """Write ``batches`` ((calls, records, events) of distinct runs, as ``run_rows`` gives them) in
    one ``write_batch``: the store holds what one ``write_batch`` per run leaves in it
    (``tests/test_write_runs.py``), in one commit instead of one per run (each commit of the store
    takes a large fraction of a second)."""
    batches = list(batches)
    if batches:
        write_batch(conn, *([row for batch in batches for row in batch[part]] for part in range(3)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("db")
    parser.add_argument("--prefix", default="live-")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between commits")
    args = parser.parse_args(argv)
    for index in range(args.count):
        calls, records, events = run_rows(f"{args.prefix}{index:04d}", task_type="live_task")
        with write_connection(args.db) as conn:
            write_batch(conn, calls, records, events)
        print(f"{args.prefix}{index:04d}", flush=True)
        time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
