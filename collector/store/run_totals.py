"""The rollup rule of ``run_totals`` and ``runs`` (``budgetlens.store.schema``): SQL fragments the
statements of ``budgetlens.store.sql`` are built from.

One definition, used by the incremental merge and the full rebuild alike: a value in ``run_records`` wins; otherwise it is aggregated from the run's calls and events. Unknown
usage is never 0: a run with an unknown call has usage_status 'unknown' and its calls count their
reservation. Counts no source gives are unknown too: ``turns`` is NULL without a recorded
count or a call, ``tool_calls`` NULL without a recorded count or a ``budgetlens.tool_call``
event (an importer that knows a run made no tool call records 0). cost_usd sums the priced calls (NULL when none is priced); unpriced_calls counts the
calls with reported usage but no price; tool_cost_usd sums the paid tool calls' fees (0.0 without
any), apart from cost_usd. Text taken from calls (trace id, source, service, task
type) is the smallest non-NULL value among the run's calls.

Column names in these fragments come from the schema constants, never from request data.
"""

from __future__ import annotations

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.store.schema import (
    CALL_SUMS,
    EVENT_COUNTS,
    RUN_KEY,
    RUN_PEAK_COLUMNS,
    RUN_RECORD_COLUMNS,
    TOKEN_COLUMNS,
)

#: Fields of the ``run_totals.record`` STRUCT (the record's ``quality`` is kept as ``r_quality``).
#: The attribution columns are kept beside it as ``r_*`` (the STRUCT's fields are those of
#: schema version 1).
RECORD_FIELDS: list[str] = [
    c for c in RUN_RECORD_COLUMNS if c not in ("run_id", "quality", "parent_run_id", *ATTRIBUTION_COLUMNS)
]
#: Record columns compared and replaced by an upsert (everything but the key).
RECORD_VALUES: list[str] = [*RECORD_FIELDS, "quality", *ATTRIBUTION_COLUMNS, "parent_run_id"]
_R_ATTRIBUTION = ", ".join(f"{c} AS r_{c}" for c in ATTRIBUTION_COLUMNS)
_C_ATTRIBUTION = ",\n    ".join(f"min({c}) AS c_{c}" for c in ATTRIBUTION_COLUMNS)
_RUN_ATTRIBUTION = ",\n    ".join(f"coalesce(r_{c}, c_{c}) AS {c}" for c in ATTRIBUTION_COLUMNS)

#: The per-call expression each ``CALL_SUMS`` column aggregates: a call of unknown usage charges
#: its reservation to total_tokens; a call with reported usage but no full price is unpriced.
_CALL_SUM_EXPRESSIONS = {
    **{c: f"sum({c})" for c in TOKEN_COLUMNS},
    "total_tokens": "sum(coalesce(total_tokens, input_tokens + output_tokens,\n"
    "                 CASE WHEN usage_status = 'unknown' THEN reserved_tokens END))",
    "cost_usd": "sum(cost_usd)",
    "unpriced_calls": "count(*) FILTER (WHERE (cost_usd IS NULL OR unpriced_parts IS NOT NULL)\n"
    "                     AND usage_status = 'reported')",
    "unknown_usage_calls": "count(*) FILTER (WHERE usage_status = 'unknown')",
}


def call_sums(prefix: str) -> str:
    """The ``CALL_SUMS`` aggregates over a relation of calls, each ``AS <prefix><column>`` (SQL
    select-list items joined by commas, no trailing comma); ``runs``/``run_totals`` and
    ``run_model_rollup`` share them."""
    return ",\n    ".join(f"{_CALL_SUM_EXPRESSIONS[c]} AS {prefix}{c}" for c in CALL_SUMS)


#: Aggregates of a run's calls (over a relation with model_calls columns, grouped by run_id).
_CALL_AGGREGATES = (
    """
    min(trace_id) AS c_trace_id,
    min(source) AS c_source,
    min(service_name) AS c_service_name,
    min(task_type) AS c_task_type,
    list_sort(list_distinct(list(coalesce(response_model, request_model)))) AS c_models,
    min(start_utc) AS c_start_utc,
    max(end_utc) AS c_end_utc,
    count(*) AS c_model_calls,
    """
    + call_sums("c_")
    + """,
    bool_or(error_type IS NOT NULL) AS c_any_error,
    list(quality) FILTER (WHERE quality IS NOT NULL) AS c_quality,
    """
    + _C_ATTRIBUTION
)

#: Counts of a run's events (over a relation with budget_events columns, grouped by run_id).
_EVENT_AGGREGATES = """
    count(*) FILTER (WHERE name = 'budgetlens.warning') AS e_warnings,
    count(*) FILTER (WHERE name = 'budgetlens.downgrade') AS e_downgrades,
    count(*) FILTER (WHERE name = 'budgetlens.summarize') AS e_summaries,
    count(*) FILTER (WHERE name = 'budgetlens.tool_call') AS e_tool_calls,
    sum(tool_cost_usd) AS e_tool_cost_usd"""


def totals_from(calls: str, records: str, events: str) -> str:
    """SELECT of run_totals rows aggregated from three relations (new rows or whole tables)."""
    record = ", ".join(f"{c} := {c}" for c in RECORD_FIELDS)
    return f"""
WITH c AS (SELECT run_id, {_CALL_AGGREGATES} FROM {calls} GROUP BY run_id),
e AS (SELECT run_id, {_EVENT_AGGREGATES} FROM {events} GROUP BY run_id),
r AS (SELECT run_id, struct_pack({record}) AS record, quality AS r_quality, {_R_ATTRIBUTION},
      parent_run_id AS r_parent_run_id FROM {records}),
ids AS (SELECT run_id FROM c UNION SELECT run_id FROM e UNION SELECT run_id FROM r)
SELECT ids.run_id, r.* EXCLUDE (run_id), c.* EXCLUDE (run_id), e.* EXCLUDE (run_id)
FROM ids
LEFT JOIN r ON r.run_id = ids.run_id
LEFT JOIN c ON c.run_id = ids.run_id
LEFT JOIN e ON e.run_id = ids.run_id
"""


_ADDED = ("c_model_calls", *(f"c_{c}" for c in CALL_SUMS), *EVENT_COUNTS, "e_tool_cost_usd")
_SMALLEST = (
    "c_trace_id",
    "c_source",
    "c_service_name",
    "c_task_type",
    "c_start_utc",
    *(f"c_{c}" for c in ATTRIBUTION_COLUMNS),
)


def merged_totals_sets(old: str, new: str) -> list[str]:
    """``column = expression`` merging a stored ``run_totals`` row (``old``) with new aggregates."""
    sets = [f"record = coalesce({new}.record, {old}.record)"]
    for column in ("quality", *ATTRIBUTION_COLUMNS, "parent_run_id"):
        sets.append(
            f"r_{column} = CASE WHEN {new}.record IS NULL THEN {old}.r_{column} ELSE {new}.r_{column} END"
        )
    sets.append(f"c_quality = list_concat({old}.c_quality, {new}.c_quality)")
    sets += [f"{c} = least({old}.{c}, {new}.{c})" for c in _SMALLEST]
    sets.append(f"c_end_utc = greatest({old}.c_end_utc, {new}.c_end_utc)")
    sets.append(
        f"c_models = CASE WHEN {new}.c_models IS NULL THEN {old}.c_models "
        f"WHEN {old}.c_models IS NULL THEN {new}.c_models "
        f"ELSE list_sort(list_distinct(list_concat({old}.c_models, {new}.c_models))) END"
    )
    # NULL + x stays x, NULL + NULL stays NULL (a sum over no known value is unknown, not 0)
    sets += [f"{c} = coalesce({old}.{c} + {new}.{c}, {old}.{c}, {new}.{c})" for c in _ADDED]
    sets.append(
        f"c_any_error = coalesce({old}.c_any_error OR {new}.c_any_error, "
        f"{old}.c_any_error, {new}.c_any_error)"
    )
    return sets


#: The run's call peaks (``schema.RUN_PEAK_COLUMNS``), as its ``run_totals`` row has them.
_RUN_PEAKS = ",\n    ".join(f"{total} AS {peak}" for peak, total in RUN_PEAK_COLUMNS.items())

#: Set every run's call peaks from its ``run_totals`` row (schema version 11's back-fill; a bulk
#: load that writes ``runs`` itself, as ``benchmarks.queries``).
FILL_RUN_PEAKS = (
    "UPDATE runs SET "
    + ", ".join(f"{peak} = t.{total}" for peak, total in RUN_PEAK_COLUMNS.items())
    + " FROM run_totals t WHERE t.run_id = runs.run_id"
)

_RUNS_FROM_TOTALS = """
WITH t AS (SELECT * EXCLUDE (record), record.* FROM {totals})
SELECT
    run_id,
    coalesce(trace_id, c_trace_id) AS trace_id,
    coalesce(source, c_source) AS source,
    coalesce(service_name, c_service_name) AS service_name,
    coalesce(task_type, c_task_type, agent_name, service_name, c_service_name, 'unknown')
        AS task_type,
    coalesce(CASE WHEN len(c_models) > 0 THEN array_to_string(c_models, ',') END, model)
        AS models,
    coalesce(start_utc, c_start_utc) AS start_utc,
    coalesce(end_utc, c_end_utc) AS end_utc,
    coalesce(duration_s,
             epoch(coalesce(end_utc, c_end_utc)) - epoch(coalesce(start_utc, c_start_utc)))
        AS duration_s,
    coalesce(turns, nullif(c_model_calls, 0)) AS turns,  -- NULL when no source gives turns or calls
    coalesce(tool_calls, nullif(e_tool_calls, 0)) AS tool_calls,  -- NULL: no source counts them
    coalesce(c_model_calls, 0) AS model_calls,
    coalesce(input_tokens, c_input_tokens) AS input_tokens,
    coalesce(output_tokens, c_output_tokens) AS output_tokens,
    coalesce(total_tokens, input_tokens + output_tokens, c_total_tokens) AS total_tokens,
    coalesce(cache_read_tokens, c_cache_read_tokens) AS cache_read_tokens,
    coalesce(cache_write_tokens, c_cache_write_tokens) AS cache_write_tokens,
    coalesce(reasoning_tokens, c_reasoning_tokens) AS reasoning_tokens,
    coalesce(cost_usd, c_cost_usd) AS cost_usd,
    coalesce(c_unpriced_calls, 0) AS unpriced_calls,
    coalesce(c_unknown_usage_calls, 0) AS unknown_usage_calls,
    coalesce(stop_reason, CASE WHEN c_any_error THEN 'failed' ELSE 'completed' END)
        AS stop_reason,
    CASE WHEN usage_status = 'unknown' OR coalesce(c_unknown_usage_calls, 0) > 0 THEN 'unknown'
         WHEN usage_status = 'partial' OR list_contains(flags, 'partial_usage') THEN 'partial'
         ELSE 'reported' END AS usage_status,
    retryable,
    limit_total_tokens,
    limit_input_tokens,
    limit_output_tokens,
    limit_turns,
    limit_tool_calls,
    limit_duration_s,
    limit_cost_usd,
    coalesce(e_warnings, 0) AS warnings,
    coalesce(e_downgrades, 0) AS downgrades,
    coalesce(e_summaries, 0) AS summaries,
    nullif(array_to_string(flags, ','), '') AS quality,
    {attribution},
    coalesce(e_tool_cost_usd, 0.0) AS tool_cost_usd,
    r_parent_run_id AS parent_run_id,
    {peaks},
    {run_key} AS run_key
FROM (
    SELECT *, list_sort(list_distinct(flatten(list_transform(
        list_concat(coalesce(c_quality, []), [r_quality]), lambda x: coalesce(string_split(x, ','), []))))) AS flags
    FROM t
)
"""


def runs_from(totals: str) -> str:
    """SELECT of the ``runs`` row of each ``run_totals`` row of the relation ``totals``."""
    return _RUNS_FROM_TOTALS.format(
        totals=totals, attribution=_RUN_ATTRIBUTION, peaks=_RUN_PEAKS, run_key=RUN_KEY
    )
