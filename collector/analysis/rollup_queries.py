"""The page statements that read ``run_model_rollup`` instead of ``model_calls`` (issue 25).

Same conventions as ``budgetlens.analysis.queries`` (named parameters, the ``filtered`` CTE).
The slow references over ``model_calls`` that these equal are kept by their test
(``tests/test_run_model_rollup.py``); no page runs them.
"""

from __future__ import annotations

import pandas as pd

from budgetlens.analysis.filters import run_query
from budgetlens.analysis.queries import FILTERED, MULTI_MODEL_RUNS, cost_by_period_model
from budgetlens.store import rollups

_MODEL_FILTER = "(len(CAST($models AS VARCHAR[])) = 0 OR list_contains(CAST($models AS VARCHAR[]), model))"

#: Per model: calls, timed_calls, min/max duration (s) and the summed latency sketch of the
#: filtered runs' rollup rows (with a model filter, those models' rows only).
MODEL_LATENCY_SKETCH = f"""
WITH {FILTERED}
SELECT model, CAST(sum(calls) AS BIGINT) AS calls, CAST(sum(timed_calls) AS BIGINT) AS timed_calls,
       min(min_duration_s) AS min_duration_s, max(max_duration_s) AS max_duration_s,
       {", ".join(f"CAST(sum({c}) AS BIGINT) AS {c}" for c in rollups.LATENCY_COLUMNS)}
FROM {rollups.TABLE}
WHERE run_id IN (SELECT run_id FROM filtered) AND {_MODEL_FILTER}
GROUP BY model
ORDER BY calls DESC, model
"""

#: Cost per model (``queries.cost_by_period_model``) with the multi-model runs split by their
#: rollup rows (not by their calls). Its unpriced count per model is the rollup's
#: (``runs.unpriced_calls``' rule: no cost or a part without a price), the same rule as the
#: single-model runs'.
COST_BY_PERIOD_MODEL = cost_by_period_model(f"""
    SELECT m.start_utc, r.model AS key, r.cost_usd, r.unpriced_calls AS unpriced
    FROM {rollups.TABLE} r JOIN {MULTI_MODEL_RUNS} m ON r.run_id = m.run_id
""")


def model_latency(conn, params: dict) -> pd.DataFrame:
    """Columns model, calls, timed_calls, p50_duration_s, p95_duration_s (approximate: the
    sketch, ``rollups.sketch_quantiles``), max_duration_s (exact; NULL without a timed call)."""
    frame = run_query(conn, MODEL_LATENCY_SKETCH, params)
    p50, p95 = [], []
    for row in frame.itertuples(index=False):
        counts = [int(getattr(row, c)) for c in rollups.LATENCY_COLUMNS]
        low = 0.0 if pd.isna(row.min_duration_s) else float(row.min_duration_s)
        high = 0.0 if pd.isna(row.max_duration_s) else float(row.max_duration_s)
        a, b = rollups.sketch_quantiles(counts, low, high, [0.5, 0.95])
        p50.append(a)
        p95.append(b)
    out = frame[["model", "calls", "timed_calls"]].copy()
    out["p50_duration_s"] = pd.array(p50, dtype="Float64").astype(float)
    out["p95_duration_s"] = pd.array(p95, dtype="Float64").astype(float)
    out["max_duration_s"] = frame["max_duration_s"]
    return out.reset_index(drop=True)
