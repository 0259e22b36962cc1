"""The store's ordered migrations: (version, SQL script), applied by ``budgetlens.store.connection``.

Append only; never edit an applied one. Version 1's tables are written from the column lists
below (frozen: the columns of version 1, whatever ``budgetlens.store.schema`` lists today).
"""

from __future__ import annotations

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.store import rollups
from budgetlens.store.run_totals import FILL_RUN_PEAKS
from budgetlens.store.schema import RUN_KEY, RUN_PEAK_COLUMNS

#: (name, type and constraints) of a column, as a CREATE TABLE writes it.
_Column = tuple[str, str]

_V1_TOKENS: tuple[_Column, ...] = tuple(
    (f"{part}_tokens", "BIGINT")
    for part in ("input", "output", "total", "cache_read", "cache_write", "reasoning")
)
_V1_TIMES: tuple[_Column, ...] = (
    ("start_utc", "TIMESTAMP"),
    ("end_utc", "TIMESTAMP"),
    ("duration_s", "DOUBLE"),
)
_V1_GUARD_TOKENS: tuple[_Column, ...] = tuple(
    (f"{part}_tokens", "BIGINT") for part in ("reserved", "used", "remaining")
)
_V1_OUTCOME: tuple[_Column, ...] = (
    ("stop_reason", "VARCHAR"),
    ("usage_status", "VARCHAR"),
    ("retryable", "BOOLEAN"),
    ("limit_total_tokens", "BIGINT"),
    ("limit_input_tokens", "BIGINT"),
    ("limit_output_tokens", "BIGINT"),
    ("limit_turns", "INTEGER"),
    ("limit_tool_calls", "INTEGER"),
    ("limit_duration_s", "DOUBLE"),
    ("limit_cost_usd", "DOUBLE"),
)
#: ``model_calls`` of version 1 after its key (``span_id``; version 2 keys it by ``call_id``).
_V1_CALL_BODY: tuple[_Column, ...] = (
    ("run_id", "VARCHAR NOT NULL"),
    ("trace_id", "VARCHAR"),
    ("parent_span_id", "VARCHAR"),
    ("source", "VARCHAR NOT NULL"),
    *((name, "VARCHAR") for name in ("service_name", "task_type", "operation_name", "provider_name")),
    ("request_model", "VARCHAR"),
    ("response_model", "VARCHAR"),
    *_V1_TIMES,
    ("turn", "INTEGER"),
    *_V1_TOKENS,
    *_V1_GUARD_TOKENS,
    ("cost_usd", "DOUBLE"),
    ("usage_status", "VARCHAR NOT NULL"),
    ("is_subagent", "BOOLEAN NOT NULL DEFAULT false"),
    ("error_type", "VARCHAR"),
)
_V1_RECORD_FIELDS: tuple[_Column, ...] = (
    ("trace_id", "VARCHAR"),
    ("source", "VARCHAR NOT NULL"),
    ("service_name", "VARCHAR"),
    ("task_type", "VARCHAR"),
    ("agent_name", "VARCHAR"),
    ("model", "VARCHAR"),
    *_V1_TIMES,
    ("turns", "INTEGER"),
    ("tool_calls", "INTEGER"),
    *_V1_TOKENS,
    ("cost_usd", "DOUBLE"),
    *_V1_OUTCOME,
)
_V1_EVENTS: tuple[_Column, ...] = (
    ("event_id", "VARCHAR PRIMARY KEY"),
    ("run_id", "VARCHAR NOT NULL"),
    ("span_id", "VARCHAR"),
    ("ts_utc", "TIMESTAMP"),
    ("name", "VARCHAR NOT NULL"),
    *((name, "VARCHAR") for name in ("reason", "from_model", "to_model", "tool_name")),
    *_V1_GUARD_TOKENS,
    ("percent", "DOUBLE"),
)
_V1_RUNS: tuple[_Column, ...] = (
    ("run_id", "VARCHAR PRIMARY KEY"),
    *((name, "VARCHAR") for name in ("trace_id", "source", "service_name", "task_type", "models")),
    *_V1_TIMES,
    *((name, "INTEGER") for name in ("turns", "tool_calls", "model_calls")),
    *_V1_TOKENS,
    ("cost_usd", "DOUBLE"),
    ("unpriced_calls", "INTEGER"),
    ("unknown_usage_calls", "INTEGER"),
    *_V1_OUTCOME,
    *((name, "INTEGER") for name in ("warnings", "downgrades", "summaries")),
)
#: The STRUCT ``run_totals.record`` of version 1: the record's fields, without constraints.
_V1_RECORD_STRUCT = (
    "STRUCT("
    + ", ".join(f"{name} {kind.removesuffix(' NOT NULL')}" for name, kind in _V1_RECORD_FIELDS)
    + ")"
)
_V1_TOTALS: tuple[_Column, ...] = (
    ("run_id", "VARCHAR PRIMARY KEY"),
    ("record", _V1_RECORD_STRUCT),
    *((f"c_{name}", "VARCHAR") for name in ("trace_id", "source", "service_name", "task_type")),
    ("c_models", "VARCHAR[]"),
    ("c_start_utc", "TIMESTAMP"),
    ("c_end_utc", "TIMESTAMP"),
    ("c_model_calls", "BIGINT"),
    *((f"c_{name}", kind) for name, kind in _V1_TOKENS),
    ("c_cost_usd", "DOUBLE"),
    ("c_unpriced_calls", "BIGINT"),
    ("c_unknown_usage_calls", "BIGINT"),
    ("c_any_error", "BOOLEAN"),
    *((f"e_{name}", "BIGINT") for name in ("warnings", "downgrades", "summaries", "tool_calls")),
)


def _create(table: str, columns: tuple[_Column, ...]) -> str:
    return f"CREATE TABLE {table} (\n    " + ",\n    ".join(f"{n} {k}" for n, k in columns) + "\n)"


_V1 = ";\n".join(
    (
        _create("model_calls", (("span_id", "VARCHAR PRIMARY KEY"), *_V1_CALL_BODY)),
        _create("run_records", (("run_id", "VARCHAR PRIMARY KEY"), *_V1_RECORD_FIELDS)),
        _create("budget_events", _V1_EVENTS),
        _create("runs", _V1_RUNS),
        _create("run_totals", _V1_TOTALS),
    )
)

# issue 15: a call is identified by (trace id, span id): ``call_id`` ("<trace hex>:<span hex>",
# or the importer's span id when there is no trace) replaces ``span_id`` as the key; data
# quality flags (``quality``: comma-separated flag names, NULL when clean) on calls, run
# records and runs, with their per-run state in run_totals.
_V2_QUALITY_AND_SPAN_IDENTITY = (
    _create(
        "model_calls_v2",
        (
            ("call_id", "VARCHAR PRIMARY KEY"),
            ("span_id", "VARCHAR NOT NULL"),
            *_V1_CALL_BODY,
            ("quality", "VARCHAR"),
        ),
    )
    + """;
INSERT INTO model_calls_v2 BY NAME
    SELECT coalesce(trace_id || ':', '') || span_id AS call_id, * FROM model_calls;
DROP TABLE model_calls;
ALTER TABLE model_calls_v2 RENAME TO model_calls;
ALTER TABLE run_records ADD COLUMN quality VARCHAR;
ALTER TABLE runs ADD COLUMN quality VARCHAR;
ALTER TABLE run_totals ADD COLUMN c_quality VARCHAR[];
ALTER TABLE run_totals ADD COLUMN r_quality VARCHAR
"""
)

# issue 9: model_calls.price_version ("genai-prices 0.2.3", "user:<file>#<sha>"; NULL when the
# source gave the cost or nothing priced the call), usage_details (JSON object of the Usage
# billing parts beyond the token columns: audio/image/video tokens, 1h cache writes, web
# searches, service tier) and unpriced_parts (comma-separated Usage fields the model had no
# price for: the call is partly unpriced). `budgetlens reprice` recomputes costs from them.
_V3_PRICE_VERSION = """
ALTER TABLE model_calls ADD COLUMN price_version VARCHAR;
ALTER TABLE model_calls ADD COLUMN usage_details VARCHAR;
ALTER TABLE model_calls ADD COLUMN unpriced_parts VARCHAR
"""

# issue 22: model_calls.response_id, the source's identity of one API response (Claude Code:
# message id + request id), the same in every transcript that copies the response.
_V4_RESPONSE_ID = """
ALTER TABLE model_calls ADD COLUMN response_id VARCHAR
"""

# issue 19: attribution (budgetlens.attribution): team (= tenant), user_id, session_id and tags
# (a JSON object of string values, sorted keys; NULL when none) on calls, run records and runs;
# run_totals keeps the record's (r_*) and the smallest of the calls' (c_*) beside the record
# STRUCT, as r_quality, so the STRUCT keeps its fields.
_V5_ATTRIBUTION = ";\n".join(
    f"ALTER TABLE {table} ADD COLUMN {prefix}{column} VARCHAR"
    for table, prefix in (
        ("model_calls", ""),
        ("run_records", ""),
        ("runs", ""),
        ("run_totals", "r_"),
        ("run_totals", "c_"),
    )
    for column in ATTRIBUTION_COLUMNS
)

# issue 21: a paid tool call's fee (NULL: free or another event), its sum per run, the run's tool spend.
_V6_TOOL_COST = """ALTER TABLE budget_events ADD COLUMN tool_cost_usd DOUBLE;
ALTER TABLE run_totals ADD COLUMN e_tool_cost_usd DOUBLE; ALTER TABLE runs ADD COLUMN tool_cost_usd DOUBLE"""

# issue 21: a child run's parent (RunBudget.child, span attribute budgetlens.parent_run_id) on its
# record and run; run_totals keeps the record's beside the STRUCT, as r_quality.
_V7_PARENT_RUN = """ALTER TABLE run_records ADD COLUMN parent_run_id VARCHAR;
ALTER TABLE run_totals ADD COLUMN r_parent_run_id VARCHAR; ALTER TABLE runs ADD COLUMN parent_run_id VARCHAR"""

# issue 25: the per run x model rollup the pages read instead of model_calls (tokens, cost, calls,
# latency sketch; budgetlens.store.rollups), back-filled from the stored calls.
_V8_RUN_MODEL_ROLLUP = rollups.CREATE + ";\n" + rollups.INSERT_ALL_V8

# issue 23: the content fingerprint of a call's span (signed 64-bit BLAKE2b prefix, NULL when
# not from OTLP), so the loader reports a resend with other content instead of dropping it.
_V9_CONTENT_DIGEST = "ALTER TABLE model_calls ADD COLUMN content_digest BIGINT"
# issue 25: the run's integer key (``schema.RUN_KEY``) on calls and events, so that the what-if
# reads the few runs it walks by an integer instead of comparing every call's run id; back-filled.
_V10_RUN_KEY = f"""ALTER TABLE model_calls ADD COLUMN run_key UBIGINT;
UPDATE model_calls SET run_key = {RUN_KEY};
ALTER TABLE budget_events ADD COLUMN run_key UBIGINT;
UPDATE budget_events SET run_key = {RUN_KEY}"""

# issue 25: the run's call peaks on runs (schema.RUN_PEAK_COLUMNS: run_totals' aggregates that
# bound a what-if replay's running sums), so the what-if finds its candidates without joining
# run_totals; back-filled from run_totals.
_PEAK_TYPES = {"calls_end_utc": "TIMESTAMP", "calls_cost_usd": "DOUBLE"}
_V11_RUN_PEAKS = ";\n".join(
    [f"ALTER TABLE runs ADD COLUMN {c} {_PEAK_TYPES.get(c, 'BIGINT')}" for c in RUN_PEAK_COLUMNS]
    + [FILL_RUN_PEAKS]
)

# issue 25: the run's integer key (schema.RUN_KEY) on runs and on its rollup rows, so that the
# cost per model joins a multi-model run's rollup rows by an integer instead of its run id.
_V12_RUN_KEY_ON_RUNS = f"""ALTER TABLE runs ADD COLUMN run_key UBIGINT;
UPDATE runs SET run_key = {RUN_KEY};
ALTER TABLE {rollups.TABLE} ADD COLUMN run_key UBIGINT;
UPDATE {rollups.TABLE} SET run_key = {RUN_KEY}"""

#: Ordered migrations: (version, SQL script). Append only; never edit an applied one.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, _V1),
    (2, _V2_QUALITY_AND_SPAN_IDENTITY),  # issue 15: call identity (trace, span) and quality flags
    (3, _V3_PRICE_VERSION),  # issue 9: price version of each priced call
    (4, _V4_RESPONSE_ID),  # issue 22: a response copied into a later import is stored once
    (5, _V5_ATTRIBUTION),  # issue 19: team, user, session and tags of calls, records and runs
    (6, _V6_TOOL_COST),  # issue 21: paid tools' fees
    (7, _V7_PARENT_RUN),  # issue 21: sub-agent runs name their parent run
    (8, _V8_RUN_MODEL_ROLLUP),  # issue 25: per run x model rollup with a latency sketch
    (9, _V9_CONTENT_DIGEST),  # issue 23: a conflicting resend is reported, not lost to the key
    (10, _V10_RUN_KEY),  # issue 25: integer run key on calls and events
    (11, _V11_RUN_PEAKS),  # issue 25: a run's call peaks on runs (the what-if's candidate test)
    (12, _V12_RUN_KEY_ON_RUNS),  # issue 25: integer run key on runs and the run x model rollup
)

SCHEMA_VERSION = MIGRATIONS[-1][0]
