"""The call-by-call walk of the fast what-if (``budgetlens.analysis.whatif_peaks``, issue 25): the
calls and tool-call events of the runs some budget may stop, read once by integer run key
(``peak_queries.WALK_CALLS``; by run id when two runs share a key), and per-run thresholds.

The running counts and token sums along each run (calls made, tool calls before each call,
tokens, input and output) are summed here, in the replay's order; the USD before each call comes
from the store's own running sum, as the reference replay sums it. Then, for each check of the
guard and each task type, the distinct limits the budgets set are sorted, each call is given the
number of them it passes, and, as every check's measure grows along a run, the first call that
fails a limit is the count of the calls before it that pass it (a running maximum makes this
exact for any series): ``first_failures`` reads a budget's first failing call per run and check
from those counts, for every budget without reading the calls again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from budgetlens.analysis import peak_queries as pq
from budgetlens.analysis.filters import used_params

__all__ = ["CHECKS", "NEVER", "Walk", "fetch"]

#: (limit key, walk series, stops at series >= limit (else >), reason): the guard's checks in its
#: order (``replay_queries._FLAGGED``), one per limit key.
CHECKS = (
    ("max_duration_s", "time_s", True, "budget_time"),
    ("max_turns", "k", False, "budget_turns"),
    ("max_tool_calls", "tools_before", False, "budget_tools"),
    ("max_cost_usd", "cost_before", True, "budget_cost"),
    ("max_total_tokens", "cum_tok", False, "budget_tokens"),
    ("max_input_tokens", "cum_in", False, "budget_tokens"),
    ("max_output_tokens", "cum_out", False, "budget_tokens"),
)
#: The stop reason of each check's limit key.
_REASON_OF = {key: reason for key, _series, _ge, reason in CHECKS}
#: "Never" for a first failing call (an offset within a run).
NEVER = np.iinfo(np.int64).max


def fetch(conn, statement: str, params: dict) -> tuple[dict[str, np.ndarray], pa.Table]:
    """``statement`` as Arrow, and its number columns as numpy arrays (NULL = NaN); text and
    time columns stay in the Arrow table (no Python object per row)."""
    table = conn.execute(statement, used_params(statement, params)).to_arrow_table()
    numbers = {
        name: table.column(name).to_numpy(zero_copy_only=False)
        for name, kind in zip(table.column_names, table.schema.types, strict=True)
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    }
    return numbers, table


def _running(values: np.ndarray, first: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Running sums of ``values`` (int64) restarting at each segment's ``first`` row."""
    total = np.cumsum(values)
    before = (total - values)[first]
    return total - before[segment]


def _segments(ui: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each run of equal ``ui`` (sorted) and each row's run number."""
    new = np.ones(ui.size, dtype=bool)
    new[1:] = ui[1:] != ui[:-1]
    return np.flatnonzero(new), np.cumsum(new) - 1


def _cost_before(cost: np.ndarray, window: np.ndarray, first: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """The USD of a run's stream rows before each row: ``window`` (the SQL window's) where it is
    set (the long runs), else each run's own ``cost`` added left to right from its first row, as
    the window adds a frame of at most ``SHORT_STREAM_ROWS`` rows (``peak_queries``), minus the
    row's own cost, as the window's ``sum(cost) OVER w - cost``."""
    out = window.copy()
    short = np.isnan(window)
    if not short.any():
        return out
    position = np.arange(cost.size) - first[segment]
    rows = np.flatnonzero(short)
    runs, local = np.unique(segment[rows], return_inverse=True)
    table = np.zeros((runs.size, pq.SHORT_STREAM_ROWS))
    table[local, position[rows]] = cost[rows]
    out[rows] = np.cumsum(table, axis=1)[local, position[rows]] - cost[rows]
    return out


@dataclass(frozen=True)
class _Thresholds:
    """One check of one task type over its walked runs: the distinct limits (``limits``,
    ascending) and, per limit and walked run that fails the smallest (``runs``: walk indices;
    every other walked run of the task type fails none), the offset of the first call that
    fails it (``first``, limits x runs; ``NEVER`` when none does)."""

    limits: np.ndarray
    runs: np.ndarray
    first: np.ndarray


class Walk:
    """The walked runs (``under`` rows with ``walked``: the rows of ``table``, the walk's
    ``peak_queries.UNDER_TABLE``, in its ``rowid`` order, which the walk reads) and their calls: ``calls`` (per call in the replay's order: ui, k, time_s, tools_before,
    cum_tok, cum_in, cum_out, cost_before, tok, cost), per walked run ``n_rows``, ``row_start``,
    ``spent_tok``, ``spent_cost``; thresholds for the ``limits`` ({(task index, key): distinct
    limits ascending}) over the runs' ``task_index``."""

    def __init__(self, conn, table: str, under: dict, task_index: np.ndarray, limits: dict):
        self.walked = under["walked"].astype(bool)
        self.walk_ui = np.flatnonzero(self.walked)
        self.calls = self._read(conn, table, under)
        n_walk = len(self.walk_ui)
        self.w_of_row = np.searchsorted(self.walk_ui, self.calls["ui"])
        self.n_rows = np.bincount(self.w_of_row, minlength=n_walk)
        self.row_start = np.concatenate(([0], np.cumsum(self.n_rows)[:-1])).astype(np.int64)
        self.spent_tok = np.bincount(self.w_of_row, weights=self.calls["tok"], minlength=n_walk).astype(
            np.int64
        )
        self.spent_cost = np.bincount(self.w_of_row, weights=self.calls["cost"], minlength=n_walk)
        #: Per call, what its run spends from it on (tokens, USD): what a stop there avoids.
        self.avoided_tok = self.spent_tok[self.w_of_row] - (
            self.calls["cum_tok"].astype(np.int64) - self.calls["tok"].astype(np.int64)
        )
        self.avoided_cost = self.spent_cost[self.w_of_row] - self.calls["cost_before"]
        self.thresholds = self._thresholds(task_index, limits)

    def _read(self, conn, table: str, under: dict) -> dict[str, np.ndarray]:
        # the walked runs are those of the walk's ``pq.UNDER_TABLE`` named ``table`` (the caller's ``under``)
        params = {"all_long": False}
        by_key, by_id = pq.on(pq.WALK_CALLS, table), pq.on(pq.WALK_CALLS_BY_ID, table)
        stream, _ = fetch(conn, by_key, params)
        #: How the calls were read: "run_key", or "run_id" when some walked run's rows did not
        #: match its counts (a key two run ids share, rows written without a key).
        self.read_by = "run_key"
        if not self._complete(stream, under):
            stream, _ = fetch(conn, by_id, params)
            self.read_by = "run_id"
        first, segment = _segments(stream["ui"])
        if (np.arange(segment.size) - first[segment] >= pq.SHORT_STREAM_ROWS)[
            np.isnan(stream["cost_before"])
        ].any():
            # rows its counts did not announce: every run's running USD from the window
            params["all_long"] = True
            stream, _ = fetch(conn, by_id if self.read_by == "run_id" else by_key, params)
            first, segment = _segments(stream["ui"])
        ui = stream["ui"].astype(np.int64)
        is_call = stream["is_call"].astype(np.int64)
        sums = {
            "k": _running(is_call, first, segment),
            "tools_before": _running(1 - is_call, first, segment),
            "cum_tok": _running(stream["tok"], first, segment),
            "cum_in": _running(stream["inp"], first, segment),
            "cum_out": _running(stream["outp"], first, segment),
        }
        sums["cost_before"] = _cost_before(stream["cost"], stream["cost_before"], first, segment)
        calls = is_call == 1
        out = {name: values[calls] for name, values in sums.items()}
        out.update({name: stream[name][calls] for name in ("time_s", "tok", "cost")})
        out["ui"] = ui[calls]
        return out

    def _complete(self, stream: dict, under: dict) -> bool:
        """Whether every walked run got exactly its calls and tool-call events (by its counts)."""
        n_walk = len(self.walk_ui)
        w = np.searchsorted(self.walk_ui, stream["ui"].astype(np.int64))
        is_call = stream["is_call"] == 1
        calls = np.bincount(w[is_call], minlength=n_walk)
        events = np.bincount(w[~is_call], minlength=n_walk)
        expected_calls = np.nan_to_num(under["calls"][self.walk_ui]).astype(np.int64)
        expected_events = np.nan_to_num(under["tool_events"][self.walk_ui]).astype(np.int64)
        return bool(np.array_equal(calls, expected_calls) and np.array_equal(events, expected_events))

    def _thresholds(self, task_index: np.ndarray, limits: dict) -> dict[tuple[int, str], _Thresholds]:
        out: dict[tuple[int, str], _Thresholds] = {}
        walk_task = task_index[self.walk_ui]
        row_task = walk_task[self.w_of_row]
        for t in np.unique(walk_task):
            runs = np.flatnonzero(walk_task == t)
            in_task = row_task == t
            local = np.searchsorted(runs, self.w_of_row[in_task])
            for key, series, at_or_above, _reason in CHECKS:
                known = limits.get((int(t), key))
                if known is None:
                    continue
                measure = self.calls[series][in_task].astype(float)
                # only the runs some call of which fails the smallest limit (NULL fails none, as
                # SQL's CASE): every other run passes every limit of this check (``NEVER``)
                with np.errstate(invalid="ignore"):
                    fails = measure >= known[0] if at_or_above else measure > known[0]
                hit = np.bincount(local[fails], minlength=runs.size) > 0
                rows = hit[local]
                hit_runs = np.flatnonzero(hit)
                measure = measure[rows]
                passed = np.searchsorted(known, measure, side="right" if at_or_above else "left")
                passed[np.isnan(measure)] = 0
                width = known.size + 1
                offset = np.searchsorted(hit_runs, local[rows]) * width
                worst = np.maximum.accumulate(offset + passed) - offset  # running max within a run
                counts = np.bincount(offset + worst, minlength=hit_runs.size * width).reshape(
                    hit_runs.size, width
                )
                first = np.cumsum(counts, axis=1)[:, : known.size]
                first = np.where(first < self.n_rows[runs[hit_runs]][:, None], first, NEVER)
                out[(int(t), key)] = _Thresholds(known, runs[hit_runs], np.ascontiguousarray(first.T))
        return out

    def first_failures(self, table: np.ndarray, key_column: dict[str, int]) -> dict[str, np.ndarray]:
        """Per stop reason of ``CHECKS``, per walked run, the offset of the first call that fails
        a limit of that reason in ``table`` (task types x limit keys, NaN = none; every limit
        among the thresholds'), ``NEVER`` when none does."""
        out = {reason: np.full(len(self.walk_ui), NEVER, dtype=np.int64) for reason in _REASON_OF.values()}
        for (t, name), found in self.thresholds.items():
            value = table[t, key_column[name]]
            if np.isnan(value):
                continue
            at = found.first[int(np.searchsorted(found.limits, value))]
            target = out[_REASON_OF[name]]
            target[found.runs] = np.minimum(target[found.runs], at)
        return out
