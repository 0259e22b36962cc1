"""The numpy Kaplan–Meier (issue 25) equals scipy's ``stats.ecdf`` on ``CensoredData`` (the old path)."""

from __future__ import annotations

import numpy as np
import pytest

from budgetlens.analysis.censoring import MIN_AT_RISK, Percentile, km_percentile


def _scipy_percentile(values, censored, probability: float) -> Percentile:
    """The previous implementation: scipy's estimate, the same rules on top."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    c = np.asarray(censored, dtype=bool)
    keep = np.isfinite(x)
    x, c = x[keep], c[keep]
    if x.size == 0:
        return Percentile(None)
    if not (~c).any():
        return Percentile(float(x.max()), lower_bound=True)
    cdf = stats.ecdf(stats.CensoredData(uncensored=x[~c], right=x[c])).cdf
    ordered = np.sort(x)
    at_risk = x.size - np.searchsorted(ordered, cdf.quantiles, side="left")
    reached = np.flatnonzero(cdf.probabilities >= probability - 1e-12)
    if reached.size and (not c.any() or at_risk[reached[0]] >= MIN_AT_RISK):
        return Percentile(float(cdf.quantiles[reached[0]]))
    supported = cdf.quantiles[at_risk >= MIN_AT_RISK]
    return Percentile(float(supported.max()) if supported.size else float(ordered[0]), lower_bound=True)


@pytest.mark.parametrize("seed", range(40))
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
