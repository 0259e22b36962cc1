"""Kaplan–Meier baselines on runs drawn from a known distribution: total tokens are lognormal
(median 20,000, sigma 0.6), so the true P95 is 20,000 x exp(0.6 x z_0.95), computed here from the
normal quantile. A run larger than its budget is stopped at the limit (right-censored there)."""

from __future__ import annotations

import datetime as dt
import math
from statistics import NormalDist

import numpy as np
import pytest

from budgetlens.analysis import censoring, whatif
from budgetlens.analysis.views import Filters, baselines
from budgetlens.store import read_connection, write_batch, write_connection

MEDIAN, SIGMA = 20_000.0, 0.6
TRUE_P95 = MEDIAN * math.exp(SIGMA * NormalDist().inv_cdf(0.95))  # 53,667 tokens
T0 = dt.datetime(2026, 11, 2)


def _draw(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(math.log(MEDIAN), SIGMA, n).round()


def _store(db_path, sizes, limits):
    records = []
    for i, (size, limit) in enumerate(zip(sizes, limits, strict=True)):
        stopped = size > limit
        records.append(
            dict(
                run_id=f"km-{i:05d}",
                source="test",
                task_type="research",
                start_utc=T0 + dt.timedelta(minutes=i),
                total_tokens=int(limit if stopped else size),
                stop_reason="budget_tokens" if stopped else "completed",
                usage_status="reported",
                limit_total_tokens=int(limit),
            )
        )
    with write_connection(db_path) as conn:
        write_batch(conn, (), records, ())
    return db_path


@pytest.fixture
def three_limits(db_path):
    """3,000 runs, a third each under 30,000, 45,000 and 70,000 tokens (the last above the
    true P95)."""
    sizes = _draw(3000)
    limits = np.repeat([30_000, 45_000, 70_000], 1000)
    return _store(db_path, sizes, limits)


@pytest.mark.system  # thousands of runs; the one-limit test stays fast
def test_kaplan_meier_p95_recovers_the_true_p95_where_the_plain_one_falls_short(three_limits):
    with read_connection(three_limits) as conn:
        km = censoring.censored_baselines(conn, Filters()).set_index("task_type").loc["research"]
        plain = baselines(conn, Filters()).set_index("task_type").loc["research"]
    assert not km["km_p95_total_tokens_lower_bound"]
    assert km["km_p95_total_tokens"] == pytest.approx(TRUE_P95, rel=0.05)
    assert plain["p95_total_tokens"] < 0.85 * TRUE_P95  # at most 45,000 + a few: well below
    assert bool(km["material"]) and km["censored_share"] > 0.05


@pytest.mark.system  # a large generated history: seconds
def test_under_one_limit_below_the_true_p95_the_p95_is_only_a_lower_bound(db_path):
    path = _store(db_path, _draw(3000, seed=11), [40_000] * 3000)
    with read_connection(path) as conn:
        km = censoring.censored_baselines(conn, Filters()).set_index("task_type").loc["research"]
    assert bool(km["km_p95_total_tokens_lower_bound"])
    assert km["km_p95_total_tokens"] == 40_000  # at least the limit every tail run was stopped at
    assert censoring.Percentile(40_000.0, lower_bound=True).text() == "≥ 40,000"


@pytest.mark.system  # thousands of runs; the one-limit test stays fast
def test_presets_of_material_censoring_use_kaplan_meier_and_name_the_lower_bound(db_path):
    path = _store(db_path, _draw(3000, seed=11), [40_000] * 3000)
    with read_connection(path) as conn:
        ev = whatif.evidence(conn, Filters())
    auto = whatif.evidence_presets(ev, 1.5).set_index("task_type").loc["research"]
    plain = whatif.evidence_presets(ev, 1.5, "plain").set_index("task_type").loc["research"]
    assert auto["method"] == "kaplan-meier" and plain["method"] == "plain"
    assert auto["max_total_tokens"] == 60_000  # 40,000 x 1.5
    assert "max_total_tokens" in auto["lower_bound_keys"]


def test_without_censoring_the_kaplan_meier_percentile_is_the_empirical_step():
    values = list(range(1, 101))  # F(95) = 0.95 exactly
    assert censoring.km_percentile(values, [False] * 100, 0.95).value == 95
    estimate = censoring.km_percentile([5, 7], [True, True], 0.5)
    assert estimate.lower_bound and estimate.value == 7


@pytest.mark.parametrize("probability", [0, 1, -0.1, 1.5])
def test_km_percentile_rejects_a_probability_outside_0_1(probability):
    with pytest.raises(ValueError, match="probability"):
        censoring.km_percentile([1.0], [False], probability)
