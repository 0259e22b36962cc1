"""The runs behind the evidence as numpy arrays, read once (issue 25): the Kaplan–Meier baselines
(``censoring``) and the plain baselines of the same filters come from one read of the filtered
runs (``evidence_queries.CENSORING_ARRAYS``) instead of two passes, the plain ones computed here
exactly as ``views.baselines`` computes them in SQL (``quantile_cont``: the same formula, the
same float operations; tests compare the two frames).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis.filters import Filters, used_params
from budgetlens.analysis.queries import BASELINE_METRICS, OPTION_TASK_TYPES
from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS

__all__ = ["EvidenceArrays", "plain_baselines", "quantile_cont", "read_arrays"]

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
class EvidenceArrays:
    """The filtered runs, one entry per run: ``arrays`` by column of ``CENSORING_ARRAYS``
    (task_code, censored, cost_known, the ``BASELINE_METRICS`` as float, NaN = NULL) and
    ``groups``: (code, task type) of each task type present, sorted, NULL (code 0) last."""

    arrays: dict[str, np.ndarray]
    groups: list[tuple[int, str | None]]

    def rows_of(self, code: int) -> np.ndarray:
        """Positions of the runs of the task type with ``code``."""
        return np.flatnonzero(self.arrays["task_code"] == code)


def read_arrays(conn, f: Filters) -> EvidenceArrays:
    """One read of the runs ``f`` keeps into numpy arrays (the task type as a small code from
    SQL: no text per row; issue 25: the text column was half of the read at 1M runs)."""
    known = [r[0] for r in conn.execute(OPTION_TASK_TYPES).fetchall()]
    params = {**f.params(), "task_types_known": known}
    table = conn.execute(eq.CENSORING_ARRAYS, used_params(eq.CENSORING_ARRAYS, params)).to_arrow_table()
    arrays = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    per_code = np.bincount(arrays["task_code"], minlength=len(known) + 1)
    groups: list[tuple[int, str | None]] = [(i + 1, t) for i, t in enumerate(known) if per_code[i + 1]]
    if per_code[0]:
        groups.append((0, None))
    return EvidenceArrays(arrays, groups)


def quantile_cont(values: np.ndarray, quantiles: tuple[float, ...]) -> list[float | None]:
    """DuckDB's ``quantile_cont`` of ``values`` (float, no NaN): for rank r = (n - 1) q between
    the order statistics lo and hi, ``lo * (1 - d) + hi * d`` with d = r - floor(r), lo itself
    when r is whole: the same operations, so the same doubles. None for no value."""
    n = values.size
    if n == 0:
        return [None for _ in quantiles]
    ranks = [(n - 1) * q for q in quantiles]
    kth = sorted({k for r in ranks for k in (math.floor(r), math.ceil(r))})
    ordered = np.partition(values, kth)
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
        n = int(at.size)
        row: dict = {"task_type": task_type, "n": n, "low_sample": n < LOW_SAMPLE_RUNS}
        for metric in BASELINE_METRICS:
            values = ev.arrays[metric][at]
            if metric == "cost_usd":
                known = ev.arrays["cost_known"][at].astype(bool)
                row["n_cost"] = int(known.sum())
                values = values[known]
            values = values[~np.isnan(values)]
            row[f"p50_{metric}"], row[f"p95_{metric}"] = quantile_cont(values, (0.5, 0.95))
            row[f"max_{metric}"] = float(values.max()) if values.size else None
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
