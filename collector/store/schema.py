"""The DuckDB schema: column lists (the data contract) and ordered migrations.

Tables (every column carries its unit: ``_tokens``, ``_usd``, ``_s``, ``_utc``; timestamps are
naive ``TIMESTAMP`` values in UTC):

- ``model_calls``: one row per model call (an OTel GenAI span, a guard turn, an imported call).
  Primary key ``call_id`` (``<trace id>:<span id>``, or an importer's span id when there is no
  trace): a span is unique only within its trace; a re-sent span is stored once. ``quality``:
  comma-separated data-quality flags (``budgetlens.semconv.QUALITY_FLAGS``), NULL when clean.
  ``price_version`` names the prices that priced a row budgetlens priced (``usage_details``: the
  billed usage beyond the token columns, JSON; ``unpriced_parts``: what had no price), so only
  ``budgetlens reprice`` changes an old cost.
- ``run_records``: what a run span (or an importer's per-run summary) says about a run: limits,
  stop reason, retryable, and totals when the source has them. Primary key ``run_id``.
- ``budget_events``: warnings, downgrades, summaries, tool calls (a paid one's fee) and stops. Key ``event_id``.
- ``runs``: the rollup the dashboard and CLI read, one row per run (primary key ``run_id``; its
  ``quality`` joins the flags of its calls and record),
  upserted for the runs a batch changes (see ``budgetlens.store.sql``). Values from ``run_records``
  win over values aggregated from ``model_calls``.
- ``run_totals``: the incremental state behind ``runs``, one row per run (primary key
  ``run_id``): the run's record as a STRUCT (``record``, NULL until one arrives; fields = the
  ``run_records`` columns but ``run_id``), the aggregates of its calls (``c_*``: sums add, min/max
  merge, the model list merges) and the counts of its events (``e_*``). A batch merges only its
  new rows into it, so a commit never scans ``model_calls`` (``RUN_TOTALS_COLUMNS``).
- Attribution (issue 19, ``budgetlens.attribution``): ``team``, ``user_id``, ``session_id`` and
  ``tags`` (JSON object) on ``model_calls``, ``run_records`` and ``runs``; ``run_totals`` keeps
  them as ``r_*`` (the record's) and ``c_*`` (the smallest non-NULL of the calls').
- ``run_model_rollup`` (issue 25): one row per run and model (tokens, cost, calls, unpriced and
  unknown-usage calls, a latency sketch), kept by the writer with ``runs``
  (``budgetlens.store.rollups``); the pages read it instead of ``model_calls``.
- ``schema_migrations``: the versions applied, in order.
"""

from __future__ import annotations

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.limits import LIMITS
from budgetlens.store import rollups

#: The ``limit_*`` columns of ``run_records`` and ``runs``, from the guard's one limit table.
LIMIT_COLUMNS: tuple[str, ...] = tuple(spec.store_column for spec in LIMITS)

MODEL_CALL_COLUMNS: tuple[str, ...] = (
    "span_id",
    "run_id",
    "trace_id",
    "parent_span_id",
    "source",
    "service_name",
    "task_type",
    "operation_name",
    "provider_name",
    "request_model",
    "response_model",
    "start_utc",
    "end_utc",
    "duration_s",
    "turn",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "reserved_tokens",
    "used_tokens",
    "remaining_tokens",
    "cost_usd",
    "usage_status",
    "is_subagent",
    "error_type",
    "quality",
    "call_id",
    # issue 9: which prices priced the row, the billed usage beyond the token columns, what
    # had no price (see the module docstring)
    "price_version",
    "usage_details",
    "unpriced_parts",
    # issue 22: the source's own identity of the response (an importer's; NULL from OTLP): a
    # copy of a stored response (a continued session imported later) is not stored again
    "response_id",
    # issue 19: who the call is for (see budgetlens.attribution)
    *ATTRIBUTION_COLUMNS,
)

RUN_RECORD_COLUMNS: tuple[str, ...] = (
    "run_id",
    "trace_id",
    "source",
    "service_name",
    "task_type",
    "agent_name",
    "model",
    "start_utc",
    "end_utc",
    "duration_s",
    "turns",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "stop_reason",
    "usage_status",
    "retryable",
    *LIMIT_COLUMNS,
    "quality",
    *ATTRIBUTION_COLUMNS,
    "parent_run_id",  # issue 21: the run a child run's budget was carved from (RunBudget.child)
)

BUDGET_EVENT_COLUMNS: tuple[str, ...] = (
    "event_id",
    "run_id",
    "span_id",
    "ts_utc",
    "name",
    "reason",
    "from_model",
    "to_model",
    "tool_name",
    "reserved_tokens",
    "used_tokens",
    "remaining_tokens",
    "percent",
    "tool_cost_usd",  # issue 21: a paid tool call's fee (USD)
)

RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "trace_id",
    "source",
    "service_name",
    "task_type",
    "models",
    "start_utc",
    "end_utc",
    "duration_s",
    "turns",
    "tool_calls",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "unpriced_calls",
    "unknown_usage_calls",
    "stop_reason",
    "usage_status",
    "retryable",
    *LIMIT_COLUMNS,
    "warnings",
    "downgrades",
    "summaries",
    "quality",
    *ATTRIBUTION_COLUMNS,
    "tool_cost_usd",  # issue 21: the run's paid tool fees (USD), apart from cost_usd (model cost)
    "parent_run_id",  # issue 21: the parent run of a child run (NULL: a top-level run)
)

#: Columns of ``run_totals`` (see the module docstring); ``record`` holds a run_records row.
RUN_TOTALS_COLUMNS: tuple[str, ...] = (
    "run_id",
    "record",
    "c_trace_id",
    "c_source",
    "c_service_name",
    "c_task_type",
    "c_models",
    "c_start_utc",
    "c_end_utc",
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
    "c_any_error",
    "e_warnings",
    "e_downgrades",
    "e_summaries",
    "e_tool_calls",
    "c_quality",
    "r_quality",
    *(f"r_{column}" for column in ATTRIBUTION_COLUMNS),
    *(f"c_{column}" for column in ATTRIBUTION_COLUMNS),
    "e_tool_cost_usd",
    "r_parent_run_id",
)

_V1 = """
CREATE TABLE model_calls (
    span_id VARCHAR PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    trace_id VARCHAR,
    parent_span_id VARCHAR,
    source VARCHAR NOT NULL,
    service_name VARCHAR,
    task_type VARCHAR,
    operation_name VARCHAR,
    provider_name VARCHAR,
    request_model VARCHAR,
    response_model VARCHAR,
    start_utc TIMESTAMP,
    end_utc TIMESTAMP,
    duration_s DOUBLE,
    turn INTEGER,
    input_tokens BIGINT,
    output_tokens BIGINT,
    total_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_tokens BIGINT,
    reasoning_tokens BIGINT,
    reserved_tokens BIGINT,
    used_tokens BIGINT,
    remaining_tokens BIGINT,
    cost_usd DOUBLE,
    usage_status VARCHAR NOT NULL,
    is_subagent BOOLEAN NOT NULL DEFAULT false,
    error_type VARCHAR
);
CREATE TABLE run_records (
    run_id VARCHAR PRIMARY KEY,
    trace_id VARCHAR,
    source VARCHAR NOT NULL,
    service_name VARCHAR,
    task_type VARCHAR,
    agent_name VARCHAR,
    model VARCHAR,
    start_utc TIMESTAMP,
    end_utc TIMESTAMP,
    duration_s DOUBLE,
    turns INTEGER,
    tool_calls INTEGER,
    input_tokens BIGINT,
    output_tokens BIGINT,
    total_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_tokens BIGINT,
    reasoning_tokens BIGINT,
    cost_usd DOUBLE,
    stop_reason VARCHAR,
    usage_status VARCHAR,
    retryable BOOLEAN,
    limit_total_tokens BIGINT,
    limit_input_tokens BIGINT,
    limit_output_tokens BIGINT,
    limit_turns INTEGER,
    limit_tool_calls INTEGER,
    limit_duration_s DOUBLE,
    limit_cost_usd DOUBLE
);
CREATE TABLE budget_events (
    event_id VARCHAR PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    span_id VARCHAR,
    ts_utc TIMESTAMP,
    name VARCHAR NOT NULL,
    reason VARCHAR,
    from_model VARCHAR,
    to_model VARCHAR,
    tool_name VARCHAR,
    reserved_tokens BIGINT,
    used_tokens BIGINT,
    remaining_tokens BIGINT,
    percent DOUBLE
);
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY,
    trace_id VARCHAR,
    source VARCHAR,
    service_name VARCHAR,
    task_type VARCHAR,
    models VARCHAR,
    start_utc TIMESTAMP,
    end_utc TIMESTAMP,
    duration_s DOUBLE,
    turns INTEGER,
    tool_calls INTEGER,
    model_calls INTEGER,
    input_tokens BIGINT,
    output_tokens BIGINT,
    total_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_tokens BIGINT,
    reasoning_tokens BIGINT,
    cost_usd DOUBLE,
    unpriced_calls INTEGER,
    unknown_usage_calls INTEGER,
    stop_reason VARCHAR,
    usage_status VARCHAR,
    retryable BOOLEAN,
    limit_total_tokens BIGINT,
    limit_input_tokens BIGINT,
    limit_output_tokens BIGINT,
    limit_turns INTEGER,
    limit_tool_calls INTEGER,
    limit_duration_s DOUBLE,
    limit_cost_usd DOUBLE,
    warnings INTEGER,
    downgrades INTEGER,
    summaries INTEGER
);
CREATE TABLE run_totals (
    run_id VARCHAR PRIMARY KEY,
    record STRUCT(
        trace_id VARCHAR, source VARCHAR, service_name VARCHAR, task_type VARCHAR,
        agent_name VARCHAR, model VARCHAR, start_utc TIMESTAMP, end_utc TIMESTAMP,
        duration_s DOUBLE, turns INTEGER, tool_calls INTEGER, input_tokens BIGINT,
        output_tokens BIGINT, total_tokens BIGINT, cache_read_tokens BIGINT,
        cache_write_tokens BIGINT, reasoning_tokens BIGINT, cost_usd DOUBLE,
        stop_reason VARCHAR, usage_status VARCHAR, retryable BOOLEAN,
        limit_total_tokens BIGINT, limit_input_tokens BIGINT, limit_output_tokens BIGINT,
        limit_turns INTEGER, limit_tool_calls INTEGER, limit_duration_s DOUBLE,
        limit_cost_usd DOUBLE
    ),
    c_trace_id VARCHAR,
    c_source VARCHAR,
    c_service_name VARCHAR,
    c_task_type VARCHAR,
    c_models VARCHAR[],
    c_start_utc TIMESTAMP,
    c_end_utc TIMESTAMP,
    c_model_calls BIGINT,
    c_input_tokens BIGINT,
    c_output_tokens BIGINT,
    c_total_tokens BIGINT,
    c_cache_read_tokens BIGINT,
    c_cache_write_tokens BIGINT,
    c_reasoning_tokens BIGINT,
    c_cost_usd DOUBLE,
    c_unpriced_calls BIGINT,
    c_unknown_usage_calls BIGINT,
    c_any_error BOOLEAN,
    e_warnings BIGINT,
    e_downgrades BIGINT,
    e_summaries BIGINT,
    e_tool_calls BIGINT
);
"""

# issue 15: a call is identified by (trace id, span id): ``call_id`` ("<trace hex>:<span hex>",
# or the importer's span id when there is no trace) replaces ``span_id`` as the key; data
# quality flags (``quality``: comma-separated flag names, NULL when clean) on calls, run
# records and runs, with their per-run state in run_totals.
_V2_QUALITY_AND_SPAN_IDENTITY = """
CREATE TABLE model_calls_v2 (
    call_id VARCHAR PRIMARY KEY,
    span_id VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    trace_id VARCHAR,
    parent_span_id VARCHAR,
    source VARCHAR NOT NULL,
    service_name VARCHAR,
    task_type VARCHAR,
    operation_name VARCHAR,
    provider_name VARCHAR,
    request_model VARCHAR,
    response_model VARCHAR,
    start_utc TIMESTAMP,
    end_utc TIMESTAMP,
    duration_s DOUBLE,
    turn INTEGER,
    input_tokens BIGINT,
    output_tokens BIGINT,
    total_tokens BIGINT,
    cache_read_tokens BIGINT,
    cache_write_tokens BIGINT,
    reasoning_tokens BIGINT,
    reserved_tokens BIGINT,
    used_tokens BIGINT,
    remaining_tokens BIGINT,
    cost_usd DOUBLE,
    usage_status VARCHAR NOT NULL,
    is_subagent BOOLEAN NOT NULL DEFAULT false,
    error_type VARCHAR,
    quality VARCHAR
);
INSERT INTO model_calls_v2 BY NAME
    SELECT coalesce(trace_id || ':', '') || span_id AS call_id, * FROM model_calls;
DROP TABLE model_calls;
ALTER TABLE model_calls_v2 RENAME TO model_calls;
ALTER TABLE run_records ADD COLUMN quality VARCHAR;
ALTER TABLE runs ADD COLUMN quality VARCHAR;
ALTER TABLE run_totals ADD COLUMN c_quality VARCHAR[];
ALTER TABLE run_totals ADD COLUMN r_quality VARCHAR
"""

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
_V8_RUN_MODEL_ROLLUP = rollups.CREATE + ";\n" + rollups.INSERT_ALL

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
)

SCHEMA_VERSION = MIGRATIONS[-1][0]
