"""Named, parameterised SQL of the analysis layer (design §6), read by ``budgetlens.analysis.views``.

Every statement reads the ``runs`` rollup (and ``model_calls`` / ``budget_events`` where a page
needs per-call detail) and aggregates in DuckDB; no statement returns raw rows except the paged
run table and one run's detail. Values reach SQL only as named parameters (``$name``); the text
below is assembled once, at import, from constant fragments.

Shared parameters of the run filter (``FILTERED``):

- ``$start_utc`` / ``$end_utc``: naive UTC timestamps, inclusive / exclusive, NULL = no bound;
- ``$task_types``, ``$models``, ``$services``: VARCHAR lists, empty = all; a run matches the
  model filter when any of its models (``runs.models``, comma-separated) is in the list;
- ``$teams``, ``$users``: VARCHAR lists, empty = all (``runs.team``, ``runs.user_id``);
- ``$tags``: a JSON object of tags a run must all carry (``'{}'`` = all): ``runs.tags``
  (a JSON object) contains it;
- ``$tz``: IANA time zone for day/hour buckets (stored times are UTC; buckets are local).

Percentiles are ``quantile_cont`` (linear interpolation between closest ranks, as numpy's
``linear`` method), never above the max nor below the min.
"""

from __future__ import annotations

from budgetlens.analysis.spend_queries import SPEND
from budgetlens.store.schema import RUN_COLUMNS

#: The run filter as a CTE named ``filtered`` (one row per run of ``runs``).
FILTERED = """
filtered AS (
    SELECT * FROM runs
    WHERE (CAST($start_utc AS TIMESTAMP) IS NULL OR start_utc >= CAST($start_utc AS TIMESTAMP))
      AND (CAST($end_utc AS TIMESTAMP) IS NULL OR start_utc < CAST($end_utc AS TIMESTAMP))
      AND (len(CAST($task_types AS VARCHAR[])) = 0
           OR list_contains(CAST($task_types AS VARCHAR[]), task_type))
      AND (len(CAST($models AS VARCHAR[])) = 0
           OR list_has_any(string_split(models, ','), CAST($models AS VARCHAR[])))
      AND (len(CAST($services AS VARCHAR[])) = 0
           OR list_contains(CAST($services AS VARCHAR[]), service_name))
      AND (len(CAST($teams AS VARCHAR[])) = 0 OR list_contains(CAST($teams AS VARCHAR[]), team))
      AND (len(CAST($users AS VARCHAR[])) = 0 OR list_contains(CAST($users AS VARCHAR[]), user_id))
      AND (CAST($tags AS VARCHAR) = '{}' OR coalesce(json_contains(tags, CAST($tags AS VARCHAR)), false))
)"""

#: ``FILTERED`` inlined where a statement reads it more than once: materialized, it would copy
#: every column of every run first (issue 25: most of the cost-per-model read at 1M runs); each
#: reference then scans only the columns it needs.
FILTERED_INLINE = FILTERED.replace("filtered AS (", "filtered AS NOT MATERIALIZED (", 1)

#: Day and hour buckets are local to ``$tz``. Converting every run's time is the costly part
#: of a daily chart (ICU per row), so runs are first counted per 15-minute UTC bucket and only
#: the buckets are converted: every current IANA zone's offset is a multiple of 15 minutes, so
#: a 15-minute UTC bucket lies inside one local hour and one local day (exact, not an estimate).
BUCKET = "time_bucket(INTERVAL 15 minutes, start_utc)"
LOCAL_BUCKET = "timezone($tz, timezone('UTC', bucket))"
_LOCAL_DAY = f"CAST(date_trunc('day', {LOCAL_BUCKET}) AS DATE)"


def count_where(condition: str) -> str:
    """SQL counting the rows where ``condition`` (a fixed fragment) is true: ``count(*) FILTER
    (WHERE condition)``'s value (BIGINT, 0 over no row or when it is never true), written with
    ``count_if``, which costs half as much over many rows (issue 25) but is NULL over no row and
    when every condition is NULL (an unfinished run's ``IS_BUDGET_STOP``), hence the coalesce."""
    return f"CAST(coalesce(count_if({condition}), 0) AS BIGINT)"


#: Run-level predicates (stop reasons from ``budgetlens.semconv``: budget stops start 'budget_').
IS_BUDGET_STOP = "starts_with(stop_reason, 'budget_')"
_IS_INTERVENTION = f"({IS_BUDGET_STOP} OR downgrades > 0 OR summaries > 0)"
#: The limit columns of ``runs`` (the preset keys' ``limit_*``), from the store schema.
_LIMIT_COLUMNS = tuple(c for c in RUN_COLUMNS if c.startswith("limit_"))
#: A run that ran under a budget: at least one ``limit_*`` is set, or a budget stopped it (an
#: imported run stopped at the source's own limit, e.g. OpenHands' max iterations, whose limit
#: value the source does not record). Runs without one (imported history, foreign traces, days
#: before limits existed) cannot be stopped by a budget and are left out of the rates.
IS_BUDGETED = "(" + " OR ".join(f"{c} IS NOT NULL" for c in _LIMIT_COLUMNS) + f" OR {IS_BUDGET_STOP})"
#: The rates' denominator: finished runs (a stop reason) that ran under a budget.
_IS_BUDGETED_FINISHED = f"(stop_reason IS NOT NULL AND {IS_BUDGETED})"
#: A budget stop that still returned an answer: the run's final call used its wrap-up slice.
IS_ANSWERED_STOP = "stop_reason = 'budget_wrap_up'"
#: Hit rate = budget stops / budgeted finished runs; intervention rate = budgeted finished runs
#: stopped, downgraded or summarized / budgeted finished runs. NULL when no run was budgeted.
#: answered_share = budget stops that still answered (``budget_wrap_up``) / budget stops (NULL
#: without a budget stop).
_RATES = f"""
    count(stop_reason) AS finished_runs,
    {count_where(_IS_BUDGETED_FINISHED)} AS budgeted_runs,
    {count_where(IS_BUDGET_STOP)} AS budget_stops,
    {count_where(_IS_BUDGETED_FINISHED + " AND " + _IS_INTERVENTION)} AS interventions,
    budget_stops / nullif(budgeted_runs, 0) AS hit_rate,
    interventions / nullif(budgeted_runs, 0) AS intervention_rate,
    {count_where(IS_ANSWERED_STOP)} AS answered_stops,
    answered_stops / nullif(budget_stops, 0) AS answered_share"""

#: A run whose cost is fully known: it has a cost, every call with reported usage was priced and
#: no call's usage was unknown. ``runs.cost_usd`` of any other run is the sum of its priced calls
#: (known spend, a lower bound), so cost percentiles use only these runs (``n_cost`` of them).
COST_KNOWN = "(cost_usd IS NOT NULL AND coalesce(unpriced_calls, 0) = 0 AND usage_status = 'reported')"

DATA_EXTENT = "SELECT min(start_utc), max(start_utc), count(*) FROM runs"

#: The number of runs the filter keeps.
COUNT_FILTERED = f"WITH {FILTERED} SELECT count(*) AS runs FROM filtered"

#: Runs of a scope (FILTERED without time bounds) before ``$window_start`` and at or after
#: ``$window_end`` (NULL = no bound), with the scope's total and newest run start.
WINDOW_COVERAGE = f"""
WITH {FILTERED}
SELECT count(*) AS total,
       {count_where("start_utc < CAST($window_start AS TIMESTAMP)")} AS n_before,
       {count_where("start_utc >= CAST($window_end AS TIMESTAMP)")} AS n_after,
       max(start_utc) AS newest_utc
FROM filtered
"""

OPTION_TEAMS = "SELECT DISTINCT team FROM runs WHERE team IS NOT NULL ORDER BY team"
OPTION_USERS = "SELECT DISTINCT user_id FROM runs WHERE user_id IS NOT NULL ORDER BY user_id"
#: Every stored tag as ``key=value`` (the values a ``--tag`` filter can take).
OPTION_TAGS = """
SELECT DISTINCT j.key || '=' || (j.value ->> '$') AS tag
FROM (SELECT tags FROM runs WHERE tags IS NOT NULL) AS r, json_each(r.tags) AS j
ORDER BY tag
"""
OPTION_TASK_TYPES = "SELECT DISTINCT task_type FROM runs WHERE task_type IS NOT NULL ORDER BY task_type"
#: Every model of any run: the distinct ``runs.models`` lists first (a few), then split (issue 25:
#: splitting every run's list took most of the sidebar's read at 1M runs).
OPTION_MODELS = """
SELECT DISTINCT model FROM (
    SELECT unnest(string_split(models, ',')) AS model
    FROM (SELECT DISTINCT models FROM runs WHERE models IS NOT NULL)
) WHERE model <> '' ORDER BY model
"""
OPTION_SERVICES = (
    "SELECT DISTINCT service_name FROM runs WHERE service_name IS NOT NULL ORDER BY service_name"
)

#: Token parts (design §3: ``input_tokens`` includes cache reads and writes, ``output_tokens``
#: includes reasoning): the sums and each part's share of its whole, 0..1. A share counts only
#: runs that report both the part and its whole (a source that never reports cache reads is
#: left out, never read as 0 %); NULL when no run does.
#: The parts of ``_TOKEN_PARTS``' shares: (share, part, whole) as columns of ``runs``.
_SHARES = (
    ("cache_read_share", "cache_read_tokens", "input_tokens"),
    ("cache_write_share", "cache_write_tokens", "input_tokens"),
    ("reasoning_share", "reasoning_tokens", "output_tokens"),
)


#: The shares of ``_TOKEN_PARTS``: (share, part, whole) as columns of ``runs``.
_SHARES = (
    ("cache_read_share", "cache_read_tokens", "input_tokens"),
    ("cache_write_share", "cache_write_tokens", "input_tokens"),
    ("reasoning_share", "reasoning_tokens", "output_tokens"),
)


def _share_sum(side: str, part: str, whole: str) -> str:
    """A share's ``side`` 'part': the part's own tokens over the runs that report its whole;
    'whole': the whole's own tokens over the runs that report the part. ``sum(x) FILTER (WHERE
    c)`` written ``sum(CASE WHEN c THEN x END)``: the same value (NULL over no row), cheaper."""
    a, b = (part, whole) if side == "part" else (whole, part)
    return f"sum(CASE WHEN {b} IS NOT NULL THEN own_{a} END)"


_SHARE_RATIOS = ",\n    ".join(f"{s}_part / nullif({s}_whole, 0) AS {s}" for s, _, _ in _SHARES)

#: Token parts (design §3: ``input_tokens`` includes cache reads and writes, ``output_tokens``
#: includes reasoning): the sums and each part's share of its whole, 0..1. A share counts only
#: runs that report both the part and its whole (a source that never reports cache reads is
#: left out, never read as 0 %); NULL when no run does.
_TOKEN_PARTS = f"""
    sum(own_input_tokens) AS input_tokens,
    sum(own_output_tokens) AS output_tokens,
    sum(own_cache_read_tokens) AS cache_read_tokens,
    sum(own_cache_write_tokens) AS cache_write_tokens,
    sum(own_reasoning_tokens) AS reasoning_tokens,
    {", ".join(f"{_share_sum('part', p, w)} / nullif({_share_sum('whole', p, w)}, 0) AS {s}" for s, p, w in _SHARES)}"""

OVERVIEW_PER_TASK = f"""
WITH {FILTERED},
{SPEND}
SELECT
    task_type,
    count(*) AS runs,
    {_RATES},
    sum(own_cost_usd) AS cost_usd,
    quantile_cont(total_tokens, 0.95) AS p95_total_tokens,
    {_TOKEN_PARTS}
FROM spend
GROUP BY task_type
ORDER BY task_type
"""

#: What the Overview adds up per task type (``OVERVIEW``): (column, aggregate over ``spend``);
#: the window's total of each is the sum of the task types' (counts: 0 over no run).
_OVERVIEW_ADDITIVE: tuple[tuple[str, str], ...] = (
    ("runs", "count(*)"),
    ("finished_runs", "count(stop_reason)"),
    ("budgeted_runs", count_where(_IS_BUDGETED_FINISHED)),
    ("budget_stops", count_where(IS_BUDGET_STOP)),
    ("interventions", count_where(f"{_IS_BUDGETED_FINISHED} AND {_IS_INTERVENTION}")),
    ("answered_stops", count_where(IS_ANSWERED_STOP)),
    *((c, f"sum(own_{c})") for c in ("input_tokens", "output_tokens", *(p for _, p, _ in _SHARES))),
    *((f"{s}_{side}", _share_sum(side, p, w)) for s, p, w in _SHARES for side in ("part", "whole")),
    ("cost_usd", "sum(own_cost_usd)"),
    ("priced_runs", "count(cost_usd)"),
    ("partially_priced_runs", count_where(f"cost_usd IS NOT NULL AND NOT {COST_KNOWN}")),
    ("unpriced_calls", "CAST(coalesce(sum(unpriced_calls), 0) AS BIGINT)"),
    ("unknown_usage_runs", count_where("usage_status = 'unknown'")),
    ("flagged_runs", count_where("quality IS NOT NULL")),
    ("tool_cost_usd", "coalesce(sum(tool_cost_usd), 0.0)"),
)
#: Counts and the zero-defaulted sums: their total over no task type is 0, not NULL.
_OVERVIEW_ZERO = {c for c, e in _OVERVIEW_ADDITIVE if e.startswith(("count", "CAST(coalesce", "coalesce"))}


def _overview_total(column: str) -> str:
    total = f"sum({column})"
    if column == "tool_cost_usd":
        return f"coalesce({total}, 0.0) AS {column}"
    return (
        f"CAST(coalesce({total}, 0) AS BIGINT) AS {column}"
        if column in _OVERVIEW_ZERO
        else f"{total} AS {column}"
    )


#: The Overview's headline figures and per-task rows (issue 25): one pass over the runs per task
#: type (``_OVERVIEW_ADDITIVE``, counts as ``count_if``), the window's total row added up from
#: those few rows, its P95 of total tokens from the runs (``is_total`` tells it apart). The same
#: values as the aggregates over every run with ``FILTER`` clauses and grouping sets it replaces
#: (``tests/test_page_reads_evidence.py``), at a third of the time at 1M runs. Columns: is_total,
#: task_type, runs, the ``_RATES`` columns, the ``_TOKEN_PARTS`` ones, cost_usd, priced_runs,
#: partially_priced_runs, unpriced_calls, unknown_usage_runs, flagged_runs, p95_total_tokens,
#: tool_cost_usd; the per-task rows by task type (NULL last), the total row last.
OVERVIEW = f"""
WITH {FILTERED_INLINE},
{SPEND},
per_task AS (
    SELECT task_type, {", ".join(f"{e} AS {c}" for c, e in _OVERVIEW_ADDITIVE)},
           quantile_cont(total_tokens, 0.95) AS p95_total_tokens
    FROM spend GROUP BY task_type
),
rows AS (
    SELECT false AS is_total, * FROM per_task
    UNION ALL
    SELECT true, NULL, {", ".join(_overview_total(c) for c, _ in _OVERVIEW_ADDITIVE)},
           (SELECT quantile_cont(total_tokens, 0.95) FROM filtered)
    FROM per_task
)
SELECT is_total, task_type, runs, finished_runs, budgeted_runs, budget_stops, interventions,
    budget_stops / nullif(budgeted_runs, 0) AS hit_rate,
    interventions / nullif(budgeted_runs, 0) AS intervention_rate,
    answered_stops, answered_stops / nullif(budget_stops, 0) AS answered_share,
    input_tokens, output_tokens, {", ".join(p for _, p, _ in _SHARES)},
    {_SHARE_RATIOS},
    cost_usd, priced_runs, partially_priced_runs, unpriced_calls, unknown_usage_runs,
    flagged_runs, p95_total_tokens, tool_cost_usd
FROM rows
ORDER BY is_total, task_type NULLS LAST
"""

#: The spend figures of the Cost page's tiles (``cost_totals``), with the Overview's own
#: aggregates (``_OVERVIEW_ADDITIVE``) over every filtered run at once.
COST_TOTAL_COLUMNS = (
    "runs",
    "cost_usd",
    "priced_runs",
    "partially_priced_runs",
    "unpriced_calls",
    "unknown_usage_runs",
    "tool_cost_usd",
)
_ADDITIVE = dict(_OVERVIEW_ADDITIVE)
COST_TOTALS = f"""
WITH {FILTERED},
{SPEND}
SELECT {", ".join(f"{_ADDITIVE[c]} AS {c}" for c in COST_TOTAL_COLUMNS)}
FROM spend
"""

#: Metrics of a baseline, each with P50, P95 and max (units in the names).
BASELINE_METRICS = (
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "turns",
    "tool_calls",
    "duration_s",
    "cost_usd",
)


def _quantile_list(m: str) -> str:
    # the cost over the runs whose cost is known: NULL elsewhere (aggregates skip NULL), the
    # same as a FILTER clause at less cost
    value = f"CASE WHEN {COST_KNOWN} THEN {m} END" if m == "cost_usd" else m
    return f"quantile_cont({value}, [0.5, 0.95]) AS q_{m}, max({value}) AS max_{m}"


def _quantile_columns(m: str) -> str:
    n_cost = "n_cost, " if m == "cost_usd" else ""
    return f"{n_cost}q_{m}[1] AS p50_{m}, q_{m}[2] AS p95_{m}, max_{m}"


_QUANTILE_LISTS = ",\n    ".join(_quantile_list(m) for m in BASELINE_METRICS)
_QUANTILE_COLUMNS = ",\n    ".join(_quantile_columns(m) for m in BASELINE_METRICS)


def _baselines(keys: str) -> str:
    return f"""
WITH {FILTERED},
q AS (
    SELECT {keys}, count(*) AS n, {count_where(COST_KNOWN)} AS n_cost,
    {_QUANTILE_LISTS}
    FROM filtered
    GROUP BY {keys}
)
SELECT {keys}, n, n < $low_sample_runs AS low_sample,
    {_QUANTILE_COLUMNS}
FROM q
ORDER BY {keys}
"""


BASELINES_BY_TASK = _baselines("task_type")
#: Per task type and model combination (``runs.models``: a downgraded run lists both models).
BASELINES_BY_TASK_MODEL = _baselines("task_type, models")

#: The parts of a run's tokens (design §3), each with P50, P95 and max over the runs that
#: report it (``n_<part>`` of them; a run without the figure is left out, never read as 0).
TOKEN_PART_METRICS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


TOKEN_PART_BASELINES = f"""
WITH {FILTERED},
q AS (
    SELECT task_type, count(*) AS n,
    {", ".join(f"count({m}) AS n_{m}, quantile_cont({m}, [0.5, 0.95]) AS q_{m}, max({m}) AS max_{m}" for m in TOKEN_PART_METRICS)}
    FROM filtered
    GROUP BY task_type
)
SELECT task_type, n, n < $low_sample_runs AS low_sample,
    {", ".join(f"n_{m}, q_{m}[1] AS p50_{m}, q_{m}[2] AS p95_{m}, max_{m}" for m in TOKEN_PART_METRICS)}
FROM q
ORDER BY task_type
"""

#: Per local day (or hour) and task type; rates as ``_RATES`` (NULL on a day without budgeted runs).
_HIT_RATE_BY_PERIOD = f"""
WITH {FILTERED},
b AS (
    SELECT {BUCKET} AS bucket, task_type,
           count(stop_reason) AS finished,
           {count_where(_IS_BUDGETED_FINISHED)} AS budgeted,
           {count_where(IS_BUDGET_STOP)} AS stops,
           {count_where(_IS_BUDGETED_FINISHED + " AND " + _IS_INTERVENTION)} AS intervened,
           {count_where(IS_ANSWERED_STOP)} AS answered
    FROM filtered GROUP BY ALL
)
SELECT
    {{period}} AS day,
    task_type,
    CAST(sum(finished) AS BIGINT) AS finished_runs,
    CAST(sum(budgeted) AS BIGINT) AS budgeted_runs,
    CAST(sum(stops) AS BIGINT) AS budget_stops,
    CAST(sum(intervened) AS BIGINT) AS interventions,
    budget_stops / nullif(budgeted_runs, 0) AS hit_rate,
    interventions / nullif(budgeted_runs, 0) AS intervention_rate,
    CAST(sum(answered) AS BIGINT) AS answered_stops,
    answered_stops / nullif(budget_stops, 0) AS answered_share
FROM b
GROUP BY day, task_type
ORDER BY day, task_type
"""
HIT_RATE_DAILY = _HIT_RATE_BY_PERIOD.replace("{period}", _LOCAL_DAY)
#: As ``HIT_RATE_DAILY`` per local hour: ``day`` is the hour's start (naive local timestamp).
HIT_RATE_HOURLY = _HIT_RATE_BY_PERIOD.replace("{period}", f"date_trunc('hour', {LOCAL_BUCKET})")

STOP_REASONS = f"""
WITH {FILTERED}
SELECT task_type, coalesce(stop_reason, 'unfinished') AS stop_reason, count(*) AS runs
FROM filtered
GROUP BY ALL
ORDER BY task_type, runs DESC, stop_reason
"""


#: The tail of both cost-by-period statements: per-run rows ``b`` (bucket, key, cost_usd, runs,
#: unpriced) summed per local period.
_PERIOD_TOTALS = f"""
SELECT
    date_trunc($period, {LOCAL_BUCKET}) AS period_start,
    key,
    sum(cost_usd) AS cost_usd,
    CAST(sum(runs) AS BIGINT) AS runs,
    CAST(coalesce(sum(unpriced), 0) AS BIGINT) AS unpriced_calls
FROM b
GROUP BY ALL
ORDER BY period_start, key
"""

#: ``$period`` is one of ``views.PERIODS`` (validated in Python); buckets are local time in ``$tz``.
COST_BY_PERIOD_TASK = f"""
WITH {FILTERED},
{SPEND},
b AS (
    SELECT {BUCKET} AS bucket, task_type AS key, sum(own_cost_usd) AS cost_usd, count(*) AS runs,
           sum(unpriced_calls) AS unpriced
    FROM spend GROUP BY ALL
)
{_PERIOD_TOTALS}"""


def cost_by_period_model(multi: str) -> str:
    """The cost-per-model statement, bucketed by the run's start so that a period's total equals
    the per-task view (``COST_BY_PERIOD_TASK``'s parameters and columns). A run with one model (no
    comma in ``runs.models``) counts whole under that model; the runs with several models (a
    downgrade) are split by ``multi``: the body of a CTE with columns start_utc, key (the model),
    cost_usd, unpriced, over the rows of ``MULTI_MODEL_RUNS`` (run_id, start_utc). ``runs`` counts
    runs per key. ``multi`` is a constant fragment of this package, never request data. The runs
    filter is inlined (``FILTERED_INLINE``: read by both parts)."""
    return f"""
WITH {FILTERED_INLINE},
{SPEND},
single AS (
    SELECT start_utc, coalesce(nullif(models, ''), 'unknown') AS key, own_cost_usd AS cost_usd,
           unpriced_calls AS unpriced
    FROM spend WHERE NOT contains(coalesce(models, ''), ',')
),
multi AS ({multi}),
per_run AS (SELECT * FROM single UNION ALL SELECT * FROM multi),
b AS (
    SELECT {BUCKET} AS bucket, key, sum(cost_usd) AS cost_usd, count(*) AS runs,
           sum(unpriced) AS unpriced
    FROM per_run GROUP BY ALL
)
{_PERIOD_TOTALS}"""


#: The filtered runs with several models (run_id, start_utc), for ``cost_by_period_model``.
MULTI_MODEL_RUNS = "(SELECT run_id, start_utc FROM filtered WHERE contains(models, ','))"


def _log_histogram(column: str, unit: str) -> str:
    # ``column`` and ``unit`` are fixed identifiers from this module, never request data.
    return f"""
WITH {FILTERED},
b AS (
    SELECT task_type, floor(log10({column}) * $per_decade) AS k
    FROM filtered WHERE {column} > 0
)
SELECT task_type,
       pow(10, k / $per_decade) AS bucket_low_{unit},
       pow(10, (k + 1) / $per_decade) AS bucket_high_{unit},
       count(*) AS runs
FROM b GROUP BY task_type, k ORDER BY task_type, k
"""


#: Log-spaced histograms: ``$per_decade`` buckets per power of ten; runs without a positive value
#: (unpriced, unknown usage) are left out.
COST_PER_RUN = _log_histogram("cost_usd", "usd")
TOKEN_DISTRIBUTION = _log_histogram("total_tokens", "tokens")
