"""Named SQL statements of the store. Values reach SQL only as parameters or registered batches.

Column names in generated statements come from the schema constants, never from request data.

Registered relations (pyarrow tables, see ``budgetlens.store.writer``):

- ``batch_calls``, ``batch_records``, ``batch_events``: the rows of one batch;
- ``new_calls``, ``new_records``, ``new_events``: what the inserts returned, i.e. only the rows
  actually inserted (or, for run records, inserted or changed);
- ``touched``: the ``run_totals`` rows the merge returned (the runs whose ``runs`` row changes).

The rollup rule the statements apply is ``budgetlens.store.run_totals``.
"""

from __future__ import annotations

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.store.run_totals import RECORD_VALUES, merged_totals_sets, runs_from, totals_from
from budgetlens.store.schema import LIMIT_COLUMNS, RUN_COLUMNS, RUN_PEAK_COLUMNS, TOKEN_COLUMNS, WITH_RUN_KEY

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
    *TOKEN_COLUMNS,
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
#: A stored call re-sent with another content digest (issue 23, ``budgetlens.store.resends``)
#: is not replaced: it gets the flag ``rejected_span`` and is returned too (told apart by its
#: digest, not the batch's); an identical resend, or one without a digest, returns nothing.
_WITH_REJECTED_SPAN = (
    "array_to_string(list_sort(list_distinct(list_append("
    "coalesce(string_split(model_calls.quality, ','), []), 'rejected_span'))), ',')"
)
_DIGEST_DIFFERS = (
    "excluded.content_digest IS NOT NULL AND model_calls.content_digest IS NOT NULL "
    "AND excluded.content_digest <> model_calls.content_digest"
)


def _insert_calls(condition: str, on_conflict: str | None) -> str:
    conflict = "" if on_conflict is None else f" ON CONFLICT {on_conflict}"
    return (
        f"INSERT INTO model_calls BY NAME SELECT {WITH_RUN_KEY} FROM batch_calls b WHERE {condition}"
        f"{conflict} RETURNING " + ", ".join(INSERTED_CALL_COLUMNS) + ", content_digest"
    )


INSERT_CALLS = _insert_calls(
    _NOT_A_STORED_RESPONSE,
    f"(call_id) DO UPDATE SET quality = {_WITH_REJECTED_SPAN} WHERE {_DIGEST_DIFFERS}",
)
#: ``INSERT_CALLS`` for a batch without any ``response_id`` (every OTLP span): the same rows
#: inserted, without the anti-join on stored response ids (a third of the statement's time on a
#: 1,000-span body), and ``DO NOTHING`` on a stored call id (a third less CPU than the ``DO
#: UPDATE`` branch, which DuckDB plans on every commit): it returns only the inserted rows, and
#: the writer finds and flags the stored calls re-sent with another digest by
#: ``budgetlens.store.resends.flag_stored`` only when fewer rows came back than the batch held.
INSERT_CALLS_WITHOUT_RESPONSE_IDS = _insert_calls("true", "DO NOTHING")
#: The optimistic inserts the writer tries first (``budgetlens.store.writer``): the same rows
#: without an ``ON CONFLICT`` clause, whose per-row conflict handling costs most of the insert's
#: CPU at a big store. When no batch call id is stored they insert and return what the statements
#: above do (no stored call to skip or flag); one stored call id raises DuckDB's
#: ``ConstraintException``, and the writer rolls back and runs the statement above instead.
PLAIN_INSERT_CALLS = {
    INSERT_CALLS: _insert_calls(_NOT_A_STORED_RESPONSE, None),
    INSERT_CALLS_WITHOUT_RESPONSE_IDS: _insert_calls("true", None),
}


def _upsert_records() -> str:
    fields = RECORD_VALUES
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
    f"INSERT INTO budget_events BY NAME SELECT {WITH_RUN_KEY} FROM batch_events ON CONFLICT DO NOTHING "
    "RETURNING run_id, name, tool_cost_usd"
)


def _merge_totals() -> str:
    sets = merged_totals_sets("run_totals", "excluded")
    return (
        "INSERT INTO run_totals BY NAME "
        + totals_from("new_calls", "new_records", "new_events")
        + f" ON CONFLICT (run_id) DO UPDATE SET {', '.join(sets)} RETURNING *"
    )


#: Merge the new rows of a batch into ``run_totals``; returns the merged rows of those runs.
MERGE_RUN_TOTALS = _merge_totals()


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
    updated = [c for c in (*RUN_COLUMNS, *RUN_PEAK_COLUMNS) if c != "run_id"]
    assignments = ", ".join(f"{c} = excluded.{c}" for c in updated)
    return (
        "INSERT INTO runs BY NAME "
        + runs_from("touched")
        + f" ON CONFLICT (run_id) DO UPDATE SET {assignments} "
        "RETURNING " + ", ".join(METRIC_RUN_COLUMNS)
    )


#: Upsert the ``runs`` row of every run in ``touched`` (no scan of the big tables).
UPSERT_TOUCHED_RUNS = _upsert_runs()

#: Aggregates are not calls (design §4), decided by the store across requests and collectors: a
#: stored call that is the parent of a new call, or a new call that is the parent of a stored one,
#: sums the calls below it; it is deleted (``FIND_AGGREGATES`` into ``aggregates``, then
#: ``DELETE_AGGREGATES``, returning (call_id, run_id) of each).
#: Only the traces of the batch are read. The registered ``new_calls`` (Arrow) is scanned once
#: (``n``): each reference to a registered Arrow table costs ~1-2 ms CPU to set up (its scan
#: setup, not its rows), three per commit before (14 -> 9 ms CPU for a 1-row commit).
FIND_AGGREGATES = """
WITH n AS MATERIALIZED (
    SELECT call_id, trace_id, span_id, parent_span_id FROM new_calls WHERE trace_id IS NOT NULL
),
stored AS MATERIALIZED (
    SELECT call_id, trace_id, span_id, parent_span_id FROM model_calls
    WHERE trace_id IN (SELECT trace_id FROM n)
)
SELECT stored.call_id FROM stored JOIN n
    ON stored.trace_id = n.trace_id AND stored.span_id = n.parent_span_id
UNION
SELECT n.call_id FROM n JOIN stored
    ON stored.trace_id = n.trace_id AND stored.parent_span_id = n.span_id
"""
DELETE_AGGREGATES = (
    "DELETE FROM model_calls WHERE call_id IN (SELECT call_id FROM aggregates) RETURNING call_id, run_id"
)
#: Recount the ``run_totals`` of the runs in ``recount`` (run_id) from the stored rows.
DELETE_RECOUNT_TOTALS = "DELETE FROM run_totals WHERE run_id IN (SELECT run_id FROM recount)"
RECOUNTED_TOTALS = totals_from(
    "(SELECT * FROM model_calls WHERE run_id IN (SELECT run_id FROM recount))",
    "(SELECT * FROM run_records WHERE run_id IN (SELECT run_id FROM recount))",
    "(SELECT * FROM budget_events WHERE run_id IN (SELECT run_id FROM recount))",
)
INSERT_RECOUNT_TOTALS = "INSERT INTO run_totals BY NAME " + RECOUNTED_TOTALS + " RETURNING *"

#: The full rebuild (after a bulk load; also the reference the incremental merge must equal).
DELETE_ALL_RUN_TOTALS = "DELETE FROM run_totals"
INSERT_ALL_RUN_TOTALS = "INSERT INTO run_totals BY NAME " + totals_from(
    "model_calls", "run_records", "budget_events"
)
DELETE_ALL_RUNS = "DELETE FROM runs"
INSERT_ALL_RUNS = "INSERT INTO runs BY NAME " + runs_from("run_totals")
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
LAKE_INSERT_CALLS = f"INSERT INTO model_calls BY NAME SELECT {WITH_RUN_KEY} FROM new_calls"
LAKE_NEW_EVENTS = (
    "SELECT b.* FROM batch_events b WHERE NOT EXISTS "
    "(SELECT 1 FROM budget_events e WHERE e.event_id = b.event_id)"
)
LAKE_INSERT_EVENTS = f"INSERT INTO budget_events BY NAME SELECT {WITH_RUN_KEY} FROM new_events"


def _lake_new_records() -> str:
    changed = " OR ".join(f"r.{c} IS DISTINCT FROM b.{c}" for c in RECORD_VALUES)
    return (
        "SELECT b.* FROM batch_records b LEFT JOIN run_records r ON r.run_id = b.run_id "
        f"WHERE r.run_id IS NULL OR {changed}"
    )


#: Run records not stored yet or whose values changed (a newer record replaces the stored one).
LAKE_NEW_RECORDS = _lake_new_records()
LAKE_DELETE_RECORDS = "DELETE FROM run_records WHERE run_id IN (SELECT run_id FROM new_records)"
LAKE_INSERT_RECORDS = "INSERT INTO run_records BY NAME SELECT * FROM new_records"


def _lake_merged_totals() -> str:
    sets = merged_totals_sets("o", "n")
    columns = ", ".join(
        expression.split(" = ", 1)[1] + " AS " + expression.split(" = ", 1)[0] for expression in sets
    )
    return (
        f"SELECT n.run_id, {columns} FROM ("
        + totals_from("new_calls", "new_records", "new_events")
        + ") n LEFT JOIN run_totals o ON o.run_id = n.run_id"
    )


#: The merged ``run_totals`` rows of the runs the batch touches (stored row + new aggregates).
LAKE_MERGED_TOTALS = _lake_merged_totals()
LAKE_DELETE_TOUCHED_TOTALS = "DELETE FROM run_totals WHERE run_id IN (SELECT run_id FROM touched)"
LAKE_INSERT_TOUCHED_TOTALS = "INSERT INTO run_totals BY NAME SELECT * FROM touched"
LAKE_RUNS_OF_TOUCHED = runs_from("touched")
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
