"""The runs behind the evidence as numpy arrays, read once (issue 25): the Kaplan–Meier baselines
(``censoring``) and the plain baselines of the same filters come from one read of the filtered
runs (``evidence_queries.CENSORING_ARRAYS``) instead of two passes, the plain ones computed here
exactly as ``views.baselines`` computes them in SQL (``quantile_cont``: the same formula, the
same float operations; tests compare the two frames).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis.filters import Filters, used_params
from budgetlens.analysis.queries import BASELINE_METRICS, OPTION_TASK_TYPES
from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS

__all__ = [
    "EvidenceArrays",
    "SortedValues",
    "plain_baselines",
    "quantile_cont",
    "quantile_cont_sorted",
    "read_arrays",
]

#: The integer metrics of ``runs`` and the dtype ``views.baselines`` gives their max (DuckDB's
#: BIGINT -> int64, INTEGER -> int32; Int64 / Int32 with a NULL); the others' max is float64.
_INTEGER_MAX = {
    "total_tokens": "int64",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "turns": "int32",
    "tool_calls": "int32",
}


@dataclass(frozen=True)
class SortedValues:
    """One metric of one task type's runs, sorted once for both baselines (issue 25: the plain
    quantiles and the Kaplan–Meier curve each ordered the same values): ``ordered`` the values
    that are not NULL (NaN) ascending, ``censored`` those of them whose run a budget stopped,
    ascending. For cost, only the runs whose cost is fully known."""

    ordered: np.ndarray
    censored: np.ndarray


def _sorted_without_nan(values: np.ndarray) -> np.ndarray:
    """``values`` ascending without NaN (numpy sorts NaN last)."""
    ordered = np.sort(values)
    missing = int(np.count_nonzero(np.isnan(ordered))) if ordered.dtype.kind == "f" else 0
    return ordered[: ordered.size - missing] if missing else ordered


@dataclass(frozen=True)
class EvidenceArrays:
    """The filtered runs, one entry per run, grouped by task type: ``arrays`` by column of
    ``CENSORING_ARRAYS`` (task_code, censored, cost_known, the ``BASELINE_METRICS`` as float,
    NaN = NULL), the runs of one task type next to each other (``rows_of``), and ``groups``:
    (code, task type) of each task type present, sorted, NULL (code 0) last. ``sorted_values``
    keeps what it computed, so the plain and the Kaplan–Meier baselines of one read share their
    sorts."""

    arrays: dict[str, np.ndarray]
    groups: list[tuple[int, str | None]]
    #: code -> the slice of ``arrays`` holding that task type's runs
    spans: dict[int, slice] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def rows_of(self, code: int) -> slice:
        """The runs of the task type with ``code``: a slice of every array of ``arrays``."""
        return self.spans.get(code, slice(0, 0))

    def sorted_values(self, code: int, metric: str) -> SortedValues:
        """``metric`` (one of ``BASELINE_METRICS``) of the runs of the task type with ``code``,
        sorted (``SortedValues``; cost: the runs whose cost is fully known only)."""
        key = (code, metric)
        if key not in self._memo:
            at = self.rows_of(code)
            values = self.arrays[metric][at]
            stopped = self.arrays["censored"][at]
            if metric == "cost_usd":
                known = self.arrays["cost_known"][at]
                values, stopped = values[known], stopped[known]
            self._memo[key] = SortedValues(_sorted_without_nan(values), _sorted_without_nan(values[stopped]))
        return self._memo[key]


def read_arrays(conn, f: Filters) -> EvidenceArrays:
    """One read of the runs ``f`` keeps into numpy arrays (the task type as a small code from
    SQL: no text per row; issue 25: the text column was half of the read at 1M runs), ordered by
    that code (one stable sort of the codes; each task type's runs are then a slice)."""
    known = [r[0] for r in conn.execute(OPTION_TASK_TYPES).fetchall()]
    params = {**f.params(), "task_types_known": known}
    table = conn.execute(eq.CENSORING_ARRAYS, used_params(eq.CENSORING_ARRAYS, params)).to_arrow_table()
    arrays = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    for flag in ("censored", "cost_known"):
        arrays[flag] = arrays[flag].astype(bool, copy=False)
    codes = arrays["task_code"]
    per_code = np.bincount(codes, minlength=len(known) + 1)
    if np.any(codes[1:] < codes[:-1]):  # (a stable sort of 16-bit keys is a radix sort in numpy)
        keys = codes.astype(np.uint16) if len(known) < np.iinfo(np.uint16).max else codes
        order = np.argsort(keys, kind="stable")
        arrays = {name: column[order] for name, column in arrays.items()}
    ends = np.cumsum(per_code)
    spans = {code: slice(int(ends[code] - per_code[code]), int(ends[code])) for code in range(per_code.size)}
    groups: list[tuple[int, str | None]] = [(i + 1, t) for i, t in enumerate(known) if per_code[i + 1]]
    if per_code[0]:
        groups.append((0, None))
    return EvidenceArrays(arrays, groups, spans)


def quantile_cont(values: np.ndarray, quantiles: tuple[float, ...]) -> list[float | None]:
    """DuckDB's ``quantile_cont`` of ``values`` (float, no NaN): for rank r = (n - 1) q between
    the order statistics lo and hi, ``lo * (1 - d) + hi * d`` with d = r - floor(r), lo itself
    when r is whole: the same operations, so the same doubles. None for no value."""
    return quantile_cont_sorted(np.sort(values), quantiles)


def quantile_cont_sorted(ordered: np.ndarray, quantiles: tuple[float, ...]) -> list[float | None]:
    """``quantile_cont`` of values already sorted ascending (``ordered``, no NaN). (A sort is
    cheaper than ``np.partition`` at several ranks here, and the Kaplan–Meier curve needs it.)"""
    n = ordered.size
    if n == 0:
        return [None for _ in quantiles]
    ranks = [(n - 1) * q for q in quantiles]
    out: list[float | None] = []
    for r in ranks:
        lo, hi = math.floor(r), math.ceil(r)
        if lo == hi:
            out.append(float(ordered[lo]))
        else:
            d = r - lo
            out.append(float(ordered[lo] * (1 - d) + ordered[hi] * d))
    return out


def plain_baselines(ev: EvidenceArrays) -> pd.DataFrame:
    """``views.baselines`` (per task type, not by model) from the arrays: task_type, n,
    low_sample, then per metric p50_/p95_/max_ (cost: n_cost first, over the runs whose cost
    is fully known), the same values and dtypes."""
    rows = []
    for code, task_type in ev.groups:
        at = ev.rows_of(code)
        n = at.stop - at.start
        row: dict = {"task_type": task_type, "n": n, "low_sample": n < LOW_SAMPLE_RUNS}
        for metric in BASELINE_METRICS:
            if metric == "cost_usd":
                row["n_cost"] = int(np.count_nonzero(ev.arrays["cost_known"][at]))
            ordered = ev.sorted_values(code, metric).ordered
            row[f"p50_{metric}"], row[f"p95_{metric}"] = quantile_cont_sorted(ordered, (0.5, 0.95))
            row[f"max_{metric}"] = float(ordered[-1]) if ordered.size else None
        rows.append(row)
    columns = ["task_type", "n", "low_sample"]
    for metric in BASELINE_METRICS:
        columns += (["n_cost"] if metric == "cost_usd" else []) + [
            f"{p}_{metric}" for p in ("p50", "p95", "max")
        ]
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("n", "n_cost"):
        frame[column] = frame[column].astype("int64")
    frame["low_sample"] = frame["low_sample"].astype(bool)
    for metric in BASELINE_METRICS:
        column = f"max_{metric}"
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
        if metric in _INTEGER_MAX:  # nullable (Int64) where a task type has none, as DuckDB gives it
            dtype = _INTEGER_MAX[metric]
            frame[column] = frame[column].astype(dtype.capitalize() if frame[column].isna().any() else dtype)
        for p in ("p50", "p95"):
            frame[f"{p}_{metric}"] = pd.to_numeric(frame[f"{p}_{metric}"], errors="coerce").astype("float64")
    return frame
