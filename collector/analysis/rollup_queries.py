"""The page statements that read ``run_model_rollup`` instead of ``model_calls`` (issue 25).

Same conventions as ``budgetlens.analysis.queries`` (named parameters, the ``filtered`` CTE).
The slow references over ``model_calls`` that these equal are kept by their test
(``tests/test_run_model_rollup.py``); no page runs them.
"""

from __future__ import annotations

import pandas as pd

from budgetlens.analysis.filters import Filters, data_extent, run_query
from budgetlens.analysis.queries import FILTERED, MULTI_MODEL_RUNS, cost_by_period_model
from budgetlens.store import rollups

_MODEL_FILTER = "(len(CAST($models AS VARCHAR[])) = 0 OR list_contains(CAST($models AS VARCHAR[]), model))"


def _latency_sketch(runs: str) -> str:
    """Per model of the rollup rows of the runs ``runs`` (a constant condition on
    ``run_model_rollup``): the columns of ``MODEL_LATENCY_SKETCH``."""
    return f"""
SELECT model, CAST(sum(calls) AS BIGINT) AS calls, CAST(sum(timed_calls) AS BIGINT) AS timed_calls,
       min(min_duration_s) AS min_duration_s, max(max_duration_s) AS max_duration_s,
       {", ".join(f"CAST(sum({c}) AS BIGINT) AS {c}" for c in rollups.LATENCY_COLUMNS)}
FROM {rollups.TABLE}
WHERE {runs} AND {_MODEL_FILTER}
GROUP BY model
ORDER BY calls DESC, model
"""


#: Per model: calls, timed_calls, min/max duration (s) and the summed latency sketch of the
#: filtered runs' rollup rows (with a model filter, those models' rows only).
MODEL_LATENCY_SKETCH = f"WITH {FILTERED}" + _latency_sketch("run_id IN (SELECT run_id FROM filtered)")
#: ``MODEL_LATENCY_SKETCH`` of filters that keep every stored run (``keeps_every_run``): every
#: rollup row, without the semi join of the rollup's run ids with the runs' (issue 25: most of
#: the latency toggle's read at 1M runs). The writer keeps a rollup row only for a stored run.
MODEL_LATENCY_SKETCH_ALL = _latency_sketch("true")


def keeps_every_run(conn, f: Filters) -> bool:
    """True when ``f`` keeps every stored run: no filter but a window, and the window holds the
    oldest and the newest run start (``data_extent``: a few ms). Then a statement over the
    rollup needs no join with the filtered runs."""
    if f.scope() != Filters(tz=f.tz):
        return False
    first, last, _ = data_extent(conn)
    if first is None or last is None:
        return True
    return (f.start_utc is None or f.start_utc <= first) and (f.end_utc is None or f.end_utc > last)


#: Cost per model (``queries.cost_by_period_model``) with the multi-model runs split by their
#: rollup rows (not by their calls). Its unpriced count per model is the rollup's
#: (``runs.unpriced_calls``' rule: no cost or a part without a price), the same rule as the
#: single-model runs'.
COST_BY_PERIOD_MODEL_BY_ID = cost_by_period_model(f"""
    SELECT m.start_utc, r.model AS key, r.cost_usd, r.unpriced_calls AS unpriced
    FROM {rollups.TABLE} r JOIN {MULTI_MODEL_RUNS} m ON r.run_id = m.run_id
""")
#: ``COST_BY_PERIOD_MODEL_BY_ID`` with the rollup rows joined by the integer ``run_key``
#: (``runs`` and the rollup, schema version 12) instead of the text run id: about a third of
#: the statement at 1M runs (issue 25). A key two run ids share, or a row written without its
#: key, is caught: then the calls the joined rows count differ from the multi-model runs'
#: ``model_calls`` (a rollup row counts at least one call, and a run's rows count its calls),
#: and the rows are joined by run id instead, in the same statement (the by-id join reads no
#: rollup row when the keys hold: its build side is empty).
COST_BY_PERIOD_MODEL = cost_by_period_model(f"""
    WITH keyed AS MATERIALIZED (
        SELECT m.start_utc, r.model AS key, r.cost_usd, r.unpriced_calls AS unpriced, r.calls
        FROM {rollups.TABLE} r
        JOIN (SELECT run_key, start_utc FROM filtered WHERE contains(models, ',')) m
            ON r.run_key = m.run_key
    ),
    keys_hold AS (
        SELECT (SELECT coalesce(sum(calls), 0) FROM keyed)
               = (SELECT coalesce(sum(model_calls), 0) FROM filtered WHERE contains(models, ','))
               AS hold
    )
    SELECT start_utc, key, cost_usd, unpriced FROM keyed WHERE (SELECT hold FROM keys_hold)
    UNION ALL
    SELECT m.start_utc, r.model, r.cost_usd, r.unpriced_calls
    FROM {rollups.TABLE} r
    JOIN (SELECT run_id, start_utc FROM filtered WHERE contains(models, ',') AND NOT (SELECT hold FROM keys_hold)) m
        ON r.run_id = m.run_id
""")


def model_latency(conn, f: Filters) -> pd.DataFrame:
    """Columns model, calls, timed_calls, p50_duration_s, p95_duration_s (approximate: the
    sketch, ``rollups.sketch_quantiles``), max_duration_s (exact; NULL without a timed call)."""
    statement = MODEL_LATENCY_SKETCH_ALL if keeps_every_run(conn, f) else MODEL_LATENCY_SKETCH
    frame = run_query(conn, statement, f.params())
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
