"""The frames of the fast what-if (``budgetlens.analysis.whatif_peaks``): a list of verdicts'
summaries (``REPLAY_SUMMARY``'s counts and sums per budget and task type) and one verdict's run
rows, only the rows shown turned into Python values. ``replays`` is the ``Replays`` the verdicts
were replayed from (its runs, task types and walk)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.analysis import replay_queries as rq
from budgetlens.analysis.replay import RUN_COLUMNS, SUMMARY_COLUMNS, summarize

if TYPE_CHECKING:
    from budgetlens.analysis.whatif_peaks import Replays

__all__ = ["run_frame", "summary_frame"]

#: The guard's checks before a call, first match wins (``replay_queries._FLAGGED``); code = 1 + index.
REASONS = ("budget_time", "budget_turns", "budget_tools", "budget_cost", "budget_tokens")
CODE = {reason: code for code, reason in enumerate(REASONS, start=1)}
NAMES = np.array([None, *REASONS], dtype=object)


def summary_frame(replays: Replays, verdicts: Sequence[dict[str, np.ndarray]]) -> pd.DataFrame:
    """budget_id (the index in ``verdicts``), then ``SUMMARY_COLUMNS``: per verdict and task
    type (the totals' order), the counts and sums of ``REPLAY_SUMMARY``, as one frame."""
    n_tasks = len(replays.task_types)
    names = replays.totals["task_type"].where(replays.totals["task_type"].notna(), None)
    order = [replays.task_types.index(t) for t in names]
    task, width, k = replays.task_index, len(NAMES), len(verdicts)
    # a censored run is one the old budget stopped; avoided is 0 outside the walked runs
    # (those the walk stops): the sums over those runs add the same values in the same order
    old, walked = np.flatnonzero(replays.old_stop), replays.walk.walk_ui
    old_task, walked_task = task[old], task[walked]
    columns: dict[str, list] = {name: [] for name in ("stopped", "censored", *rq.STOP_COUNTS)}
    columns.update(avoided_tokens=[], avoided_cost_usd=[])
    for verdict in verdicts:
        at = np.flatnonzero(verdict["stopped"])  # per task type and stop code of the stopped
        by_code = np.bincount(task[at] * width + verdict["stop_code"][at], minlength=n_tasks * width).reshape(
            n_tasks, width
        )
        sums = {
            "stopped": by_code.sum(axis=1),
            "censored": np.bincount(old_task[verdict["censored"][old]], minlength=n_tasks),
            **{name: by_code[:, CODE[reason]] for name, reason in rq.STOP_COUNTS.items()},
            **{
                name: np.bincount(walked_task, weights=verdict[name][walked], minlength=n_tasks)
                for name in ("avoided_tokens", "avoided_cost_usd")
            },
        }
        for name, values in sums.items():
            columns[name].append(values[order])
    frame = pd.DataFrame(
        {
            "budget_id": np.repeat(np.arange(k), len(order)),
            "task_type": list(replays.totals["task_type"]) * k,
            "runs": np.tile(replays.totals["runs"].to_numpy(), k),
            **{name: np.concatenate(parts) for name, parts in columns.items()},
            **{
                name: np.tile(replays.totals[name].to_numpy(), k)
                for name in ("runs_without_calls", "spent_tokens", "spent_cost_usd")
            },
        }
    )
    frame["avoided_tokens"] = frame["avoided_tokens"].astype(np.int64)
    frame["avoided_cost_usd"] = frame["avoided_cost_usd"].astype(float)
    frame["completed"] = frame["runs"] - frame["stopped"] - frame["censored"]
    return summarize(frame)[["budget_id", *SUMMARY_COLUMNS]]


def run_frame(
    replays: Replays, verdict: dict[str, np.ndarray], run_limit: int | None
) -> tuple[pd.DataFrame, int]:
    """The stopped and censored runs of one verdict (``RUN_COLUMNS``, ``replay``'s order:
    task type, avoided tokens descending, run id), the first ``run_limit`` of them, and how
    many there are in all. Only the rows returned are turned into Python values."""
    picked = np.flatnonzero(verdict["stopped"] | verdict["censored"])
    take = pa.array(picked, type=pa.int64())
    positions = pc.sort_indices(
        pa.table(
            {
                "task_type": replays.rows.column("task_type").take(take),
                "avoided": pa.array(verdict["avoided_tokens"][picked]),
                "run_id": replays.rows.column("run_id").take(take),
            }
        ),
        sort_keys=[("task_type", "ascending"), ("avoided", "descending"), ("run_id", "ascending")],
    ).to_numpy()
    if run_limit is not None:
        positions = positions[:run_limit]
    shown = picked[positions]
    index = pa.array(shown, type=pa.int64())
    u = replays.under

    def text(name: str) -> np.ndarray:
        return replays.rows.column(name).take(index).to_numpy(zero_copy_only=False)

    frame = pd.DataFrame(
        {
            "run_id": text("run_id"),
            "task_type": text("task_type"),
            "start_utc": text("start_utc"),
            "outcome": np.where(verdict["stopped"][shown], "stopped", "censored"),
            "stop_reason": NAMES[verdict["stop_code"][shown]],
            "stop_turn": verdict["stop_turn"][shown],
            "calls": np.nan_to_num(u["calls"][shown]).astype(np.int64),
            "recorded_stop_reason": text("recorded_stop_reason"),
            "spent_tokens": np.nan_to_num(u["run_total_tokens"][shown]).astype(np.int64),
            "avoided_tokens": verdict["avoided_tokens"][shown],
            "spent_cost_usd": np.nan_to_num(u["run_cost_usd"][shown]),
            "avoided_cost_usd": verdict["avoided_cost_usd"][shown],
        },
        columns=list(RUN_COLUMNS),
    )
    return frame, len(picked)
