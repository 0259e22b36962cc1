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
- ``model_calls.content_digest`` (issue 23): the content fingerprint of the call's span (NULL for
  imported calls and rows stored before it); a span re-sent with another digest is reported
  (``budgetlens.store.resends``), an identical one is a silent dedupe.
- ``run_model_rollup`` (issue 25): one row per run and model (tokens, cost, calls, unpriced and
  unknown-usage calls, a latency sketch), kept by the writer with ``runs``
  (``budgetlens.store.rollups``); the pages read it instead of ``model_calls``.
- ``run_key`` (issue 25) on ``model_calls`` and ``budget_events``: the run's integer key,
  ``RUN_KEY`` of its ``run_id`` (the upper 64 bits of its MD5: the same in every store and
  process, no lookup when a row is written), filled by every insert and back-filled by schema
  version 10. The what-if reads the calls of the runs it walks by it; a key two run ids share is
  caught there (a walked run's rows then outnumber its counts) and read by run id instead.
  Schema version 12 adds it to ``runs`` and ``run_model_rollup`` (back-filled; written with
  each row): the cost per model joins a multi-model run's rollup rows by it
  (``budgetlens.analysis.rollup_queries.COST_BY_PERIOD_MODEL``, by run id where a key is shared
  or missing).
- The run's call peaks on ``runs`` (issue 25, ``RUN_PEAK_COLUMNS``): the ``run_totals`` aggregates
  of its calls and tool-call events that bound every running sum of a what-if replay (the end of
  its last call, its calls' cost and token sums and unknown-usage count, its
  ``budgetlens.tool_call`` events; NULL when none), so the what-if finds the runs a budget may stop from ``runs`` alone, without joining
  ``run_totals``. Written with the rest of the row (``budgetlens.store.run_totals.runs_from``);
  schema version 11 adds and back-fills them. Not part of ``RUN_COLUMNS`` (the exported run).
- ``schema_migrations``: the versions applied, in order (the migrations: ``budgetlens.store.migrations``).
"""

from __future__ import annotations

import hashlib

from budgetlens.attribution import ATTRIBUTION_COLUMNS
from budgetlens.limits import LIMITS

#: The token counts of a call, a run record, a run and a rollup row, in table order.
TOKEN_COLUMNS: tuple[str, ...] = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
#: What a rollup sums over a run's calls (``runs``; ``run_totals`` as ``c_*``; ``run_model_rollup``).
CALL_SUMS: tuple[str, ...] = (*TOKEN_COLUMNS, "cost_usd", "unpriced_calls", "unknown_usage_calls")
#: The event counts of ``run_totals`` (``budgetlens.warning``, ... ``budgetlens.tool_call``).
EVENT_COUNTS: tuple[str, ...] = ("e_warnings", "e_downgrades", "e_summaries", "e_tool_calls")


def run_key_of(run_id: str) -> str:
    """SQL of the integer key (UBIGINT) of the run id expression ``run_id`` (a column name)."""
    return f"md5_number_upper({run_id})"


def run_key(run_id: str) -> int:
    """The integer key (0 <= key < 2**64) of ``run_id`` as ``run_key_of`` computes it in SQL:
    DuckDB's ``md5_number_upper``, the first 8 bytes of the MD5 of its UTF-8, little-endian (a
    test compares both). For the few keys a reader needs without a DuckDB pass over its rows."""
    return int.from_bytes(hashlib.md5(run_id.encode("utf-8"), usedforsecurity=False).digest()[:8], "little")


#: The integer key of a run, from its ``run_id`` (SQL over a relation with a ``run_id`` column).
RUN_KEY = run_key_of("run_id")
#: Every column of a relation but ``run_key``, then its ``run_key`` (an insert's select list).
WITH_RUN_KEY = f"COLUMNS(c -> c <> 'run_key'), {RUN_KEY} AS run_key"

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
    *TOKEN_COLUMNS,
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
    # issue 23: the span's content fingerprint (budgetlens.otlp.memory.span_digest; NULL when
    # not from OTLP): a resend under the same ids with other content is reported, not lost
    "content_digest",
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
    *TOKEN_COLUMNS,
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
    *CALL_SUMS,
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

#: The call peaks of a run on ``runs`` (module docstring), each from its ``run_totals`` column.
RUN_PEAK_COLUMNS: dict[str, str] = {
    "calls_end_utc": "c_end_utc",
    "calls_cost_usd": "c_cost_usd",
    "calls_total_tokens": "c_total_tokens",
    "calls_input_tokens": "c_input_tokens",
    "calls_output_tokens": "c_output_tokens",
    "calls_unknown_usage": "c_unknown_usage_calls",
    "tool_events": "e_tool_calls",
}

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
    *(f"c_{column}" for column in CALL_SUMS),
    "c_any_error",
    *EVENT_COUNTS,
    "c_quality",
    "r_quality",
    *(f"r_{column}" for column in ATTRIBUTION_COLUMNS),
    *(f"c_{column}" for column in ATTRIBUTION_COLUMNS),
    "e_tool_cost_usd",
    "r_parent_run_id",
)
