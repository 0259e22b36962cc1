"""The periods of unchanged limits (``limit_queries``, issue 25: one hash aggregate when each
set of limits held over one stretch of time, one sort of the runs of a task type whose sets
interleave) equal a plain reading of the runs in (start, run id) order: limits that change
back, runs at the same instant, runs without limits, a window, a task type filter."""

from __future__ import annotations

import datetime as dt
import math
import random

import pandas as pd
import pytest

from budgetlens.analysis import views
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection
from budgetlens.store.schema import LIMIT_COLUMNS

T0 = dt.datetime(2026, 9, 1, 6, 0, 0)
SETS = (
    {"limit_total_tokens": 10_000, "limit_turns": 5},
    {"limit_total_tokens": 12_000},
    {"limit_cost_usd": 0.25, "limit_duration_s": 60.0},
    {"limit_total_tokens": 12_000, "limit_tool_calls": 3},
)


def _records(seed: int, runs: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for task in ("steady", "changed", "flapping", "ties", "free"):  # free: never under a limit
        minute, current = 0, 0
        for i in range(runs):
            if task == "changed" and i in (runs // 3, 2 * runs // 3):
                current += 1  # one set after another: the aggregate path
            elif task in ("flapping", "ties") and rng.random() < 0.2:
                current = rng.randrange(len(SETS))  # sets change back: the sorted path
            minute += 0 if task == "ties" and rng.random() < 0.5 else 1  # same instants
            limits = {} if task == "free" or rng.random() < 0.1 else SETS[current % len(SETS)]
            out.append(
                dict(
                    run_id=f"{task}-{rng.randrange(10**6):06d}-{i}",
                    source="test",
                    task_type=task,
                    start_utc=T0 + dt.timedelta(minutes=minute),
                    stop_reason="completed",
                    **limits,
                )
            )
    return out


@pytest.fixture(scope="module")
def periods_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("periods") / "periods.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, [], _records(4, 120), [])
    return path


def _plain(value):
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return None
    return value


def _reference(conn, f: Filters) -> tuple[list[dict], list[dict]]:
    """(history, current) read plainly: every filtered run in (start, run id) order per task type."""
    frame = conn.execute(
        "SELECT run_id, task_type, start_utc, " + ", ".join(LIMIT_COLUMNS) + " FROM runs"
    ).df()
    start, end = f.start_utc, f.end_utc
    if start is not None:
        frame = frame[frame["start_utc"] >= start]
    if end is not None:
        frame = frame[frame["start_utc"] < end]
    if f.task_types:
        frame = frame[frame["task_type"].isin(f.task_types)]
    history, current = [], []
    for task, group in frame.sort_values(["task_type", "start_utc", "run_id"]).groupby(
        "task_type", sort=True
    ):
        periods: list[dict] = []
        for row in group.to_dict("records"):
            limits = {c: _plain(row[c]) for c in LIMIT_COLUMNS}
            if all(v is None for v in limits.values()):
                continue  # ran under no budget
            if periods and periods[-1]["limits"] == limits:
                periods[-1].update(last_run_utc=row["start_utc"], runs=periods[-1]["runs"] + 1)
            else:
                periods.append(
                    dict(limits=limits, since_utc=row["start_utc"], last_run_utc=row["start_utc"], runs=1)
                )
        for p in periods:
            history.append(
                dict(
                    task_type=task,
                    since_utc=p["since_utc"],
                    last_run_utc=p["last_run_utc"],
                    runs=p["runs"],
                    **p["limits"],
                )
            )
        latest = periods[-1] if periods else None
        current.append(
            dict(
                task_type=task,
                **(latest["limits"] if latest else {c: None for c in LIMIT_COLUMNS}),
                since_utc=latest["since_utc"] if latest else None,
                runs_since=latest["runs"] if latest else None,
                changes=len(periods) - 1 if periods else 0,
            )
        )
    return history, current


def _rows(frame: pd.DataFrame) -> list[dict]:
    return [{k: _plain(v) for k, v in row.items()} for row in frame.astype(object).to_dict("records")]


@pytest.mark.parametrize(
    "f",
    [
        Filters(),
        Filters(start_utc=T0 + dt.timedelta(minutes=30), end_utc=T0 + dt.timedelta(minutes=90)),
        Filters(task_types=("ties", "changed")),
    ],
    ids=["all", "window", "two-task-types"],
)
def test_limit_periods_equal_the_runs_read_in_order(periods_store, f):
    with read_connection(periods_store) as conn:
        history, current = _reference(conn, f)
        got_history = _rows(views.limit_history(conn, f))
        got_current = _rows(views.current_limits(conn, f))
    assert got_history == history
    assert got_current == current


def test_the_periods_store_has_both_paths(periods_store):
    with read_connection(periods_store) as conn:
        history, _ = _reference(conn, Filters())
    per_task = pd.DataFrame(history).groupby("task_type").size().to_dict()
    assert per_task["steady"] == 1 and per_task["changed"] == 3  # one stretch per set
    assert per_task["flapping"] > len(SETS) and per_task["ties"] > len(SETS)  # sets change back
    assert "free" not in per_task  # a task type without limits: in the current limits only
