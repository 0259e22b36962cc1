"""Named SQL statements of the store. Values reach SQL only as parameters or registered batches.

Column names in generated statements come from the schema constants, never from request data.

Registered relations (pyarrow tables, see ``budgetlens.store.writer``):

- ``batch_calls``, ``batch_records``, ``batch_events``: the rows of one batch;
- ``new_calls``, ``new_records``, ``new_events``: what the inserts returned, i.e. only the rows
  actually inserted (or, for run records, inserted or changed);
- ``touched``: the ``run_totals`` rows the merge returned (the runs whose ``runs`` row changes).

The rollup rule (one definition, used by the incremental merge and the full rebuild alike): a
value in ``run_records`` wins; otherwise it is aggregated from the run's calls and events. Unknown
usage is never 0: a run with an unknown call has usage_status 'unknown' and its calls count their
reservation. Counts no source gives are unknown too: ``turns`` is NULL without a recorded
count or a call, ``tool_calls`` NULL without a recorded count or a ``budgetlens.tool_call``
event (an importer that knows a run made no tool call records 0). cost_usd sums the priced calls (NULL when none is priced); unpriced_calls counts the
calls with reported usage but no price; tool_cost_usd sums the paid tool calls' fees (0.0 without
any), apart from cost_usd. Text taken from calls (trace id, source, service, task
type) is the smallest non-NULL value among the run's calls.
"""

from __future__ import annotations

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.store.schema import LIMIT_COLUMNS, RUN_COLUMNS, RUN_RECORD_COLUMNS

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_utc TIMESTAMP NOT NULL
)
"""
SELECT_APPLIED_VERSIONS = "SELECT version FROM schema_migrations ORDER BY version"
RECORD_MIGRATION = "INSERT INTO schema_migrations VALUES (?, CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP))"
HAS_MIGRATIONS_TABLE = (
    "SELECT count(*) FROM information_schema.tables "
    "WHERE table_name = 'schema_migrations' AND table_catalog = current_database()"
)

#: Fields of the ``run_totals.record`` STRUCT (the record's ``quality`` is kept as ``r_quality``).
#: The attribution columns are kept beside it as ``r_*`` (the STRUCT's fields are those of
#: schema version 1).
_RECORD_FIELDS = [
    c for c in RUN_RECORD_COLUMNS if c not in ("run_id", "quality", "parent_run_id", *ATTRIBUTION_COLUMNS)
]
#: Record columns compared and replaced by an upsert (everything but the key).
_RECORD_VALUES = [*_RECORD_FIELDS, "quality", *ATTRIBUTION_COLUMNS, "parent_run_id"]
_R_ATTRIBUTION = ", ".join(f"{c} AS r_{c}" for c in ATTRIBUTION_COLUMNS)
_C_ATTRIBUTION = ",\n    ".join(f"min({c}) AS c_{c}" for c in ATTRIBUTION_COLUMNS)
_RUN_ATTRIBUTION = ",\n    ".join(f"coalesce(r_{c}, c_{c}) AS {c}" for c in ATTRIBUTION_COLUMNS)

#: Columns of a newly inserted call that the writer returns (the rollup and the metrics use them).
INSERTED_CALL_COLUMNS: tuple[str, ...] = (
    "call_id",
    "span_id",
    "parent_span_id",
    "run_id",
    "trace_id",
    "source",
    "service_name",
    "task_type",
    "request_model",
    "response_model",
    "start_utc",
    "end_utc",
    "duration_s",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "reserved_tokens",
    "cost_usd",
    "unpriced_parts",
    "usage_status",
    "error_type",
    "quality",
    *ATTRIBUTION_COLUMNS,
)

#: Insert new calls; returns only the rows inserted (a re-sent span returns nothing).
#: A call whose ``response_id`` is already stored (a response copied into a later transcript,
#: imported in a later run) is not new: the stored one (the session that made it) keeps it.
_NOT_A_STORED_RESPONSE = (
    "(b.response_id IS NULL OR NOT EXISTS (SELECT 1 FROM model_calls m "
    "WHERE m.response_id IS NOT NULL AND m.response_id = b.response_id))"
)
INSERT_CALLS = (
    "INSERT INTO model_calls BY NAME SELECT * FROM batch_calls b WHERE "
    + _NOT_A_STORED_RESPONSE
    + " ON CONFLICT DO NOTHING RETURNING "
    + ", ".join(INSERTED_CALL_COLUMNS)
)


def _upsert_records() -> str:
    fields = _RECORD_VALUES
    assignments = ", ".join(f"{c} = excluded.{c}" for c in fields)
    changed = " OR ".join(f"run_records.{c} IS DISTINCT FROM excluded.{c}" for c in fields)
    return (
        "INSERT INTO run_records BY NAME SELECT * FROM batch_records "
        f"ON CONFLICT (run_id) DO UPDATE SET {assignments} WHERE {changed} RETURNING *"
    )


#: A run record sent again with the same values changes nothing (returns nothing); a newer
#: record of the same run (a session imported again after it grew) replaces the stored one.
INSERT_RECORDS = _upsert_records()
INSERT_EVENTS = (
    "INSERT INTO budget_events BY NAME SELECT * FROM batch_events ON CONFLICT DO NOTHING "
    "RETURNING run_id, name, tool_cost_usd"
)

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
    sum(input_tokens) AS c_input_tokens,
    sum(output_tokens) AS c_output_tokens,
    sum(coalesce(total_tokens, input_tokens + output_tokens,
                 CASE WHEN usage_status = 'unknown' THEN reserved_tokens END)) AS c_total_tokens,
    sum(cache_read_tokens) AS c_cache_read_tokens,
    sum(cache_write_tokens) AS c_cache_write_tokens,
    sum(reasoning_tokens) AS c_reasoning_tokens,
    sum(cost_usd) AS c_cost_usd,
    count(*) FILTER (WHERE (cost_usd IS NULL OR unpriced_parts IS NOT NULL)
                     AND usage_status = 'reported') AS c_unpriced_calls,
    count(*) FILTER (WHERE usage_status = 'unknown') AS c_unknown_usage_calls,
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


def _totals_from(calls: str, records: str, events: str) -> str:
    """SELECT of run_totals rows aggregated from three relations (new rows or whole tables)."""
    record = ", ".join(f"{c} := {c}" for c in _RECORD_FIELDS)
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


_ADDED = (
    "c_model_calls",
    "c_input_tokens",
    "c_output_tokens",
    "c_total_tokens",
    "c_cache_read_tokens",
    "c_cache_write_tokens",
    "c_reasoning_tokens",
    "c_cost_usd",
    "c_unpriced_calls",
    "c_unknown_usage_calls",
    "e_warnings",
    "e_downgrades",
    "e_summaries",
    "e_tool_calls",
    "e_tool_cost_usd",
)
_SMALLEST = (
    "c_trace_id",
    "c_source",
    "c_service_name",
    "c_task_type",
    "c_start_utc",
    *(f"c_{c}" for c in ATTRIBUTION_COLUMNS),
)


def _merged_totals_sets(old: str, new: str) -> list[str]:
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


def _merge_totals() -> str:
    sets = _merged_totals_sets("run_totals", "excluded")
    return (
        "INSERT INTO run_totals BY NAME "
        + _totals_from("new_calls", "new_records", "new_events")
        + f" ON CONFLICT (run_id) DO UPDATE SET {', '.join(sets)} RETURNING *"
    )


#: Merge the new rows of a batch into ``run_totals``; returns the merged rows of those runs.
MERGE_RUN_TOTALS = _merge_totals()

#: The ``runs`` row of each ``run_totals`` row of a relation (``{totals}``).
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
    r_parent_run_id AS parent_run_id
FROM (
    SELECT *, list_sort(list_distinct(flatten(list_transform(
        list_concat(coalesce(c_quality, []), [r_quality]), lambda x: coalesce(string_split(x, ','), []))))) AS flags
    FROM t
)
"""


#: The ``runs`` columns a commit hands to the Prometheus metrics (``CollectorMetrics.observe_write``):
#: enough to count finished runs, budgeted ones (a limit set) and budget stops per service.
METRIC_RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "task_type",
    "stop_reason",
    "total_tokens",
    "team",
    "service_name",
    *LIMIT_COLUMNS,
)


def _upsert_runs() -> str:
    assignments = ", ".join(f"{c} = excluded.{c}" for c in RUN_COLUMNS if c != "run_id")
    return (
        "INSERT INTO runs BY NAME "
        + _RUNS_FROM_TOTALS.format(totals="touched", attribution=_RUN_ATTRIBUTION)
        + f" ON CONFLICT (run_id) DO UPDATE SET {assignments} "
        "RETURNING " + ", ".join(METRIC_RUN_COLUMNS)
    )


#: Upsert the ``runs`` row of every run in ``touched`` (no scan of the big tables).
UPSERT_TOUCHED_RUNS = _upsert_runs()

#: Aggregates are not calls (design §4), decided by the store across requests and collectors: a
#: stored call that is the parent of a new call, or a new call that is the parent of a stored one,
#: sums the calls below it; it is deleted (``FIND_AGGREGATES`` into ``aggregates``, then
#: ``DELETE_AGGREGATES``, returning (call_id, run_id) of each).
#: Only the traces of the batch are read.
FIND_AGGREGATES = """
WITH stored AS (
    SELECT call_id, trace_id, span_id, parent_span_id FROM model_calls
    WHERE trace_id IN (SELECT trace_id FROM new_calls WHERE trace_id IS NOT NULL)
)
SELECT stored.call_id FROM stored JOIN new_calls
    ON stored.trace_id = new_calls.trace_id AND stored.span_id = new_calls.parent_span_id
UNION
SELECT new_calls.call_id FROM new_calls JOIN stored
    ON stored.trace_id = new_calls.trace_id AND stored.parent_span_id = new_calls.span_id
"""
DELETE_AGGREGATES = (
    "DELETE FROM model_calls WHERE call_id IN (SELECT call_id FROM aggregates) RETURNING call_id, run_id"
)
#: Recount the ``run_totals`` of the runs in ``recount`` (run_id) from the stored rows.
DELETE_RECOUNT_TOTALS = "DELETE FROM run_totals WHERE run_id IN (SELECT run_id FROM recount)"
INSERT_RECOUNT_TOTALS = (
    "INSERT INTO run_totals BY NAME "
    + _totals_from(
        "(SELECT * FROM model_calls WHERE run_id IN (SELECT run_id FROM recount))",
        "(SELECT * FROM run_records WHERE run_id IN (SELECT run_id FROM recount))",
        "(SELECT * FROM budget_events WHERE run_id IN (SELECT run_id FROM recount))",
    )
    + " RETURNING *"
)

#: The full rebuild (after a bulk load; also the reference the incremental merge must equal).
DELETE_ALL_RUN_TOTALS = "DELETE FROM run_totals"
INSERT_ALL_RUN_TOTALS = "INSERT INTO run_totals BY NAME " + _totals_from(
    "model_calls", "run_records", "budget_events"
)
DELETE_ALL_RUNS = "DELETE FROM runs"
INSERT_ALL_RUNS = "INSERT INTO runs BY NAME " + _RUNS_FROM_TOTALS.format(
    totals="run_totals", attribution=_RUN_ATTRIBUTION
)
COUNT_RUNS = "SELECT count(*) FROM runs"


# --- DuckLake (``budgetlens.store.lake``): no primary keys, no RETURNING ------------------------
# The same rollup as above, written as SELECT (into a registered relation) + DELETE + INSERT.
# Every transaction that writes these tables first takes the fold token (the one ``lake_fold``
# row, see ``budgetlens.store.lake_ingest``), so two such writers conflict and the loser re-runs
# these anti-joins on a snapshot that holds the winner's rows. Collectors only stage rows.

LAKE_TAKE_FOLD_TOKEN = "UPDATE lake_fold SET folds = folds + 1"
LAKE_NEW_CALLS = (
    "SELECT b.* FROM batch_calls b WHERE NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.call_id = b.call_id) "
    "AND " + _NOT_A_STORED_RESPONSE
)
LAKE_INSERT_CALLS = "INSERT INTO model_calls BY NAME SELECT * FROM new_calls"
LAKE_NEW_EVENTS = (
    "SELECT b.* FROM batch_events b WHERE NOT EXISTS "
    "(SELECT 1 FROM budget_events e WHERE e.event_id = b.event_id)"
)
LAKE_INSERT_EVENTS = "INSERT INTO budget_events BY NAME SELECT * FROM new_events"


def _lake_new_records() -> str:
    changed = " OR ".join(f"r.{c} IS DISTINCT FROM b.{c}" for c in _RECORD_VALUES)
    return (
        "SELECT b.* FROM batch_records b LEFT JOIN run_records r ON r.run_id = b.run_id "
        f"WHERE r.run_id IS NULL OR {changed}"
    )


#: Run records not stored yet or whose values changed (a newer record replaces the stored one).
LAKE_NEW_RECORDS = _lake_new_records()
LAKE_DELETE_RECORDS = "DELETE FROM run_records WHERE run_id IN (SELECT run_id FROM new_records)"
LAKE_INSERT_RECORDS = "INSERT INTO run_records BY NAME SELECT * FROM new_records"


def _lake_merged_totals() -> str:
    sets = _merged_totals_sets("o", "n")
    columns = ", ".join(
        expression.split(" = ", 1)[1] + " AS " + expression.split(" = ", 1)[0] for expression in sets
    )
    return (
        f"SELECT n.run_id, {columns} FROM ("
        + _totals_from("new_calls", "new_records", "new_events")
        + ") n LEFT JOIN run_totals o ON o.run_id = n.run_id"
    )


#: The merged ``run_totals`` rows of the runs the batch touches (stored row + new aggregates).
LAKE_MERGED_TOTALS = _lake_merged_totals()
LAKE_DELETE_TOUCHED_TOTALS = "DELETE FROM run_totals WHERE run_id IN (SELECT run_id FROM touched)"
LAKE_INSERT_TOUCHED_TOTALS = "INSERT INTO run_totals BY NAME SELECT * FROM touched"
LAKE_RUNS_OF_TOUCHED = _RUNS_FROM_TOTALS.format(totals="touched", attribution=_RUN_ATTRIBUTION)
LAKE_DELETE_TOUCHED_RUNS = "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM touched_runs)"
LAKE_INSERT_TOUCHED_RUNS = "INSERT INTO runs BY NAME SELECT * FROM touched_runs"

# --- issue 9: re-pricing (budgetlens reprice) ------------------------------------------------------

#: Calls budgetlens priced with other prices than ``?`` (the current price version), and calls it
#: left unpriced although their usage is known; a cost the source stated (no price_version) stays.
SELECT_REPRICE_CANDIDATES = """
SELECT span_id, coalesce(response_model, request_model) AS model, provider_name, start_utc,
       input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
       usage_details, cost_usd, price_version
FROM model_calls
WHERE (price_version IS NOT NULL AND price_version <> ?)
   OR (price_version IS NULL AND cost_usd IS NULL AND usage_status = 'reported'
       AND input_tokens IS NOT NULL AND output_tokens IS NOT NULL
       AND coalesce(response_model, request_model) IS NOT NULL)
ORDER BY span_id
"""

UPDATE_CALL_PRICE = (
    "UPDATE model_calls SET cost_usd = ?, price_version = ?, unpriced_parts = ? WHERE span_id = ?"
)
