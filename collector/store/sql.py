"""Named SQL statements of the store. Values reach SQL only as parameters or registered batches.

Batches are pyarrow tables registered on the connection under the names ``batch_calls``,
``batch_records``, ``batch_events`` and ``batch_run_ids``.
"""

from __future__ import annotations

from collector.store.schema import RUN_RECORD_COLUMNS

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_utc TIMESTAMP NOT NULL
)
"""
SELECT_APPLIED_VERSIONS = "SELECT version FROM schema_migrations ORDER BY version"
RECORD_MIGRATION = (
    "INSERT INTO schema_migrations VALUES (?, CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP))"
)
HAS_MIGRATIONS_TABLE = (
    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
)

INSERT_CALLS = "INSERT INTO model_calls BY NAME SELECT * FROM batch_calls ON CONFLICT DO NOTHING"
def _upsert_records() -> str:
    # Column names come from the schema constants, never from request data.
    columns = [c for c in RUN_RECORD_COLUMNS if c != "run_id"]
    assignments = ", ".join(f"{c} = excluded.{c}" for c in columns)
    changed = " OR ".join(f"run_records.{c} IS DISTINCT FROM excluded.{c}" for c in columns)
    return (
        "INSERT INTO run_records BY NAME SELECT * FROM batch_records "
        f"ON CONFLICT (run_id) DO UPDATE SET {assignments} WHERE {changed}"
    )


#: A run record sent again with the same values changes nothing (and counts 0); a newer record of
#: the same run (a session imported again after it grew) replaces the stored one.
INSERT_RECORDS = _upsert_records()
INSERT_EVENTS = (
    "INSERT INTO budget_events BY NAME SELECT * FROM batch_events ON CONFLICT DO NOTHING"
)

DELETE_TOUCHED_RUNS = "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM batch_run_ids)"

#: Rebuild the ``runs`` rollup for the run ids in ``batch_run_ids``.
#: Rule: a value in ``run_records`` wins; otherwise it is aggregated from the run's calls and
#: events. Unknown usage is never 0: a run with an unknown call has usage_status 'unknown'.
#: cost_usd sums the priced calls (NULL when none is priced); unpriced_calls counts the calls
#: with reported usage but no price.
INSERT_TOUCHED_RUNS = """
INSERT INTO runs BY NAME
WITH ids AS (SELECT DISTINCT run_id FROM batch_run_ids),
c AS (
    SELECT
        run_id,
        any_value(trace_id) AS trace_id,
        any_value(source) AS source,
        any_value(service_name) AS service_name,
        any_value(task_type) AS task_type,
        string_agg(DISTINCT coalesce(response_model, request_model), ','
                   ORDER BY coalesce(response_model, request_model)) AS models,
        min(start_utc) AS start_utc,
        max(end_utc) AS end_utc,
        count(*) AS model_calls,
        sum(input_tokens) AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(coalesce(total_tokens, input_tokens + output_tokens,
                     CASE WHEN usage_status = 'unknown' THEN reserved_tokens END)) AS total_tokens,
        sum(cache_read_tokens) AS cache_read_tokens,
        sum(cache_write_tokens) AS cache_write_tokens,
        sum(reasoning_tokens) AS reasoning_tokens,
        sum(cost_usd) AS cost_usd,
        count(*) FILTER (WHERE cost_usd IS NULL AND usage_status = 'reported') AS unpriced_calls,
        count(*) FILTER (WHERE usage_status = 'unknown') AS unknown_usage_calls,
        bool_or(error_type IS NOT NULL) AS any_error
    FROM model_calls
    WHERE run_id IN (SELECT run_id FROM ids)
    GROUP BY run_id
),
e AS (
    SELECT
        run_id,
        count(*) FILTER (WHERE name = 'budgetlens.warning') AS warnings,
        count(*) FILTER (WHERE name = 'budgetlens.downgrade') AS downgrades,
        count(*) FILTER (WHERE name = 'budgetlens.summarize') AS summaries,
        count(*) FILTER (WHERE name = 'budgetlens.tool_call') AS tool_call_events
    FROM budget_events
    WHERE run_id IN (SELECT run_id FROM ids)
    GROUP BY run_id
),
r AS (SELECT * FROM run_records WHERE run_id IN (SELECT run_id FROM ids))
SELECT
    ids.run_id,
    coalesce(r.trace_id, c.trace_id) AS trace_id,
    coalesce(r.source, c.source) AS source,
    coalesce(r.service_name, c.service_name) AS service_name,
    coalesce(r.task_type, c.task_type, r.agent_name, r.service_name, c.service_name, 'unknown')
        AS task_type,
    coalesce(c.models, r.model) AS models,
    coalesce(r.start_utc, c.start_utc) AS start_utc,
    coalesce(r.end_utc, c.end_utc) AS end_utc,
    coalesce(r.duration_s,
             epoch(coalesce(r.end_utc, c.end_utc)) - epoch(coalesce(r.start_utc, c.start_utc)))
        AS duration_s,
    coalesce(r.turns, c.model_calls, 0) AS turns,
    coalesce(r.tool_calls, e.tool_call_events, 0) AS tool_calls,
    coalesce(c.model_calls, 0) AS model_calls,
    coalesce(r.input_tokens, c.input_tokens) AS input_tokens,
    coalesce(r.output_tokens, c.output_tokens) AS output_tokens,
    coalesce(r.total_tokens, r.input_tokens + r.output_tokens, c.total_tokens) AS total_tokens,
    coalesce(r.cache_read_tokens, c.cache_read_tokens) AS cache_read_tokens,
    coalesce(r.cache_write_tokens, c.cache_write_tokens) AS cache_write_tokens,
    coalesce(r.reasoning_tokens, c.reasoning_tokens) AS reasoning_tokens,
    coalesce(r.cost_usd, c.cost_usd) AS cost_usd,
    coalesce(c.unpriced_calls, 0) AS unpriced_calls,
    coalesce(c.unknown_usage_calls, 0) AS unknown_usage_calls,
    coalesce(r.stop_reason, CASE WHEN c.any_error THEN 'failed' ELSE 'completed' END)
        AS stop_reason,
    CASE WHEN r.usage_status = 'unknown' OR coalesce(c.unknown_usage_calls, 0) > 0
         THEN 'unknown' ELSE 'reported' END AS usage_status,
    r.retryable,
    r.limit_total_tokens,
    r.limit_input_tokens,
    r.limit_output_tokens,
    r.limit_turns,
    r.limit_tool_calls,
    r.limit_duration_s,
    r.limit_cost_usd,
    coalesce(e.warnings, 0) AS warnings,
    coalesce(e.downgrades, 0) AS downgrades,
    coalesce(e.summaries, 0) AS summaries
FROM ids
LEFT JOIN r ON r.run_id = ids.run_id
LEFT JOIN c ON c.run_id = ids.run_id
LEFT JOIN e ON e.run_id = ids.run_id
"""

#: Rebuild the whole rollup (after a bulk load, e.g. the benchmark generator).
SELECT_ALL_RUN_IDS = """
SELECT run_id FROM model_calls UNION SELECT run_id FROM run_records
UNION SELECT run_id FROM budget_events
"""
