"""The fast what-if (issue 25): the replay of ``budgetlens.analysis.replay`` from per-run peaks,
reading calls only for the runs that need a call-by-call walk.

Cumulative usage only grows, so a limit stops a run iff it is below the run's peak of that
measure; the ``runs`` rollup and ``run_totals`` bound every peak from above (the replay's
candidate test, ``replay_queries.UNDER_RUNS``). One pass over the runs finds, for all budgets at
once (the curve's 21), the few runs some budget may stop; every other run completes under every
budget and is never read again. Only the candidates' calls are read (``WALK_CALLS``), once
each, as numpy arrays: which call each budget stops at, with which reason, and what the calls
from there on spent, is decided in numpy for every budget over those arrays. Runs without call
records, runs the old budget stopped and runs whose counted tool calls pass a limit are judged
on the rollup alone, as the full replay judges them.

The result is the full replay's (``replay.replay`` / ``REPLAY_SUMMARY``), row for row: the tests
compare both on varied stores. ``replay_many`` returns one ``WhatIf`` per budget; its ``runs``
can be limited to the rows a page shows (``run_limit``), with ``run_count`` saying how many there
are in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from budgetlens.analysis import replay_queries as rq
from budgetlens.analysis.filters import Filters, fetch_arrays, used_params
from budgetlens.analysis.replay import (
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    Budget,
    WhatIf,
    budget_params,
    summarize,
    task_types_of,
)

__all__ = ["replay_fast", "replay_many", "summaries"]

#: The guard's checks before a call, first match wins (``replay_queries._FLAGGED``).
_REASONS = ("budget_time", "budget_turns", "budget_tools", "budget_cost", "budget_tokens")


def _gt(values: np.ndarray, limit: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return values > limit  # NaN on either side (NULL) is False, as in SQL's CASE


def _ge(values: np.ndarray, limit: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return values >= limit


def _first(conditions: list[np.ndarray], n: int) -> np.ndarray:
    """Per row, the reason of the first true condition (``_REASONS`` order), else None."""
    out = np.full(n, None, dtype=object)
    for reason, condition in reversed(list(zip(_REASONS, conditions, strict=True))):
        out[condition] = reason
    return out


def _nan_if_none(value: float | None) -> float:
    return np.nan if value is None else float(value)


def _limits(budget: Budget, task_index: np.ndarray, task_types: list) -> dict[str, np.ndarray]:
    """Per run, the budget's limit of each key (NaN = none): one gather per key."""
    table = [budget.for_task(t) for t in task_types]
    return (
        {key: np.array([_nan_if_none(row[key]) for row in table] or [np.nan])[task_index] for key in table[0]}
        if table
        else {}
    )


@dataclass(frozen=True)
class _Verdicts:
    """The replay of several budgets over the ``under`` runs (``UNDER_RUNS`` arrays, one entry
    per run some budget may stop), per budget the arrays of ``_judge``."""

    task_types: list
    under: dict[str, np.ndarray]
    totals: pd.DataFrame
    task_index: np.ndarray
    per_budget: list[dict[str, np.ndarray]]


def _verdicts(conn, f: Filters, budgets: Sequence[Budget]) -> _Verdicts | None:
    """Every budget's verdict on every run it may stop; None for an empty window."""
    task_types = task_types_of(conn, f)
    if not task_types or not budgets:
        return None
    params = {**f.params(), **budget_params(list(budgets), task_types)}
    under = fetch_arrays(conn, rq.UNDER_RUNS, params)
    totals = conn.execute(rq.TASK_TOTALS, used_params(rq.TASK_TOTALS, params)).df()
    n = len(under["run_id"])
    task_of = {t: i for i, t in enumerate(task_types)}
    task_index = np.array([task_of[t] for t in under["task_type"]], dtype=np.int64)
    walked = under["walked"].astype(bool)
    walk_ui = np.flatnonzero(walked)
    calls = fetch_arrays(
        conn,
        rq.WALK_CALLS,
        {"walk_ids": [under["run_id"][i] for i in walk_ui], "walk_idx": [int(i) for i in walk_ui]},
    )
    ui = calls["ui"].astype(np.int64)
    tok = calls["tok"].astype(np.int64)
    cum_tok = calls["cum_tok"]
    # Per walked run: what its calls spent (tokens exact, USD in call order).
    spent_tok = np.zeros(n, dtype=np.int64)
    np.add.at(spent_tok, ui, tok)
    spent_cost = np.bincount(ui, weights=calls["cost"], minlength=n)

    recorded = under["recorded_stop_reason"]
    old_stop = np.array([r is not None and r.startswith("budget_") for r in recorded], dtype=bool)
    no_calls = np.isnan(under["calls"])
    out = []
    for budget in budgets:
        lim = _limits(budget, task_index, task_types)
        # The walk: the first call of each walked run at which a check fails.
        per_call = {key: value[ui] for key, value in lim.items()}
        conditions = [
            _ge(calls["time_s"], per_call["max_duration_s"]),
            _gt(calls["k"].astype(float), per_call["max_turns"]),
            _gt(calls["tools_before"], per_call["max_tool_calls"]),
            _ge(calls["cost_before"], per_call["max_cost_usd"]),
            _gt(cum_tok, per_call["max_total_tokens"])
            | _gt(calls["cum_in"], per_call["max_input_tokens"])
            | _gt(calls["cum_out"], per_call["max_output_tokens"]),
        ]
        code = np.select(conditions, list(range(1, len(_REASONS) + 1)), 0)
        hits = np.flatnonzero(code > 0)
        stop_runs, first = np.unique(ui[hits], return_index=True)
        at = hits[first]
        walk_reason = np.full(n, None, dtype=object)
        walk_reason[stop_runs] = np.array(_REASONS, dtype=object)[code[at] - 1]
        walk_turn = np.full(n, np.nan)
        walk_turn[stop_runs] = calls["k"][at]
        avoided_tok = np.zeros(n, dtype=np.int64)
        avoided_tok[stop_runs] = spent_tok[stop_runs] - (cum_tok[at].astype(np.int64) - tok[at])
        avoided_cost = np.zeros(n)
        avoided_cost[stop_runs] = spent_cost[stop_runs] - calls["cost_before"][at]

        tools_over = _gt(under["run_tool_calls"], lim["max_tool_calls"])
        totals_reason = _first(
            [
                _gt(under["run_duration_s"], lim["max_duration_s"]),
                _gt(under["run_turns"], lim["max_turns"]),
                _gt(under["run_tool_calls"], lim["max_tool_calls"]),
                _gt(under["run_cost_usd"], lim["max_cost_usd"]),
                _gt(under["run_total_tokens"], lim["max_total_tokens"])
                | _gt(under["run_input_tokens"], lim["max_input_tokens"])
                | _gt(under["run_output_tokens"], lim["max_output_tokens"]),
            ],
            n,
        )
        replay_reason = np.where(no_calls, totals_reason, walk_reason).astype(object)
        # A run whose counted tool calls pass the limit, not stopped by its calls' walk.
        replay_reason[~no_calls & (walk_reason == None) & tools_over] = "budget_tools"  # noqa: E711
        not_larger = np.zeros(n, dtype=bool)
        for reason, names in rq.NOT_LARGER.items():
            mine = recorded == reason
            if not mine.any():
                continue
            any_set = np.zeros(n, dtype=bool)
            each = np.ones(n, dtype=bool)
            for name in names:
                old, new = under[f"limit_{name}"], lim[f"max_{name}"]
                any_set |= ~np.isnan(old)
                with np.errstate(invalid="ignore"):
                    each &= np.isnan(old) | (new <= old)
            not_larger |= mine & any_set & each
        kept = walked | old_stop | no_calls | tools_over
        has_replay = replay_reason != None  # noqa: E711
        stopped = kept & (has_replay | (old_stop & not_larger))
        censored = kept & ~stopped & old_stop
        stop_reason = np.where(
            has_replay,
            replay_reason,
            np.where(old_stop & not_larger, recorded, np.full(len(recorded), None, dtype=object)),
        )
        calls_or_nan = np.where(under["calls"] == 0, np.nan, under["calls"])
        stop_turn = np.where(
            has_replay,
            np.where(np.isnan(walk_turn), calls_or_nan, walk_turn),
            np.where(old_stop & not_larger, calls_or_nan, np.nan),
        )
        out.append(
            {
                "stopped": stopped,
                "censored": censored,
                "stop_reason": stop_reason,
                "stop_turn": stop_turn,
                "avoided_tokens": np.where(stopped, avoided_tok, 0),
                "avoided_cost_usd": np.where(stopped, avoided_cost, 0.0),
            }
        )
    return _Verdicts(task_types, under, totals, task_index, out)


def _summaries(v: _Verdicts) -> pd.DataFrame:
    """budget_id, then ``SUMMARY_COLUMNS``: per budget and task type (the totals' order), the
    counts and sums of ``REPLAY_SUMMARY``, built as one frame for every budget."""
    n_tasks = len(v.task_types)
    order = [v.task_types.index(t) for t in v.totals["task_type"].where(v.totals["task_type"].notna(), None)]
    columns: dict[str, list] = {name: [] for name in ("stopped", "censored", *rq.STOP_COUNTS)}
    columns.update(avoided_tokens=[], avoided_cost_usd=[])
    for verdict in v.per_budget:
        stopped, counted = verdict["stopped"], verdict["stopped"] | verdict["censored"]
        sums = {
            "stopped": np.bincount(v.task_index[stopped], minlength=n_tasks),
            "censored": np.bincount(v.task_index[verdict["censored"]], minlength=n_tasks),
            **{
                name: np.bincount(
                    v.task_index[stopped & (verdict["stop_reason"] == reason)], minlength=n_tasks
                )
                for name, reason in rq.STOP_COUNTS.items()
            },
            "avoided_tokens": np.bincount(
                v.task_index[counted], weights=verdict["avoided_tokens"][counted], minlength=n_tasks
            ),
            "avoided_cost_usd": np.bincount(
                v.task_index[counted], weights=verdict["avoided_cost_usd"][counted], minlength=n_tasks
            ),
        }
        for name, values in sums.items():
            columns[name].append(values[order])
    k = len(v.per_budget)
    frame = pd.DataFrame(
        {
            "budget_id": np.repeat(np.arange(k), len(order)),
            "task_type": list(v.totals["task_type"]) * k,
            "runs": np.tile(v.totals["runs"].to_numpy(), k),
            **{name: np.concatenate(parts) for name, parts in columns.items()},
            **{
                name: np.tile(v.totals[name].to_numpy(), k)
                for name in ("runs_without_calls", "spent_tokens", "spent_cost_usd")
            },
        }
    )
    frame["avoided_tokens"] = frame["avoided_tokens"].astype(np.int64)
    frame["avoided_cost_usd"] = frame["avoided_cost_usd"].astype(float)
    frame["completed"] = frame["runs"] - frame["stopped"] - frame["censored"]
    return summarize(frame)[["budget_id", *SUMMARY_COLUMNS]]


def _runs(v: _Verdicts, verdict: dict[str, np.ndarray], run_limit: int | None) -> tuple[pd.DataFrame, int]:
    """The stopped and censored runs of one budget (``RUN_COLUMNS``, ``replay``'s order), the
    first ``run_limit`` of them, and how many there are in all."""
    under = v.under
    picked = np.flatnonzero(verdict["stopped"] | verdict["censored"])
    frame = pd.DataFrame(
        {
            "run_id": under["run_id"][picked],
            "task_type": under["task_type"][picked],
            "start_utc": under["start_utc"][picked],
            "outcome": np.where(verdict["stopped"][picked], "stopped", "censored"),
            "stop_reason": verdict["stop_reason"][picked],
            "stop_turn": verdict["stop_turn"][picked],
            "calls": np.nan_to_num(under["calls"][picked]).astype(np.int64),
            "recorded_stop_reason": under["recorded_stop_reason"][picked],
            "spent_tokens": np.nan_to_num(under["run_total_tokens"][picked]).astype(np.int64),
            "avoided_tokens": verdict["avoided_tokens"][picked],
            "spent_cost_usd": np.nan_to_num(under["run_cost_usd"][picked]),
            "avoided_cost_usd": verdict["avoided_cost_usd"][picked],
        },
        columns=list(RUN_COLUMNS),
    )
    frame = frame.sort_values(["task_type", "avoided_tokens", "run_id"], ascending=[True, False, True])
    if run_limit is not None:
        frame = frame.head(run_limit)
    return frame.reset_index(drop=True), len(picked)


def summaries(conn, f: Filters, budgets: Sequence[Budget]) -> pd.DataFrame:
    """The summaries of ``replay_many`` in one frame: budget_id (the index in ``budgets``), then
    ``SUMMARY_COLUMNS``, one row per budget and task type; empty (those columns) for an empty
    window. What the trade-off curve reads: no run list is built."""
    v = _verdicts(conn, f, budgets)
    if v is None:
        return pd.DataFrame(columns=["budget_id", *SUMMARY_COLUMNS])
    return _summaries(v)


def replay_many(conn, f: Filters, budgets: Sequence[Budget], *, run_limit: int | None = None) -> list[WhatIf]:
    """Replay each of ``budgets`` over the runs ``f`` keeps: the ``WhatIf`` of
    ``replay.replay(conn, f, budget)`` for each, from per-run peaks (module docstring).

    ``run_limit`` keeps that many run rows of each (in ``replay``'s order: task type, avoided
    tokens descending, run id), ``WhatIf.run_count`` counts them all. An empty window gives empty
    frames with the documented columns.
    """
    v = _verdicts(conn, f, budgets)
    if v is None:
        return [
            WhatIf(pd.DataFrame(columns=SUMMARY_COLUMNS), pd.DataFrame(columns=RUN_COLUMNS), b, 0)
            for b in budgets
        ]
    frame = _summaries(v)
    out = []
    for budget_id, (budget, verdict) in enumerate(zip(budgets, v.per_budget, strict=True)):
        summary = frame[frame["budget_id"] == budget_id][list(SUMMARY_COLUMNS)].reset_index(drop=True)
        runs, count = _runs(v, verdict, run_limit)
        out.append(WhatIf(summary, runs, budget, count))
    return out


def replay_fast(conn, f: Filters, budget: Budget, run_limit: int | None = None) -> WhatIf:
    """``replay.replay(conn, f, budget)`` from per-run peaks (``replay_many``); ``run_limit``
    keeps the first run rows only (``WhatIf.run_count`` counts them all)."""
    return replay_many(conn, f, [budget], run_limit=run_limit)[0]
