"""The Baselines page's distribution of total tokens per run (``views.token_distribution``,
statement ``queries.TOKEN_DISTRIBUTION``) from the evidence read's sorted total tokens
(``evidence_arrays.EvidenceArrays``; issue 25: the page read the runs once more for it).

The statement's bucket of a value v is ``floor(log10(v) * per_decade)``, and its bounds are
``pow(10, k / per_decade)``: here the same libm functions (``math.log10``, ``math.pow``, as
DuckDB's ``log10`` and ``pow`` call them) on the same doubles. The bucket only grows with the
value, so on the sorted values each bucket's runs are a slice: a binary search near each bound
(``math.log10`` on the values around it only), not a logarithm per run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from budgetlens.analysis.evidence_arrays import EvidenceArrays

__all__ = ["TOKEN_DISTRIBUTION_COLUMNS", "token_distribution"]

#: The columns of ``views.token_distribution``.
TOKEN_DISTRIBUTION_COLUMNS = ("task_type", "bucket_low_tokens", "bucket_high_tokens", "runs")


def token_distribution(ev: EvidenceArrays, per_decade: int = 10) -> pd.DataFrame:
    """``views.token_distribution(conn, f, per_decade)`` from the arrays of one read of the same
    filters: per task type (as sorted in ``ev.groups``, NULL last) and bucket ascending, the runs
    with total tokens > 0 in it; the same values and dtypes."""
    scale = float(per_decade)
    rows: list[tuple[str | None, float, float, int]] = []
    for code, task_type in ev.groups:
        ordered = ev.sorted_values(code, "total_tokens").ordered
        ordered = ordered[int(np.searchsorted(ordered, 0.0, side="right")) :]  # only v > 0
        for k, runs in _bucket_counts(ordered, scale):
            rows.append((task_type, math.pow(10.0, k / scale), math.pow(10.0, (k + 1) / scale), runs))
    frame = pd.DataFrame(rows, columns=list(TOKEN_DISTRIBUTION_COLUMNS))
    frame["bucket_low_tokens"] = frame["bucket_low_tokens"].astype("float64")
    frame["bucket_high_tokens"] = frame["bucket_high_tokens"].astype("float64")
    frame["runs"] = frame["runs"].astype("int64")
    return frame


def _bucket(value: float, scale: float) -> float:
    """The statement's bucket of ``value`` (> 0): ``floor(log10(value) * scale)``, a double."""
    return float(math.floor(math.log10(value) * scale))


def _bucket_counts(ordered: np.ndarray, scale: float) -> list[tuple[float, int]]:
    """(bucket, runs) of each non-empty bucket of ``ordered`` (sorted ascending, every value > 0
    and finite), bucket ascending."""
    n = ordered.size
    out = []
    start = 0
    while start < n:
        k = _bucket(float(ordered[start]), scale)
        end = _first_above(ordered, start, k, scale)
        out.append((k, end - start))
        start = end
    return out


def _first_above(ordered: np.ndarray, start: int, k: float, scale: float) -> int:
    """The first position after ``start`` whose bucket is above ``k`` (``ordered.size`` when
    none): a binary search for the bucket's upper bound, then moved by ``_bucket`` itself over
    the few values where the bound's rounding could put them either side."""
    bound = math.pow(10.0, (k + 1) / scale)
    end = max(int(np.searchsorted(ordered, bound, side="left")), start + 1)
    # (ties move as one: ``ordered[start]`` is in bucket k, so the first loop stops above start)
    while _bucket(float(ordered[end - 1]), scale) > k:
        end = int(np.searchsorted(ordered, ordered[end - 1], side="left"))
    while end < ordered.size and _bucket(float(ordered[end]), scale) <= k:
        end = int(np.searchsorted(ordered, ordered[end], side="right"))
    return end
