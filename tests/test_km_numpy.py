"""The numpy Kaplan–Meier (issue 25) equals scipy's ``stats.ecdf`` on ``CensoredData`` (the old path)."""

from __future__ import annotations

import numpy as np
import pytest

from budgetlens.analysis.censoring import MIN_AT_RISK, Percentile, km_percentile


def _reference_percentile(values, censored, probability: float, curve) -> Percentile:
    """The rules the previous implementations put on top of their Kaplan–Meier curve
    (``curve(x, c)`` -> times, probabilities, at-risk counts): non-finite values left out; no
    value: None; no event: the max as a lower bound; else the first time the curve reaches
    ``probability`` with at least ``MIN_AT_RISK`` at risk (any, without censoring), else the
    largest supported time (the smallest value without one) or the plain percentile of the
    recorded values, whichever is larger, as a lower bound."""
    x = np.asarray(values, dtype=float)
    c = np.asarray(censored, dtype=bool)
    keep = np.isfinite(x)
    x, c = x[keep], c[keep]
    if x.size == 0:
        return Percentile(None)
    if not (~c).any():
        return Percentile(float(x.max()), lower_bound=True)
    times, probabilities, at_risk = curve(x, c)
    reached = np.flatnonzero(probabilities >= probability - 1e-12)
    if reached.size and (not c.any() or at_risk[reached[0]] >= MIN_AT_RISK):
        return Percentile(float(times[reached[0]]))
    supported = times[at_risk >= MIN_AT_RISK]
    bound = float(supported.max()) if supported.size else float(np.sort(x)[0])
    # a stopped run's real size is at least what it recorded: the recorded values' own (plain,
    # linearly interpolated) percentile bounds the real one from below too
    return Percentile(max(bound, float(np.percentile(x, 100 * probability))), lower_bound=True)


def _scipy_curve(x, c):
    from scipy import stats

    cdf = stats.ecdf(stats.CensoredData(uncensored=x[~c], right=x[c])).cdf
    at_risk = x.size - np.searchsorted(np.sort(x), cdf.quantiles, side="left")
    return cdf.quantiles, cdf.probabilities, at_risk


def _scipy_percentile(values, censored, probability: float) -> Percentile:
    """The previous implementation: scipy's estimate, the same rules on top."""
    return _reference_percentile(values, censored, probability, _scipy_curve)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.system  # imports scipy.stats (seconds) for the old reference
def test_numpy_kaplan_meier_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = np.round(rng.lognormal(8, 1, n), int(rng.integers(-3, 2)))  # ties when rounded
    values[rng.random(n) < 0.05] = np.nan
    censored = rng.random(n) < rng.choice([0.0, 0.1, 0.5, 0.95])
    for p in (0.5, 0.95):
        new, old = km_percentile(values, censored, p), _scipy_percentile(values, censored, p)
        assert new.lower_bound == old.lower_bound
        assert new.value == pytest.approx(old.value)


def _pandas_censored_baselines(conn, f, probability: float = 0.95):
    """The previous ``censored_baselines``: the censoring input into pandas, grouped there."""
    import pandas as pd

    from budgetlens.analysis import evidence_queries as eq
    from budgetlens.analysis.censoring import MATERIAL_CENSORED_SHARE
    from budgetlens.analysis.filters import run_query
    from budgetlens.analysis.queries import BASELINE_METRICS

    frame = run_query(conn, eq.CENSORING_INPUT, f.params())
    rows = []
    for task_type, group in frame.groupby("task_type", dropna=False, sort=True):
        n = len(group)
        censored = int(group["censored"].sum())
        row: dict = {
            "task_type": None if pd.isna(task_type) else task_type,
            "n": n,
            "censored_runs": censored,
            "censored_share": censored / n if n else 0.0,
            "material": bool(n and censored / n > MATERIAL_CENSORED_SHARE),
        }
        for metric in BASELINE_METRICS:
            part = group[group["cost_known"]] if metric == "cost_usd" else group
            values = part[metric].astype(float).to_numpy()
            stopped = part["censored"].to_numpy()
            for name, p in (("p50", 0.5), ("p95", probability)):
                estimate = km_percentile(values, stopped, p)
                row[f"km_{name}_{metric}"] = estimate.value
                row[f"km_{name}_{metric}_lower_bound"] = estimate.lower_bound
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", [3, 8])
@pytest.mark.system  # writes a sample store: seconds
def test_censored_baselines_from_numpy_arrays_equal_the_pandas_path(tmp_path, seed):
    from budgetlens.analysis.censoring import censored_baselines
    from budgetlens.analysis.views import Filters
    from budgetlens.sample import write_sample
    from budgetlens.store import read_connection

    path = tmp_path / "sample.duckdb"
    write_sample(path, days=6, seed=seed, runs_per_day=30)
    with read_connection(path) as conn:
        whole = censored_baselines(conn, Filters())
        assert whole.to_dict("records") == _pandas_censored_baselines(conn, Filters())  # exactly
        empty = censored_baselines(conn, Filters(task_types=("no-such-task",)))
    assert len(whole) > 1 and whole["censored_runs"].sum() > 0
    assert empty.empty and list(empty.columns) == list(whole.columns)


def _unique_curve(x, c):
    times, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    events = np.bincount(inverse, weights=(~c).astype(float), minlength=times.size)
    at_risk = x.size - np.concatenate(([0], np.cumsum(counts)[:-1]))
    return times, 1.0 - np.cumprod(1.0 - events / at_risk), at_risk


def _unique_percentile(values, censored, probability: float) -> Percentile:
    """The np.unique implementation before issue 25's one-sort rewrite (the curve at every
    distinct value from ``np.unique(return_inverse, return_counts)``), kept as the reference."""
    return _reference_percentile(values, censored, probability, _unique_curve)


@pytest.mark.parametrize("seed", range(40))
def test_one_sort_kaplan_meier_equals_the_unique_implementation_exactly(seed):
    from budgetlens.analysis.censoring import km_percentiles

    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 3_000))
    values = np.round(rng.lognormal(6, 1.5, n), int(rng.integers(-2, 3)))  # ties when rounded
    values[rng.random(n) < 0.03] = np.nan
    censored = rng.random(n) < rng.choice([0.0, 0.02, 0.3, 0.9, 1.0])
    probabilities = (0.5, 0.9, 0.95, 0.99)
    both = km_percentiles(values, censored, probabilities)
    assert both == [_unique_percentile(values, censored, p) for p in probabilities]  # exactly


@pytest.mark.parametrize("seed", range(20))
def test_a_lower_bound_is_never_below_the_plain_percentile(seed):
    """Breaker round of 2026-12-03: with 23.6 % of research runs stopped, the Kaplan–Meier P95
    (a lower bound, "the largest value 10 runs reached") was 152,000-token preset material
    against 220,000 from the plain P95, so the censoring-aware preset was the tighter one."""
    from budgetlens.analysis.censoring import km_percentiles

    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(20, 2_000))
    values = np.round(rng.lognormal(10, 1, n))
    limit = np.quantile(values, rng.uniform(0.6, 0.95))
    censored = values >= limit
    values = np.minimum(values, limit)  # stopped at the limit: what the store records
    for probability, estimate in zip((0.5, 0.95, 0.99), km_percentiles(values, censored, (0.5, 0.95, 0.99))):
        if estimate.lower_bound:
            assert estimate.value >= np.percentile(values, 100 * probability)


@pytest.mark.parametrize("seed", range(30))
def test_values_sorted_with_their_flags_give_the_curve_of_the_sorted_censored_values(seed):
    """Issue 25: ``sort_flagged`` sorts each value with its censored flag in one uint64 key
    (values >= 0) or a stable argsort (a negative value, -0.0); the Kaplan–Meier percentiles
    from those flags equal those of the values and the censored values sorted apart
    (``km_percentiles_sorted``), exactly; ties, NaN, infinities, no and every value censored."""
    from budgetlens.analysis.censoring import km_percentiles_flagged, km_percentiles_sorted
    from budgetlens.analysis.evidence_arrays import sort_flagged

    rng = np.random.default_rng(900 + seed)
    n = int(rng.integers(0, 2_000))
    values = np.round(rng.lognormal(5, 2, n), int(rng.integers(-2, 3)))
    values[rng.random(n) < 0.03] = np.nan
    values[rng.random(n) < 0.01] = np.inf
    if seed % 3 == 0:  # the argsort path
        values[rng.random(n) < 0.2] *= -1
    if seed % 5 == 0:
        values[rng.random(n) < 0.05] = -0.0
    censored = rng.random(n) < rng.choice([0.0, 0.05, 0.4, 1.0])
    got = sort_flagged(values, censored)
    kept = ~np.isnan(values)
    assert np.array_equal(got.ordered, np.sort(values[kept]))
    assert got.censored.dtype == bool and got.censored.size == got.ordered.size
    assert np.array_equal(np.sort(got.ordered[got.censored]), np.sort(values[kept & censored]))
    probabilities = (0.5, 0.9, 0.95)
    expected = km_percentiles_sorted(np.sort(values[kept]), np.sort(values[kept & censored]), probabilities)
    assert km_percentiles_flagged(got.ordered, got.censored, probabilities) == expected  # exactly


@pytest.mark.parametrize("seed", range(20))
def test_every_value_distinct_takes_the_curve_of_the_unique_implementation_exactly(seed):
    """Issue 25: where every value is distinct (durations), the curve's events are 1 - the
    censored flag and its times the values themselves; the percentiles (reached, at too few runs
    at risk, never reached) equal the reference's exactly."""
    from budgetlens.analysis.censoring import km_percentiles

    rng = np.random.default_rng(1300 + seed)
    n = int(rng.integers(1, 3_000))
    values = rng.lognormal(3, 1.2, n)  # continuous: distinct
    assert np.unique(values).size == n
    censored = rng.random(n) < rng.choice([0.0, 0.05, 0.4, 0.95])
    probabilities = (0.5, 0.9, 0.95, 0.99)
    both = km_percentiles(values, censored, probabilities)
    assert both == [_unique_percentile(values, censored, p) for p in probabilities]
