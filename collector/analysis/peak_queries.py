"""Named SQL of the what-if fast path (``budgetlens.analysis.whatif_peaks`` and ``whatif_walk``):
the runs some budget may stop, read once whatever the number of budgets, the call-by-call stream
of only the runs that must be walked, and the budget-independent totals per task type.

Built from the fragments of ``budgetlens.analysis.replay_queries`` (the full replay), so both
paths test the same candidates and read the same stream; same conventions (named parameters,
the ``filtered`` CTE, text assembled once at import).
"""

from __future__ import annotations

import re
import uuid

from budgetlens.analysis.queries import FILTERED
from budgetlens.analysis.replay_queries import (
    BUDGET_CTE,
    LIMIT_COLUMNS,
    MAY_STOP,
    STREAM_CTES,
    TASK_TOTALS_CTE,
    UNDER_CTES,
    WALKED_RUNS,
)
from budgetlens.store.schema import RUN_KEY

#: The filtered runs some budget of ``$b_*`` may stop (the ``under`` runs of ``REPLAY_RUNS``, once
#: each, not once per budget), in no particular order: what the ``runs`` rollup says about them
#: (calls, totals, stop reason, the limits they ran under) and ``walked`` (a candidate of
#: ``REPLAY_RUNS``: its calls are read and replayed, by its integer key, ``WALK_CALLS`` from
#: ``UNDER_TABLE``; ``tool_events``: its ``budgetlens.tool_call`` events). One pass over the runs (their call peaks are on their ``runs`` rows: no join with
#: ``run_totals``), whatever the number of budgets; every run not listed completes under every
#: budget.
UNDER_RUNS = f"""
WITH {FILTERED},
{BUDGET_CTE},
{UNDER_CTES},
kept AS (  -- a NULL test (no such limit) keeps no run: no coalesce over 1M rows
    SELECT u.* FROM probe u WHERE {WALKED_RUNS} OR {MAY_STOP}
),
flagged AS (
    SELECT u.*, coalesce({WALKED_RUNS}, false) AS walked FROM kept u
)
SELECT r.run_id, r.run_task_type AS task_type, r.run_start AS start_utc, r.recorded_stop_reason,
       CAST(r.calls AS DOUBLE) AS calls, CAST(r.run_tool_calls AS DOUBLE) AS run_tool_calls,
       CAST(r.run_total_tokens AS DOUBLE) AS run_total_tokens,
       CAST(r.run_input_tokens AS DOUBLE) AS run_input_tokens,
       CAST(r.run_output_tokens AS DOUBLE) AS run_output_tokens,
       CAST(r.run_turns AS DOUBLE) AS run_turns, r.run_cost_usd, r.run_duration_s,
       {", ".join(f"CAST(r.{c} AS DOUBLE) AS {c}" for c in LIMIT_COLUMNS)},
       r.walked,
       CASE WHEN r.walked THEN coalesce(r.tool_events, 0) ELSE 0 END AS tool_events
FROM flagged r
"""


#: Stream rows of a run up to which its running USD is summed by the caller (``whatif_walk``):
#: DuckDB's window sum adds a frame that lies within one leaf block of its segment tree (16 rows)
#: left to right, as numpy's ``cumsum`` does, so both give the same bits there
#: (``test_whatif_walk`` pins this); a longer run's running USD comes from the window itself.
SHORT_STREAM_ROWS = 16


#: ``UNDER_RUNS`` kept for the walk that follows (a temporary table of the read connection, in
#: memory, as the full replay's ``REPLAY_TABLE``; through a collector's endpoint, in its session):
#: the walk reads the walked runs' keys, starts and lengths from it, so nothing per run goes
#: back to SQL as a parameter and no run id is hashed in Python. A run's position (``ui``) in
#: the caller's arrays is its ``rowid`` less the table's first (``UNDER_UI``): a table created
#: inside an open transaction (a DuckLake reader, a reader in the collector's process) numbers
#: its rows from DuckDB's transaction-local base (2^55), not from 0. The statements on it name it
#: ``UNDER_TABLE``; each walk gives its own table a name of its own (``under_table``) and runs
#: them ``on`` it, so two renders on one connection (or one collector session) never read or
#: drop each other's runs.
UNDER_TABLE = "whatif_under"
CREATE_UNDER_TABLE = f"CREATE TEMP TABLE {UNDER_TABLE} AS {UNDER_RUNS}"
UNDER_UI = f"rowid - (SELECT min(rowid) FROM {UNDER_TABLE})"
#: The kept runs with their position ``ui`` (the caller orders by it: a scan's order is not relied on).
READ_UNDER_TABLE = f"SELECT {UNDER_UI} AS ui, * FROM {UNDER_TABLE}"
DROP_UNDER_TABLE = f"DROP TABLE IF EXISTS {UNDER_TABLE}"


def under_table() -> str:
    """A fresh name for one walk's ``UNDER_TABLE`` (``UNDER_TABLE`` and 32 hex digits)."""
    return f"{UNDER_TABLE}_{uuid.uuid4().hex}"


def on(statement: str, table: str) -> str:
    """``statement`` (one of this module's on ``UNDER_TABLE``) on the table named ``table``
    (``under_table``): the name is ours, never a user's value."""
    if not _OWN_NAME.fullmatch(table):
        raise ValueError(f"not a walk's table name: {table!r}")
    return _NAMED.sub(table, statement)


_OWN_NAME = re.compile(rf"{UNDER_TABLE}_[0-9a-f]{{32}}")
_NAMED = re.compile(rf"\b{UNDER_TABLE}\b")


def _tagged_stream(key: str) -> str:
    """``STREAM_CTES``' stream of the walked runs as ``tagged``: each call and tool-call event
    joined once with its run's ``candidates`` row (ui, run_start, long) on ``key`` (one join,
    not a semi join and a second join back)."""
    stream = STREAM_CTES.split("),\ncum AS (")[0] + ")"
    swaps = {
        "stream AS (": "tagged AS (",
        "SELECT c.run_id, c.start_utc AS ts": "SELECT k.ui, k.run_start, k.long, c.start_utc AS ts",
        "SEMI JOIN candidates k ON c.run_id = k.run_id": f"JOIN candidates k ON c.{key} = k.run_key",
        "SELECT e.run_id, e.ts_utc": "SELECT k.ui, k.run_start, k.long, e.ts_utc",
        "SEMI JOIN candidates k ON e.run_id = k.run_id": f"JOIN candidates k ON e.{key} = k.run_key",
    }
    for old, replacement in swaps.items():
        if stream.count(old) != 1:
            raise AssertionError(f"STREAM_CTES changed: {old!r}")  # the import fails, not a query
        stream = stream.replace(old, replacement)
    return stream


def _walk_calls(key: str) -> str:
    # ``key``: run_key (UBIGINT, computed here from the run id) or run_id (constants of this module)
    candidate_key = RUN_KEY if key == "run_key" else "run_id"
    return f"""
WITH candidates AS (
    SELECT {candidate_key} AS run_key, CAST({UNDER_UI} AS INTEGER) AS ui, start_utc AS run_start,
           $all_long OR coalesce(calls, 0) + coalesce(tool_events, 0) > {SHORT_STREAM_ROWS} AS long
    FROM {UNDER_TABLE} WHERE walked
),
{_tagged_stream(key)},
cum AS (
    SELECT ui, run_start, ts, is_call, turn, tok, inp, outp, cost, sum(cost) OVER w - cost AS cost_before
    FROM tagged WHERE long
    WINDOW w AS (PARTITION BY ui ORDER BY ts, is_call, turn ROWS UNBOUNDED PRECEDING)
    UNION ALL
    SELECT ui, run_start, ts, is_call, turn, tok, inp, outp, cost, NULL FROM tagged WHERE NOT long
)
SELECT ui, CAST(is_call AS BIGINT) AS is_call, epoch(ts - run_start) AS time_s,
       CAST(tok AS BIGINT) AS tok, CAST(inp AS BIGINT) AS inp, CAST(outp AS BIGINT) AS outp,
       CAST(cost AS DOUBLE) AS cost, CAST(cost_before AS DOUBLE) AS cost_before
FROM cum
ORDER BY ui, ts, is_call, turn
"""


#: The call-by-call stream of the walked runs of ``UNDER_TABLE`` (``ui``: their ``rowid``s there),
#: their model calls and ``budgetlens.tool_call`` events in the replay's order (``REPLAY_RUNS``'
#: ``cum``): ui, is_call (1 = a model call, 0 = a tool call), time_s (seconds since the run's
#: start), tok, inp, outp, cost (a call's charge, as ``STREAM_CTES``; 0 for a tool call) and
#: cost_before (USD of the run's calls before it, summed as the reference sums it; NULL for a
#: short run, one of at most ``SHORT_STREAM_ROWS`` calls and tool-call events by its counts,
#: whose running USD the caller sums; ``$all_long``: every run through the window). The
#: running counts and token sums are the caller's (integers: exact in any order). Reads the
#: calls and events by integer key only (``schema.RUN_KEY`` of the walked runs' ids); only the
#: long runs' rows go through a window.
WALK_CALLS = _walk_calls("run_key")
#: ``WALK_CALLS`` by run id: for keys two run ids share.
WALK_CALLS_BY_ID = _walk_calls("run_id")

#: Per task type of the filtered runs: runs, runs_without_calls, spent_tokens, spent_cost_usd
#: (the replay summary's budget-independent columns), NULL task type last.
TASK_TOTALS = f"WITH {FILTERED},\n{TASK_TOTALS_CTE}\nSELECT * FROM task_totals ORDER BY task_type NULLS LAST"
