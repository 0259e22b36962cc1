"""The fast what-if (issue 25): the replay of ``budgetlens.analysis.replay`` from per-run peaks,
reading calls only for the runs that need a call-by-call walk.

Cumulative usage only grows, so a limit stops a run iff it is below the run's peak of that
measure; the ``runs`` rollup and ``run_totals`` bound every peak from above (the replay's
candidate test, ``peak_queries.UNDER_RUNS``). One pass over the runs finds, for all budgets at
once (the curve's 21), the few runs some budget may stop; every other run completes under every
budget and is never read again. Only the candidates' calls are read (``WALK_CALLS``), once.

Where a walked run stops is decided once for every budget (per-run thresholds): for each check
of the guard (time, turns, tool calls, cost, each token limit) and task type, the distinct
limits the budgets set are sorted, each call is given the number of them it passes, and, as
every check's measure grows along a run, the first call that fails a limit is the count of the
calls before it that pass it (a running maximum makes this exact for any series). A budget then
reads its verdict per run from those counts: the first check to fail, in the guard's order,
at the first failing call. Runs without call records, runs the old budget stopped and runs whose
counted tool calls pass a limit are judged on the rollup alone, as the full replay judges them.

The result is the full replay's (``replay.replay`` / ``REPLAY_SUMMARY``), row for row: the tests
compare both on varied stores. ``Replays`` (``prepare``) holds the walk of a list of budgets and
replays any budget whose limits are among theirs (the What-if page's chosen presets come from the
curve's multipliers, so its replay reads nothing more). ``replay_many`` returns one ``WhatIf``
per budget; its ``runs`` can be limited to the rows a page shows (``run_limit``), with
``run_count`` saying how many there are in all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.analysis import peak_queries as pq
from budgetlens.analysis import replay_queries as rq
from budgetlens.analysis import whatif_frames
from budgetlens.analysis.filters import Filters, used_params
from budgetlens.analysis.replay import (
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    Budget,
    WhatIf,
    budget_params,
    dropped_after,
    task_types_of,
)
from budgetlens.analysis.whatif_walk import NEVER, Walk, fetch
from budgetlens.limits import LIMIT_KEYS

__all__ = ["Replays", "prepare", "replay_fast", "replay_many", "summaries"]

#: The guard's checks before a call, first match wins; code = 1 + index (``whatif_frames``).
_REASONS, _CODE = whatif_frames.REASONS, whatif_frames.CODE


def _gt(values: np.ndarray, limit: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return values > limit  # NaN on either side (NULL) is False, as in SQL's CASE


def _limit_table(budget: Budget, task_types: list) -> np.ndarray:
    """(task types x ``LIMIT_KEYS``) limits of ``budget``, NaN = none."""
    rows = [budget.for_task(t) for t in task_types]
    return np.array(
        [[np.nan if (v := r[k]) is None else float(v) for k in LIMIT_KEYS] for r in rows], dtype=float
    )


_KEY_COLUMN = {key: i for i, key in enumerate(LIMIT_KEYS)}


def _in_rowid_order(
    numbers: dict[str, np.ndarray], table: pa.Table
) -> tuple[dict[str, np.ndarray], pa.Table]:
    """``fetch``'s arrays and table of ``READ_UNDER_TABLE`` in ``ui`` (rowid) order, the positions
    the walk's rows name (a scan's order is not relied on)."""
    ui = numbers.pop("ui")
    if np.array_equal(ui, np.arange(ui.size)):
        return numbers, table
    order = np.argsort(ui, kind="stable")
    return {name: values[order] for name, values in numbers.items()}, table.take(pa.array(order))


class Replays:
    """The walk of the runs that ``budgets`` may stop (``prepare``), from which any budget whose
    limits are among theirs (per task type and key, or none) is replayed without reading again."""

    def __init__(self, conn, f: Filters, task_types: list, budgets: Sequence[Budget]):
        self.task_types = task_types
        self.budgets = list(budgets)
        params = {**f.params(), **budget_params(self.budgets, task_types)}
        self.totals = conn.execute(pq.TASK_TOTALS, used_params(pq.TASK_TOTALS, params)).df()
        table = pq.under_table()  # this walk's own: another render's on the connection stays apart
        conn.execute(pq.on(pq.CREATE_UNDER_TABLE, table), used_params(pq.CREATE_UNDER_TABLE, params))
        with dropped_after(conn, pq.on(pq.DROP_UNDER_TABLE, table)):
            self.under, self.rows = _in_rowid_order(*fetch(conn, pq.on(pq.READ_UNDER_TABLE, table), {}))
            self._prepare(conn, task_types, table)

    def _prepare(self, conn, task_types: list, table: str) -> None:
        task_index = pc.index_in(
            self.rows.column("task_type"), value_set=pa.array(task_types), skip_nulls=False
        )
        self.task_index = task_index.to_numpy(zero_copy_only=False).astype(np.int64)
        n = len(self.task_index)
        recorded = self.rows.column("recorded_stop_reason")
        self.old_stop = pc.fill_null(pc.starts_with(recorded, "budget_"), False).to_numpy(
            zero_copy_only=False
        )
        self.recorded_code = np.zeros(n, dtype=np.int64)
        for reason, code in _CODE.items():
            self.recorded_code[
                pc.fill_null(pc.equal(recorded, reason), False).to_numpy(zero_copy_only=False)
            ] = code
        self.no_calls = np.isnan(self.under["calls"])
        self.calls_or_nan = np.where(self.under["calls"] == 0, np.nan, self.under["calls"])
        self.no_calls_at = np.flatnonzero(self.no_calls)
        #: Per stop reason of ``NOT_LARGER``: the runs the old budget stopped for it (grouped by
        #: task type), whether it recorded any limit of that kind, and per limit whether none was
        #: recorded and the recorded one (NaN = none); a budget's limit of a task type is one
        #: number, compared with a slice (no gather per budget).
        self.old_stops = []
        for reason, names in rq.NOT_LARGER.items():
            at = np.flatnonzero(self.recorded_code == _CODE[reason])
            if at.size:
                at = at[np.argsort(self.task_index[at], kind="stable")]
                old_task = self.task_index[at]
                bounds = np.searchsorted(old_task, np.arange(len(task_types) + 1))
                old_limits = {name: self.under[f"limit_{name}"][at] for name in names}
                any_set = np.logical_or.reduce([~np.isnan(v) for v in old_limits.values()])
                unset = {name: np.isnan(v) for name, v in old_limits.items()}
                self.old_stops.append((at, any_set, old_limits, unset, bounds))
        tables = np.stack([_limit_table(b, task_types) for b in self.budgets or [Budget()]])
        #: (task index, key) -> the distinct limits the budgets set, ascending.
        self.limits: dict[tuple[int, str], np.ndarray] = {}
        for t in range(len(task_types)):
            for key, j in _KEY_COLUMN.items():
                values = tables[:, t, j]
                if (~np.isnan(values)).any():
                    self.limits[(t, key)] = np.unique(values[~np.isnan(values)])
        self.walk = Walk(conn, table, self.under, self.task_index, self.limits)
        # budget-independent parts of every verdict
        self.has_calls = ~self.no_calls
        self.tool_count = self.under["run_tool_calls"]
        #: The runs whose counted tool calls pass their task type's smallest tool-call limit
        #: of the budgets: the only ones any budget's tool-call limit can stop.
        lowest = np.full(len(task_types) + 1, np.nan)  # last: the no-such-task guard
        for (t, key), values in self.limits.items():
            if key == "max_tool_calls":
                lowest[t] = values[0]
        self.tool_runs = np.flatnonzero(_gt(self.tool_count, lowest[self.task_index]))
        self.no_calls_task = self.task_index[self.no_calls_at]
        self.no_calls_totals = {
            name: self.under[name][self.no_calls_at]
            for name in (
                "run_duration_s",
                "run_turns",
                "run_cost_usd",
                "run_total_tokens",
                "run_input_tokens",
                "run_output_tokens",
            )
        }
        self.kept_always = self.walk.walked | self.old_stop | self.no_calls

    def covers(self, budget: Budget) -> bool:
        """True when every limit of ``budget`` (per task type and key) is one of the prepared
        budgets' (or none), so ``verdict`` can replay it from the walk already read: its
        candidate runs are among theirs and its limits among the thresholds."""
        table = _limit_table(budget, self.task_types)
        return all(
            np.isnan(table[t, j])
            or ((t, key) in self.limits and bool(np.isin(table[t, j], self.limits[(t, key)])))
            for t in range(len(self.task_types))
            for key, j in _KEY_COLUMN.items()
        )

    def verdict(self, budget: Budget, *, turns: bool = True) -> dict[str, np.ndarray]:
        """The replay of ``budget`` (``covers`` it) over the prepared runs: per run stopped,
        censored, stop_code (``_REASONS`` index + 1, 0 = none), stop_turn (left out with
        ``turns=False``: a summary does not count it), avoided_tokens, avoided_cost_usd."""
        table = _limit_table(budget, self.task_types)
        n, walk = len(self.task_index), self.walk
        by_reason = walk.first_failures(table, _KEY_COLUMN)
        firsts = [by_reason[r] for r in _REASONS]
        stop_at = np.minimum.reduce(firsts)
        stopping = np.flatnonzero(stop_at < NEVER)
        at = stop_at[stopping]
        code_s = np.zeros(stopping.size, dtype=np.int64)  # the first reason, in the guard's order
        for code, first in zip(range(len(_REASONS), 0, -1), reversed(firsts), strict=True):
            code_s[first[stopping] == at] = code
        row = walk.row_start[stopping] + at
        stopped_ui = walk.walk_ui[stopping]
        replay_code = np.zeros(n, dtype=np.int64)  # the replay's stop code, 0 = none
        replay_code[stopped_ui] = code_s
        avoided_tok = np.zeros(n, dtype=np.int64)
        avoided_tok[stopped_ui] = walk.avoided_tok[row]
        avoided_cost = np.zeros(n)
        avoided_cost[stopped_ui] = walk.avoided_cost[row]

        tools_over = np.zeros(n, dtype=bool)
        tr = self.tool_runs
        tools_over[tr] = _gt(
            self.tool_count[tr], table[:, _KEY_COLUMN["max_tool_calls"]][self.task_index[tr]]
        )
        nc = self.no_calls_at
        if nc.size:  # runs without call records: judged on their totals
            lim = {key: table[:, j][self.no_calls_task] for key, j in _KEY_COLUMN.items()}
            totals = self.no_calls_totals
            replay_code[nc] = np.select(
                [
                    _gt(totals["run_duration_s"], lim["max_duration_s"]),
                    _gt(totals["run_turns"], lim["max_turns"]),
                    tools_over[nc],
                    _gt(totals["run_cost_usd"], lim["max_cost_usd"]),
                    _gt(totals["run_total_tokens"], lim["max_total_tokens"])
                    | _gt(totals["run_input_tokens"], lim["max_input_tokens"])
                    | _gt(totals["run_output_tokens"], lim["max_output_tokens"]),
                ],
                list(range(1, 6)),
                0,
            )
        # A run whose counted tool calls pass the limit, not stopped by its calls' walk.
        replay_code[(replay_code == 0) & self.has_calls & tools_over] = _CODE["budget_tools"]
        old_kept = np.zeros(n, dtype=bool)  # stopped by the old budget, the new one not larger
        for at_old, any_set, old_limits, unset, bounds in self.old_stops:
            each = any_set.copy()
            for name, old in old_limits.items():
                column = table[:, _KEY_COLUMN[f"max_{name}"]]
                for t in range(len(column)):
                    part = slice(bounds[t], bounds[t + 1])
                    if part.start == part.stop:
                        continue
                    with np.errstate(invalid="ignore"):  # no new limit (NaN): only an unset old one
                        each[part] &= unset[name][part] | (column[t] <= old[part])
            old_kept[at_old] = each
        kept = self.kept_always | tools_over
        has_replay = replay_code > 0
        stopped = kept & (has_replay | old_kept)
        by_old = ~has_replay & old_kept
        stop_code = replay_code
        stop_code[by_old] = self.recorded_code[by_old]
        out = {  # what the walk avoided: only for runs it stops, all of them stopped
            "stopped": stopped,
            "censored": kept & ~stopped & self.old_stop,
            "stop_code": stop_code,
            "avoided_tokens": avoided_tok,
            "avoided_cost_usd": avoided_cost,
        }
        if turns:
            stop_turn = np.full(n, np.nan)
            stop_turn[has_replay] = self.calls_or_nan[has_replay]  # judged on totals: at the last call
            stop_turn[stopped_ui] = walk.calls["k"][row]
            stop_turn[by_old] = self.calls_or_nan[by_old]
            out["stop_turn"] = stop_turn
        return out

    def summaries(self, verdicts: Sequence[dict[str, np.ndarray]]) -> pd.DataFrame:
        """budget_id (the index in ``verdicts``), then ``SUMMARY_COLUMNS``: per verdict and task
        type (the totals' order), the counts and sums of ``REPLAY_SUMMARY``, as one frame
        (``whatif_frames.summary_frame``)."""
        return whatif_frames.summary_frame(self, verdicts)

    def runs(self, verdict: dict[str, np.ndarray], run_limit: int | None) -> tuple[pd.DataFrame, int]:
        """The stopped and censored runs of one verdict (``RUN_COLUMNS``, ``replay``'s order),
        the first ``run_limit`` of them, and how many there are in all
        (``whatif_frames.run_frame``)."""
        return whatif_frames.run_frame(self, verdict, run_limit)

    def whatif(self, budget: Budget, run_limit: int | None = None) -> WhatIf:
        """The ``WhatIf`` of ``budget`` (``covers`` it): summary, run rows, run count."""
        verdict = self.verdict(budget)
        summary = self.summaries([verdict])[list(SUMMARY_COLUMNS)].reset_index(drop=True)
        runs, count = self.runs(verdict, run_limit)
        return WhatIf(summary, runs, budget, count)


def prepare(conn, f: Filters, budgets: Sequence[Budget]) -> Replays | None:
    """The walk of the runs ``f`` keeps that ``budgets`` may stop (``Replays``); None for an
    empty window or no budget."""
    task_types = task_types_of(conn, f)
    if not task_types or not budgets:
        return None
    return Replays(conn, f, task_types, budgets)


def summaries(conn, f: Filters, budgets: Sequence[Budget]) -> pd.DataFrame:
    """The summaries of ``replay_many`` in one frame: budget_id (the index in ``budgets``), then
    ``SUMMARY_COLUMNS``, one row per budget and task type; empty (those columns) for an empty
    window. What the trade-off curve reads: no run list is built."""
    replays = prepare(conn, f, budgets)
    if replays is None:
        return pd.DataFrame(columns=["budget_id", *SUMMARY_COLUMNS])
    return replays.summaries([replays.verdict(b, turns=False) for b in budgets])


def _empty(budget: Budget) -> WhatIf:
    return WhatIf(pd.DataFrame(columns=SUMMARY_COLUMNS), pd.DataFrame(columns=RUN_COLUMNS), budget, 0)


def replay_many(conn, f: Filters, budgets: Sequence[Budget], *, run_limit: int | None = None) -> list[WhatIf]:
    """Replay each of ``budgets`` over the runs ``f`` keeps: the ``WhatIf`` of
    ``replay.replay(conn, f, budget)`` for each, from per-run peaks (module docstring).

    ``run_limit`` keeps that many run rows of each (in ``replay``'s order: task type, avoided
    tokens descending, run id), ``WhatIf.run_count`` counts them all. An empty window gives empty
    frames with the documented columns.
    """
    replays = prepare(conn, f, budgets)
    if replays is None:
        return [_empty(b) for b in budgets]
    return [replays.whatif(b, run_limit) for b in budgets]


def replay_fast(conn, f: Filters, budget: Budget, run_limit: int | None = None) -> WhatIf:
    """``replay.replay(conn, f, budget)`` from per-run peaks (``replay_many``); ``run_limit``
    keeps the first run rows only (``WhatIf.run_count`` counts them all)."""
    return replay_many(conn, f, [budget], run_limit=run_limit)[0]
