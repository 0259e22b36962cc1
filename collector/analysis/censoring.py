"""Censoring-aware baselines (design §6): Kaplan–Meier product-limit percentiles.

A run that a budget stopped (stop reason ``budget_*``) is *right-censored* at its recorded usage:
it would have used more tokens, turns, time and money had the budget let it go on. The plain
P95 (``quantile_cont``) treats that usage as the run's real size, so a tight budget pulls its own
P95 down and recommends itself again. The Kaplan–Meier estimator (scipy's ``stats.ecdf`` on
``stats.CensoredData``, not our own) counts a censored run only as "at least this much"; under
runs that ran with different limits it recovers the tail that the higher limits saw.

A Kaplan–Meier percentile is the smallest observed value at which the estimated CDF reaches the
probability (a step function; no interpolation). When the CDF never reaches it (every run that
could show the tail was stopped before it), the percentile cannot be estimated: it is reported as
a *lower bound*, the largest recorded value (``Percentile.lower_bound``), shown as "≥ 48,000",
never as a number that looks exact. The same holds when the CDF reaches the probability only
where fewer than ``MIN_AT_RISK`` (10) runs are left at risk (recorded at or above the value): a
handful of completed runs past every censoring point would otherwise carry the censored runs'
whole weight; the lower bound is then the largest value that at least 10 runs reached, or the
plain percentile of the recorded values when that is larger (a stopped run's real size is at least
what it recorded), so a censoring-aware preset is never below the plain one.

A task type's censoring is *material* when more than ``MATERIAL_CENSORED_SHARE`` (5 %) of its
runs in the window were stopped by a budget; its preset then rests on the Kaplan–Meier P95.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from budgetlens.analysis.evidence_arrays import (
    EvidenceArrays,
    in_parallel,
    plain_baselines,
    read_arrays,
    sort_flagged,
)
from budgetlens.analysis.evidence_histogram import token_distribution
from budgetlens.analysis.filters import Filters
from budgetlens.analysis.queries import BASELINE_METRICS

__all__ = [
    "MATERIAL_CENSORED_SHARE",
    "MIN_AT_RISK",
    "METHOD_CENSORING_AWARE",
    "METHOD_PLAIN",
    "Percentile",
    "baselines_evidence",
    "censored_baselines",
    "evidence_frames",
    "km_baselines",
    "km_percentile",
    "km_percentiles",
    "km_percentiles_flagged",
    "km_percentiles_sorted",
]

#: A Kaplan–Meier percentile of censored data counts only where at least this many runs are
#: still "at risk" (recorded at or above the value); past that the tail rests on a handful of
#: runs that inherit the censored runs' weight, and the percentile is reported as a lower bound.
MIN_AT_RISK = 10
#: Above this share of budget-stopped runs, a task type's preset uses the Kaplan–Meier P95.
MATERIAL_CENSORED_SHARE = 0.05
#: The preset file's ``basis.method`` values.
METHOD_PLAIN = "plain"
METHOD_CENSORING_AWARE = "kaplan-meier"


@dataclass(frozen=True)
class Percentile:
    """A Kaplan–Meier percentile: ``value`` in the metric's unit; ``lower_bound`` True when the
    estimate never reaches the probability, so the real percentile is at least ``value`` (the
    largest recorded value). ``value`` is None without any run."""

    value: float | None
    lower_bound: bool = False

    def text(self, fmt: str = "{:,.0f}") -> str:
        """``"48,000"``, ``"≥ 48,000"`` for a lower bound, ``""`` when unknown."""
        if self.value is None:
            return ""
        return ("≥ " if self.lower_bound else "") + fmt.format(self.value)


def _kaplan_meier(ordered: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, CDF, at risk): every distinct value of ``ordered`` (the values, sorted ascending)
    ascending, the Kaplan–Meier estimate of the CDF there (1 - prod(1 - events / at risk) over
    the times up to it; censored values count at risk, not as events) and the values >= it.
    ``censored``: the censored values among them, sorted ascending (a binary search per value in
    order is several times faster than in any order). Events at a time = its values less its
    censored ones."""
    starts, counts = _distinct(ordered)
    events = counts
    if censored.size:  # each censored value is one of the times: count them there
        events = counts - np.bincount(np.searchsorted(ordered[starts], censored), minlength=starts.size)
    return _curve(ordered, starts, events)


def _kaplan_meier_flagged(
    ordered: np.ndarray, flags: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_kaplan_meier`` of ``ordered`` where ``flags[i]`` (bool) says whether ``ordered[i]``
    is censored (``evidence_arrays.sort_flagged``): a time's censored values are its flags'
    count, a difference of one running sum (the same integers, so the same curve)."""
    starts, counts = _distinct(ordered)
    if starts.size == ordered.size:  # every value distinct (a duration): its events are 1 - flag
        return _curve(ordered, starts, 1 - flags.astype(np.int64))
    # (a running sum of bools into int32 costs a quarter of one into int64)
    running = np.zeros(ordered.size + 1, dtype=np.int32 if ordered.size < 2**31 else np.int64)
    np.cumsum(flags, out=running[1:])
    bounds = np.append(starts, ordered.size)
    return _curve(ordered, starts, counts - np.diff(running[bounds]))


def _distinct(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, counts) of the runs of equal values of ``ordered`` (sorted): the position of
    each distinct value's first copy and its number of copies."""
    n = ordered.size
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    return starts, np.diff(np.append(starts, n))


def _curve(
    ordered: np.ndarray, starts: np.ndarray, events: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, CDF, at risk) of the distinct values at ``starts`` with ``events`` there."""
    at_risk = ordered.size - starts
    # 1 - prod(1 - events / at_risk), each step in one array (the same operations in the same
    # order as the expression, so the same doubles; issue 25: four fresh arrays before)
    cdf = np.divide(events, at_risk)
    np.subtract(1.0, cdf, out=cdf)
    np.cumprod(cdf, out=cdf)
    np.subtract(1.0, cdf, out=cdf)
    # (every value distinct: the times are the values themselves, no gather)
    return ordered if starts.size == ordered.size else ordered[starts], cdf, at_risk


def km_percentile(values, censored, probability: float) -> Percentile:
    """The Kaplan–Meier percentile of ``values`` (1-D, finite, any unit) where ``censored[i]`` is
    True for a right-censored value (the run was stopped: its real size is larger).

    Returns the smallest value whose estimated CDF is >= ``probability`` (0 < p < 1), or a lower
    bound when the estimate never reaches it, or (with censoring) reaches it where fewer than
    ``MIN_AT_RISK`` runs are at risk: the largest value at least that many runs reached, or the
    plain percentile of the recorded values when that is larger (every value censored: the
    largest), so a lower bound is never below the plain percentile. NaN values are left out; no
    value gives ``Percentile(None)``. Raises ValueError for a probability outside (0, 1) or
    arrays of different lengths. The estimate is numpy's (one sort; the same curve as
    ``scipy.stats.ecdf`` on ``scipy.stats.CensoredData``, which the tests compare it with).
    """
    return km_percentiles(values, censored, (probability,))[0]


def km_percentiles(values, censored, probabilities) -> list[Percentile]:
    """``km_percentile`` of each of ``probabilities``, from one estimate of the curve."""
    for probability in probabilities:
        if not 0 < probability < 1:
            raise ValueError(f"probability must be in (0, 1), got {probability!r}")
    x = np.asarray(values, dtype=float)
    c = np.asarray(censored, dtype=bool)
    if x.shape != c.shape:
        raise ValueError(f"values and censored differ in length ({x.size} vs {c.size})")
    keep = np.isfinite(x)
    if not keep.all():
        x, c = x[keep], c[keep]
    both = sort_flagged(x, c)
    return km_percentiles_flagged(both.ordered, both.censored, probabilities)


def km_percentiles_sorted(ordered, censored, probabilities) -> list[Percentile]:
    """``km_percentiles`` of values already sorted: ``ordered`` every value ascending (no NaN),
    ``censored`` the censored ones among them, ascending. Infinite values are left out, as
    ``km_percentiles`` leaves them out. Probabilities are not checked here."""
    x, c = np.asarray(ordered, dtype=float), np.asarray(censored, dtype=float)
    if x.size and not (np.isfinite(x[0]) and np.isfinite(x[-1])):
        x, c = x[np.isfinite(x)], c[np.isfinite(c)]
    if x.size == 0:
        return [Percentile(None) for _ in probabilities]
    if c.size == x.size:  # every run stopped: nothing is known beyond the largest
        return [Percentile(float(x[-1]), lower_bound=True) for _ in probabilities]
    return _read_curve(x, _kaplan_meier(x, c), bool(c.size), probabilities)


def km_percentiles_flagged(ordered, flags, probabilities) -> list[Percentile]:
    """``km_percentiles`` of values already sorted with their flags (``evidence_arrays.
    SortedValues``, whose one sort the plain baselines of the same read share): ``ordered``
    every value ascending (no NaN), ``flags[i]`` True when ``ordered[i]`` is censored.
    Infinite values are left out, as ``km_percentiles`` leaves them out. Probabilities are not
    checked here."""
    x, c = np.asarray(ordered, dtype=float), np.asarray(flags, dtype=bool)
    if x.size and not (np.isfinite(x[0]) and np.isfinite(x[-1])):
        finite = np.isfinite(x)
        x, c = x[finite], c[finite]
    if x.size == 0:
        return [Percentile(None) for _ in probabilities]
    n_censored = int(np.count_nonzero(c))
    if n_censored == x.size:  # every run stopped: nothing is known beyond the largest
        return [Percentile(float(x[-1]), lower_bound=True) for _ in probabilities]
    curve = _kaplan_meier_flagged(x, c) if n_censored else _kaplan_meier(x, x[:0])
    return _read_curve(x, curve, bool(n_censored), probabilities)


def _leading_at_least(falling: np.ndarray, limit: int) -> int:
    """How many of the first values of ``falling`` (strictly decreasing) are >= ``limit``: a
    binary search (the count of ``falling >= limit`` without a pass over it)."""
    lo, hi = 0, falling.size
    while lo < hi:
        mid = (lo + hi) // 2
        if falling[mid] >= limit:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _read_curve(x: np.ndarray, curve, any_censored: bool, probabilities) -> list[Percentile]:
    """The percentiles of ``km_percentile`` from the curve (times, CDF, at risk) of ``x`` (the
    finite values, sorted) with at least one uncensored value."""
    quantiles, cdf, at_risk = curve
    # at_risk only falls and the CDF never does (a product of factors in [0, 1], rounded
    # monotonically): the last time still at risk for MIN_AT_RISK and the first time the CDF
    # reaches a probability are binary searches (issue 25: a pass over every time before)
    supported = _leading_at_least(at_risk, MIN_AT_RISK)
    # Not reached, or reached on too few runs: at least the last value still seen by MIN_AT_RISK.
    bound = float(quantiles[supported - 1]) if supported else float(quantiles[0])
    out = []
    for probability in probabilities:
        reached = int(np.searchsorted(cdf, probability - 1e-12, side="left"))
        if reached < cdf.size and (not any_censored or at_risk[reached] >= MIN_AT_RISK):
            out.append(Percentile(float(quantiles[reached])))
        else:  # the recorded values' own percentile is a lower bound too (a stopped run's real
            # size is at least what it recorded): never below the plain percentile
            plain = float(np.quantile(x, probability))
            out.append(Percentile(max(bound, plain), lower_bound=True))
    return out


def censored_baselines(conn: duckdb.DuckDBPyConnection, f: Filters, probability: float = 0.95):
    """Kaplan–Meier percentiles per task type next to the plain ones' inputs.

    Returns a DataFrame, one row per task type: task_type, n, censored_runs (stopped by a
    budget), censored_share (0..1), material (censored_share > 5 %), then per metric of
    ``BASELINE_METRICS`` ``km_p50_<metric>`` / ``km_p95_<metric>`` (float or None) and
    ``km_p50_<metric>_lower_bound`` / ``km_p95_<metric>_lower_bound`` (bool). Cost uses only runs whose cost is fully known (as the plain cost baseline). With
    another ``probability`` the columns still say ``p95`` (use ``km_percentile`` directly).
    """
    return km_baselines(read_arrays(conn, f), probability)


def evidence_frames(conn: duckdb.DuckDBPyConnection, f: Filters, probability: float = 0.95):
    """(``views.baselines(conn, f)``, ``censored_baselines(conn, f, probability)``) from one read
    of the filtered runs (``evidence_arrays``; issue 25: a page showing both read the runs
    twice, the plain quantiles in SQL): the same frames."""
    ev = read_arrays(conn, f)
    return plain_baselines(ev), km_baselines(ev, probability)


def baselines_evidence(
    conn: duckdb.DuckDBPyConnection, f: Filters, probability: float = 0.95, per_decade: int = 10
):
    """``evidence_frames(conn, f, probability)`` and ``views.token_distribution(conn, f,
    per_decade)`` from the same one read (``evidence_histogram``; issue 25: the Baselines page
    read the runs again for the distribution): the same three frames."""
    ev = read_arrays(conn, f)
    return plain_baselines(ev), km_baselines(ev, probability), token_distribution(ev, per_decade)


def km_baselines(ev: EvidenceArrays, probability: float = 0.95) -> pd.DataFrame:
    """``censored_baselines`` from the arrays of one read (``evidence_arrays.read_arrays``); the
    metrics' curves side by side (``evidence_arrays.in_parallel``)."""

    def estimate(metric: str) -> dict:
        row = {}
        for code, _task_type in ev.groups:
            values = ev.sorted_values(code, metric)
            p50, p95 = km_percentiles_flagged(values.ordered, values.censored, (0.5, probability))
            for name, percentile in (("p50", p50), ("p95", p95)):
                row[(code, f"km_{name}_{metric}")] = percentile.value
                row[(code, f"km_{name}_{metric}_lower_bound")] = percentile.lower_bound
        return row

    estimates: dict = {}
    for part in in_parallel(estimate, BASELINE_METRICS):
        estimates.update(part)
    columns = ["task_type", "n", "censored_runs", "censored_share", "material"]
    for metric in BASELINE_METRICS:
        for name in ("p50", "p95"):
            columns += [f"km_{name}_{metric}", f"km_{name}_{metric}_lower_bound"]
    rows = []
    for code, task_type in ev.groups:
        n, censored = ev.runs[code], ev.censored_runs[code]
        row: dict = {
            "task_type": task_type,
            "n": n,
            "censored_runs": censored,
            "censored_share": censored / n if n else 0.0,
            "material": bool(n and censored / n > MATERIAL_CENSORED_SHARE),
        }
        row.update({column: estimates[(code, column)] for column in columns[5:]})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
