"""The runs behind the evidence as numpy arrays, read once (issue 25): the Kaplan–Meier baselines
(``censoring``) and the plain baselines of the same filters come from one read of the filtered
runs (``evidence_queries.CENSORING_ARRAYS``) instead of two passes, the plain ones computed here
exactly as ``views.baselines`` computes them in SQL (``quantile_cont``: the same formula, the
same float operations; tests compare the two frames).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from budgetlens.analysis import evidence_queries as eq
from budgetlens.analysis.filters import Filters, used_params
from budgetlens.analysis.queries import BASELINE_METRICS, OPTION_TASK_TYPES
from budgetlens.analysis.thresholds import LOW_SAMPLE_RUNS

__all__ = [
    "CENSORED_FLAG",
    "COST_KNOWN_FLAG",
    "EvidenceArrays",
    "SortedValues",
    "in_parallel",
    "plain_baselines",
    "quantile_cont",
    "quantile_cont_sorted",
    "read_arrays",
    "sort_flagged",
]

#: The bits of ``CENSORING_ARRAYS``' ``flags``: a budget stopped the run; its cost is fully known.
CENSORED_FLAG = 1
COST_KNOWN_FLAG = 2

#: The integer metrics of ``runs`` and the dtype ``views.baselines`` gives their max (DuckDB's
#: BIGINT -> int64, INTEGER -> int32; Int64 / Int32 with a NULL); the others' max is float64.
_INTEGER_MAX = {
    "total_tokens": "int64",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "turns": "int32",
    "tool_calls": "int32",
}

#: The smallest sort key (``sort_flagged``) of a NaN: a positive NaN's bits (exponent all ones,
#: mantissa not 0) shifted left once; +inf's key is 0xFFE0000000000000 or 1 more.
_NAN_KEY = np.uint64(0xFFE0000000000002)
_ONE = np.uint64(1)
_T = TypeVar("_T")
_R = TypeVar("_R")
#: Threads of ``in_parallel``: the cores DuckDB also uses, at most 4.
WORKERS = min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class SortedValues:
    """One metric of one task type's runs, sorted once for both baselines (issue 25: the plain
    quantiles and the Kaplan–Meier curve each ordered the same values): ``ordered`` the values
    that are not NULL (NaN) ascending (float64), ``censored`` (bool, the same length) True where
    the run of that value was stopped by a budget. For cost, only the runs whose cost is fully
    known."""

    ordered: np.ndarray
    censored: np.ndarray


def sort_flagged(values: np.ndarray, censored: np.ndarray) -> SortedValues:
    """``values`` (float64, 1-D, any order, NaN = no value) ascending without NaN, with the
    ``censored`` flag (bool, the same length) of each value carried along.

    Values without a sign bit (>= 0: every metric of a sane store) sort as one array of uint64
    keys, the value's bits shifted left once with the flag in the last bit: for such doubles
    the bits order as the values do, so one sort orders both and keeps each value's bits (the
    same doubles back; issue 25: a sort of the values, a gather and a sort of the censored ones
    and a binary search per censored value before). Others (a negative value or -0.0) take a
    stable argsort. Ties keep no particular order of their flags (the Kaplan–Meier curve
    counts them per value)."""
    return _sort_flagged_into(np.array(values, dtype=np.float64), censored)


def _sort_flagged_into(values: np.ndarray, censored) -> SortedValues:
    """``sort_flagged`` that may overwrite ``values`` (float64, contiguous, this caller's own):
    the keys are built, sorted and shifted back in its memory (issue 25: three fresh arrays per
    metric and task type before, whose first touch cost more than the sort at 1M runs)."""
    # (a sign bit set is a negative int64 view: one reduction, no array of booleans)
    if values.size and int(values.view(np.int64).min()) < 0:
        flags = np.asarray(censored, dtype=bool)
        order = np.argsort(values, kind="stable")  # NaN last
        kept = values.size - int(np.count_nonzero(np.isnan(values)))
        order = order[:kept]
        return SortedValues(values[order], flags[order])
    keys = values.view(np.uint64)
    keys <<= _ONE
    keys |= _flag_bits(censored)
    keys.sort()
    keys = keys[: int(np.searchsorted(keys, _NAN_KEY))]
    flags_out = (keys & _ONE).astype(bool)
    keys >>= _ONE
    return SortedValues(keys.view(np.float64), flags_out)


def _flag_bits(censored) -> np.ndarray:
    """``censored`` as uint64 0 / 1 (the key's last bit); a uint64 array of 0 / 1 as it is (the
    caller's one conversion for every metric of a read: ``read_arrays``)."""
    flags = np.asarray(censored)
    if flags.dtype == np.uint64:
        return flags
    return np.asarray(flags, dtype=bool).astype(np.uint64)


@dataclass(frozen=True)
class EvidenceArrays:
    """The filtered runs of one read, per task type: ``groups``: (code, task type) of each task
    type present, sorted, NULL (code 0) last; per code ``runs``, ``censored_runs`` (stopped by a
    budget) and ``cost_known_runs`` (cost fully known); per (code, metric of
    ``BASELINE_METRICS``) the ``SortedValues`` both baselines read (``sorted_values``)."""

    groups: list[tuple[int, str | None]]
    runs: dict[int, int]
    censored_runs: dict[int, int]
    cost_known_runs: dict[int, int]
    values: dict[tuple[int, str], SortedValues] = field(repr=False)

    def sorted_values(self, code: int, metric: str) -> SortedValues:
        """``metric`` (one of ``BASELINE_METRICS``) of the runs of the task type with ``code``,
        sorted (``SortedValues``; cost: the runs whose cost is fully known only)."""
        return self.values[(code, metric)]


def in_parallel(work: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """``[work(item) for item in items]`` on up to ``WORKERS`` threads (numpy's sorts, gathers
    and element-wise passes release the GIL: the metrics of one read sort side by side)."""
    items = list(items)
    if WORKERS < 2 or len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(work, items))


def _side_by_side(conn) -> bool:
    """Whether ``conn`` is a DuckDB connection to a file opened read-only: no writer can commit
    while it is open (DuckDB locks the file), so two cursors of it read the same rows."""
    if not isinstance(conn, duckdb.DuckDBPyConnection):
        return False
    row = conn.execute("SELECT current_setting('access_mode')").fetchone()
    return row is not None and row[0] == "read_only"


def _read_columns(conn, params: dict) -> dict[str, pa.ChunkedArray]:
    """The columns of ``CENSORING_ARRAYS`` by name: on a read-only file its two halves side by
    side, one on a second cursor (``CENSORING_ARRAYS_TEXT`` and ``_NUMBERS``: the same rows in the
    same order), else the one statement."""

    def read(cursor, statement: str) -> pa.Table:
        return cursor.execute(statement, used_params(statement, params)).to_arrow_table()

    if not _side_by_side(conn):
        table = read(conn, eq.CENSORING_ARRAYS)
        return {name: table.column(name) for name in table.column_names}
    other = conn.cursor()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            numbers = pool.submit(read, other, eq.CENSORING_ARRAYS_NUMBERS)
            text = read(conn, eq.CENSORING_ARRAYS_TEXT)
            tables = (text, numbers.result())
    finally:
        other.close()
    if tables[0].num_rows != tables[1].num_rows:  # (cannot happen on a read-only file)
        raise RuntimeError("evidence read: the two halves differ in rows")
    return {name: t.column(name) for t in tables for name in t.column_names}


def read_arrays(conn, f: Filters) -> EvidenceArrays:
    """One read of the runs ``f`` keeps into numpy arrays (the task type as a small code from
    SQL: no text per row; issue 25: the text column was half of the read at 1M runs), grouped by
    that code (one stable sort of the codes; each task type's runs are then a slice), each
    metric of each task type sorted (``sort_flagged``)."""
    known = [r[0] for r in conn.execute(OPTION_TASK_TYPES).fetchall()]
    params = {**f.params(), "task_types_known": known}
    table = _read_columns(conn, params)
    codes = table["task_code"].to_numpy()
    flags = table["flags"].to_numpy()
    per_code = np.bincount(codes, minlength=len(known) + 1)
    order = None
    if np.any(codes[1:] < codes[:-1]):  # (a stable sort of 16-bit keys is a radix sort in numpy)
        keys = codes.astype(np.uint16) if len(known) < np.iinfo(np.uint16).max else codes
        order = np.argsort(keys, kind="stable")
        flags = flags[order]
    ends = np.cumsum(per_code)
    spans = {code: slice(int(ends[code] - per_code[code]), int(ends[code])) for code in range(per_code.size)}
    present = [code for code in range(per_code.size) if per_code[code]]
    censored = (flags & CENSORED_FLAG).astype(bool)

    bits = censored.astype(np.uint64)  # the keys' flag bits, once for every metric

    def sort_metric(metric: str) -> list[tuple[tuple[int, str], SortedValues]]:
        column = table[metric].to_numpy(zero_copy_only=False)
        # this read's own copy (the gather, or a copy of Arrow's buffer), sorted in place
        column = column[order] if order is not None else np.array(column, dtype=np.float64)
        return [
            ((code, metric), _sort_flagged_into(column[spans[code]], bits[spans[code]])) for code in present
        ]

    out = dict(pair for pairs in in_parallel(sort_metric, BASELINE_METRICS) for pair in pairs)
    groups: list[tuple[int, str | None]] = [(i + 1, t) for i, t in enumerate(known) if per_code[i + 1]]
    if per_code[0]:
        groups.append((0, None))
    return EvidenceArrays(
        groups,
        runs={code: int(per_code[code]) for code in present},
        censored_runs={code: int(np.count_nonzero(censored[spans[code]])) for code in present},
        cost_known_runs={
            code: int(np.count_nonzero(flags[spans[code]] & COST_KNOWN_FLAG)) for code in present
        },
        values=out,
    )


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
        n = ev.runs[code]
        row: dict = {"task_type": task_type, "n": n, "low_sample": n < LOW_SAMPLE_RUNS}
        for metric in BASELINE_METRICS:
            if metric == "cost_usd":
                row["n_cost"] = ev.cost_known_runs[code]
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
