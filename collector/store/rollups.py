"""The per run x model rollup (issue 25): what the pages read instead of ``model_calls``.

``run_model_rollup`` holds one row per (run_id, model), ``model`` being the call's response
model, else its requested one, else ``'unknown'``. Per row: ``calls``, the token sums of the calls
(``input_tokens`` ... ``reasoning_tokens``; ``total_tokens`` charges a call of unknown usage its
reservation, as ``run_totals.c_total_tokens``; a sum over no known value is NULL, never 0),
``cost_usd`` (the priced calls' USD; NULL when none is priced), ``unpriced_calls`` (reported usage
without a full price: ``cost_usd`` NULL or ``unpriced_parts`` set, as ``runs.unpriced_calls``),
``unknown_usage_calls``, and the latency sketch of the calls' ``duration_s``: ``timed_calls``,
``min_duration_s``, ``max_duration_s`` (exact) and ``LATENCY_BUCKETS`` counts ``lat_00`` ...
(``latency_bucket``: fixed log-spaced buckets, ``PER_DECADE`` per power of ten from
``LOW_S``; bucket 0 holds durations below ``LOW_S``, the last one those at or above the top).
Approximate quantiles come from ``sketch_quantiles``.

The writer maintains it in the transaction that writes ``model_calls`` (``MERGE`` over the
``new_calls`` it inserted: counts and sums add, min/max merge), recounts the runs whose calls it
deletes (aggregates: ``DELETE_RECOUNT`` + ``INSERT_RECOUNT`` over ``recount``), and rebuilds it
with ``runs`` (``DELETE_ALL`` + ``INSERT_ALL``). Schema version 8 creates and back-fills it;
version 12 adds ``run_key`` (the run's integer key, as on ``runs``: the pages join the two by it).
Column names in these statements come from the constants below, never from request data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from budgetlens.store.run_totals import call_sums
from budgetlens.store.schema import CALL_SUMS, RUN_KEY

TABLE = "run_model_rollup"
#: Shortest duration with its own bucket (s); shorter ones share bucket 0.
LOW_S = 0.01
#: Buckets per power of ten (each spans a factor of 10 ** (1 / PER_DECADE), about 1.33).
PER_DECADE = 8
#: Powers of ten covered above ``LOW_S`` (up to 10,000 s); longer ones share the last bucket.
DECADES = 6
LATENCY_BUCKETS = PER_DECADE * DECADES + 2
#: The sketch's count columns, bucket 0 first.
LATENCY_COLUMNS: tuple[str, ...] = tuple(f"lat_{i:02d}" for i in range(LATENCY_BUCKETS))

_SUMMED = ("calls", *CALL_SUMS, "timed_calls", *LATENCY_COLUMNS)
#: Columns of ``run_model_rollup`` in table order as schema version 8 creates it (version 12
#: appends ``run_key``).
ROLLUP_COLUMNS: tuple[str, ...] = (
    "run_id",
    "model",
    "calls",
    *CALL_SUMS,
    "timed_calls",
    "min_duration_s",
    "max_duration_s",
    *LATENCY_COLUMNS,
)

_TYPES = {"cost_usd": "DOUBLE", "min_duration_s": "DOUBLE", "max_duration_s": "DOUBLE"}

#: Schema version 8: the table, back-filled from the stored calls.
CREATE = (
    f"CREATE TABLE {TABLE} (\n    run_id VARCHAR NOT NULL,\n    model VARCHAR NOT NULL,\n    "
    + ",\n    ".join(f"{c} {_TYPES.get(c, 'BIGINT')}" for c in ROLLUP_COLUMNS[2:])
    + ",\n    PRIMARY KEY (run_id, model)\n)"
)


def _bucket_sql(column: str) -> str:
    top = PER_DECADE * DECADES + 1
    return (
        f"CASE WHEN {column} < {LOW_S} THEN 0 "
        f"ELSE least({top}, CAST(floor(log10({column} / {LOW_S}) * {PER_DECADE}) AS INTEGER) + 1) END"
    )


def _aggregates(calls: str, *, keyed: bool = True) -> str:
    """SELECT of rollup rows aggregated from ``calls`` (a relation with model_calls columns),
    with the run's ``run_key`` (``schema.RUN_KEY``) unless ``keyed`` is false (schema version 8's
    back-fill, before the column existed)."""
    # the bucket is computed once a call (``_bucket``, NULL without a duration) and counted by
    # one ``histogram`` (a map bucket -> calls; NULLs are skipped, as the FILTERs did), read out
    # into the sketch columns after the grouping: 50 ``count(*) FILTER`` aggregates were about
    # 40 % of a commit's rollup merge, mostly fixed cost (CPU ms, 1-row and 1-body commits)
    sketch = ",\n    ".join(
        f"CAST(coalesce(_sketch[{i}], 0) AS BIGINT) AS {c}" for i, c in enumerate(LATENCY_COLUMNS)
    )
    bucket = _bucket_sql("duration_s")
    run_key = f",\n    {RUN_KEY} AS run_key" if keyed else ""
    return f"""
SELECT * EXCLUDE (_sketch),
    {sketch}{run_key}
FROM (
SELECT run_id, coalesce(response_model, request_model, 'unknown') AS model,
    count(*) AS calls,
    {call_sums("")},
    count(duration_s) AS timed_calls,
    min(duration_s) AS min_duration_s,
    max(duration_s) AS max_duration_s,
    histogram(_bucket) AS _sketch
FROM (SELECT *, CASE WHEN duration_s IS NOT NULL THEN {bucket} END AS _bucket FROM {calls})
GROUP BY ALL)"""


def _merged(old: str, new: str) -> list[tuple[str, str]]:
    """(column, expression) merging a stored rollup row ``old`` with new aggregates ``new``."""
    # NULL + x stays x, NULL + NULL stays NULL (a sum over no known value is unknown, not 0)
    merged = [(c, f"coalesce({old}.{c} + {new}.{c}, {old}.{c}, {new}.{c})") for c in _SUMMED]
    merged.append(("min_duration_s", f"least({old}.min_duration_s, {new}.min_duration_s)"))
    merged.append(("max_duration_s", f"greatest({old}.max_duration_s, {new}.max_duration_s)"))
    return merged


#: The full rebuild: every stored call.
INSERT_ALL = f"INSERT INTO {TABLE} BY NAME " + _aggregates("model_calls")
#: Schema version 8's back-fill: ``INSERT_ALL`` without ``run_key`` (added by version 12).
INSERT_ALL_V8 = f"INSERT INTO {TABLE} BY NAME " + _aggregates("model_calls", keyed=False)
DELETE_ALL = f"DELETE FROM {TABLE}"
#: Merge the calls a batch inserted (``new_calls``) into the file store's rollup.
MERGE = (
    f"INSERT INTO {TABLE} BY NAME "
    + _aggregates("new_calls")
    + " ON CONFLICT (run_id, model) DO UPDATE SET "
    + ", ".join(f"{c} = {e}" for c, e in _merged(TABLE, "excluded"))
)
#: Recount the runs in ``recount`` (run_id) from the stored calls (after aggregates were deleted).
DELETE_RECOUNT = f"DELETE FROM {TABLE} WHERE run_id IN (SELECT run_id FROM recount)"
INSERT_RECOUNT = f"INSERT INTO {TABLE} BY NAME " + _aggregates(
    "(SELECT * FROM model_calls WHERE run_id IN (SELECT run_id FROM recount))"
)

# DuckLake (no primary keys, no ON CONFLICT): the merged rows into ``rollup_touched``, then the
# stored rows of those keys are replaced, inside the writer's transaction (fold token held).
LAKE_MERGED = (
    "SELECT n.run_id, n.model, n.run_key, "
    + ", ".join(f"{e} AS {c}" for c, e in _merged("o", "n"))
    + " FROM ("
    + _aggregates("new_calls")
    + f") n LEFT JOIN {TABLE} o ON o.run_id = n.run_id AND o.model = n.model"
)
LAKE_DELETE_TOUCHED = (
    f"DELETE FROM {TABLE} WHERE EXISTS (SELECT 1 FROM rollup_touched t "
    f"WHERE t.run_id = {TABLE}.run_id AND t.model = {TABLE}.model)"
)
LAKE_INSERT_TOUCHED = f"INSERT INTO {TABLE} BY NAME SELECT * FROM rollup_touched"


def latency_bucket(duration_s: float) -> int:
    """The sketch bucket (0 .. ``LATENCY_BUCKETS`` - 1) of one duration in seconds (as the SQL)."""
    if duration_s < LOW_S:
        return 0
    return min(PER_DECADE * DECADES + 1, int(math.floor(math.log10(duration_s / LOW_S) * PER_DECADE)) + 1)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """[low, high) seconds of a sketch bucket (bucket 0: [0, LOW_S); the last: up to infinity)."""
    if bucket == 0:
        return 0.0, LOW_S
    low = LOW_S * 10 ** ((bucket - 1) / PER_DECADE)
    high = math.inf if bucket == LATENCY_BUCKETS - 1 else LOW_S * 10 ** (bucket / PER_DECADE)
    return low, high


def sketch_quantiles(
    counts: Sequence[int], minimum: float, maximum: float, quantiles: Sequence[float]
) -> list[float | None]:
    """Approximate quantiles (s) of the durations a sketch counts.

    ``counts``: the ``LATENCY_BUCKETS`` bucket counts; ``minimum``/``maximum``: the exact
    extremes. The rank of quantile q is (n - 1) q, as ``quantile_cont``: the value of each
    neighbouring whole rank is interpolated on a log scale inside its bucket and clamped to
    [minimum, maximum], then the two are interpolated linearly, so the result lies between the
    buckets of the exact quantile's neighbours (each spans 10 ** (1 / PER_DECADE)) and q = 0 / 1
    give the exact extremes. None for each q when the sketch
    is empty. Raises ValueError for a q outside [0, 1] or a counts list of another length.
    """
    if len(counts) != LATENCY_BUCKETS:
        raise ValueError(f"counts: expected {LATENCY_BUCKETS} buckets, got {len(counts)}")
    array = np.asarray(counts, dtype=np.int64)
    n = int(array.sum())
    cumulative = np.cumsum(array)

    def at_rank(rank: int) -> float:
        """A representative of the rank-th smallest duration (0-based): its bucket, log-interpolated."""
        bucket = min(int(np.searchsorted(cumulative, rank, side="right")), LATENCY_BUCKETS - 1)
        before = int(cumulative[bucket - 1]) if bucket else 0
        low, high = bucket_bounds(bucket)
        low, high = max(low, minimum), min(high, maximum)
        share = min(max((rank - before + 0.5) / max(int(array[bucket]), 1), 0.0), 1.0)
        if high <= low:
            value = low
        elif low <= 0:
            value = low + (high - low) * share
        else:
            value = low * (high / low) ** share
        return min(max(value, minimum), maximum)

    out: list[float | None] = []
    for q in quantiles:
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q!r}")
        if n == 0:
            out.append(None)
            continue
        if q in (0, 1):
            out.append(float(minimum if q == 0 else maximum))
            continue
        rank = (n - 1) * q  # then linear between the neighbouring ranks, as quantile_cont
        below, above = math.floor(rank), math.ceil(rank)
        first, second = at_rank(below), at_rank(above)
        out.append(float(first + (second - first) * (rank - below)))
    return out
