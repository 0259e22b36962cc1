"""Named SQL of the evidence tools (design §6): the what-if replay, the censoring input, runaway
runs and drift. Read by ``budgetlens.analysis.whatif``, ``censoring``, ``runaways`` and ``drift``.

Same conventions as ``budgetlens.analysis.queries``: values reach SQL only as named parameters
(``$name``), the run filter is the ``filtered`` CTE (``queries.FILTERED``) and the text is
assembled once, at import, from constant fragments.

The candidate budget reaches the replay as parallel lists, one entry per task type
(``$b_task_type`` and one ``$b_<limit key>`` list per key of
``budgetlens.guard.preset_file.LIMIT_KEYS``; NULL = no such limit); DuckDB unnests them side by
side into the ``budget`` CTE, with ``$b_id`` numbering the budgets (several candidates, e.g. the
multipliers of a trade-off curve, are replayed in one pass: the calls' cumulative sums are
computed once). Every task type of the filtered runs must be in the lists of every budget (a
NULL task type included); its NULL limits mean "no limit".
"""

from __future__ import annotations

from budgetlens.analysis.queries import FILTERED
from budgetlens.analysis.spend_queries import SPEND
from budgetlens.limits import LIMIT_KEYS
from budgetlens.store.schema import RUN_COLUMNS, run_key_of

#: The ``runs`` columns holding the limits a run ran under.
LIMIT_COLUMNS = tuple(c for c in RUN_COLUMNS if c.startswith("limit_"))

#: The candidate budget as a table (task_type, max_total_tokens, ..., max_cost_usd).
_BUDGET = (
    (
        "budget AS (SELECT unnest(CAST($b_id AS INTEGER[])) AS budget_id, "
        "unnest(CAST($b_task_type AS VARCHAR[])) AS task_type, "
    )
    + ", ".join(f"unnest(CAST($b_{key} AS DOUBLE[])) AS {key}" for key in LIMIT_KEYS)
    + ")"
)

#: One model call's tokens: the total, else input + output, else (unknown usage) its reservation;
#: the same charge as the run detail's cumulative tokens (``queries.RUN_DETAIL_CALLS``).
_CALL_TOKENS = (
    "coalesce(c.total_tokens, c.input_tokens + c.output_tokens, "
    "CASE WHEN c.usage_status = 'unknown' THEN c.reserved_tokens END, 0)"
)

#: Every filtered run (``runs_in``: what the ``runs`` rollup says about it: calls, totals, stop
#: reason, the limits it ran under), and next to it (``probe``) the smallest limit of each key
#: over the budgets of its task type (``budget_min``): a run no budget can stop passes none of
#: them, so the candidates are found in one pass whatever the number of budgets (the curve's 21).
_UNDER = f"""
runs_in AS (
    SELECT r.run_id, r.task_type AS run_task_type, r.start_utc AS run_start,
           r.end_utc AS run_end, r.duration_s AS run_duration_s,
           r.stop_reason AS recorded_stop_reason, r.tool_calls AS run_tool_calls,
           r.total_tokens AS run_total_tokens, r.input_tokens AS run_input_tokens,
           r.output_tokens AS run_output_tokens, r.turns AS run_turns, r.cost_usd AS run_cost_usd,
           nullif(r.model_calls, 0) AS calls,
           {", ".join("r." + c for c in LIMIT_COLUMNS)}
    FROM filtered r
),
budget_min AS (
    SELECT task_type, {", ".join(f"min({k}) AS {k}" for k in LIMIT_KEYS)}
    FROM budget GROUP BY task_type
),
probe AS (
    SELECT m.*, r.* FROM runs_in r JOIN budget_min m ON m.task_type IS NOT DISTINCT FROM r.run_task_type
)"""

#: Runs the replay must walk call by call: under some budget, one of the totals of their calls
#: (the store's incremental ``run_totals``: the aggregates of a run's calls and the count of its
#: ``budgetlens.tool_call`` events, kept by the writer) passes a limit. A superset of the runs the
#: replay stops: a cumulative sum crosses a limit only if the total does; the time check uses the
#: last call's end (else the run's end or duration; none known: walked); the input check also the
#: total when a call's usage was unknown (its reservation counts as input). Every other run
#: completes, so only these runs' calls are read and sorted (a few % of the history).
_WALKED = """t.c_model_calls > 0 AND (
        coalesce(epoch(coalesce(t.c_end_utc, u.run_end) - u.run_start) >= u.max_duration_s,
                 u.run_duration_s >= u.max_duration_s, u.max_duration_s IS NOT NULL)
        OR t.c_model_calls > u.max_turns
        OR t.e_tool_calls > u.max_tool_calls
        OR t.c_cost_usd >= u.max_cost_usd
        OR t.c_total_tokens > u.max_total_tokens
        OR t.c_input_tokens > u.max_input_tokens
        OR (t.c_unknown_usage_calls > 0 AND t.c_total_tokens > u.max_input_tokens)
        OR t.c_output_tokens > u.max_output_tokens)"""
_CANDIDATE_RUNS = f"""
candidates AS (
    SELECT u.run_id FROM probe u JOIN run_totals t ON t.run_id = u.run_id
    WHERE {_WALKED}
)"""

#: Whether a probed run that is no candidate may be stopped by some budget (every other run
#: completes under all).
_MAY_STOP = """starts_with(recorded_stop_reason, 'budget_') OR calls IS NULL
        OR run_tool_calls > max_tool_calls"""

_CANDIDATES = (
    _CANDIDATE_RUNS
    + """,
under AS (  -- the runs a budget may stop (every other run completes), under every budget
    SELECT b.*, r.*
    FROM runs_in r
    JOIN budget b ON b.task_type IS NOT DISTINCT FROM r.run_task_type
    WHERE r.run_id IN (
        SELECT run_id FROM candidates
        UNION ALL
        SELECT run_id FROM probe
        WHERE starts_with(recorded_stop_reason, 'budget_') OR calls IS NULL
           OR run_tool_calls > max_tool_calls
    )
)"""
)

#: The replay, call by call, in time order, of the candidates. Their calls and their
#: ``budgetlens.tool_call`` events form one stream per run, so that a window counts the tool calls
#: made before each model call. The guard's checks before call k (``budgetlens.guard.stops``;
#: first match wins, in this order):
#:
#: - ``budget_time``: seconds since the run's start at the call's start >= max_duration_s;
#: - ``budget_turns``: k > max_turns (a limit of n allows n calls);
#: - ``budget_tools``: tool calls made before the call > max_tool_calls (the (n+1)-th was refused);
#: - ``budget_cost``: priced cost of calls 1..k-1 (USD) >= max_cost_usd;
#: - ``budget_tokens``: tokens of calls 1..k > a token limit (total, input or output): the
#:   reservation of call k (its actual size) would not fit.
#:
#: Per run and budget: the first stopping call (``stop_turn``), its reason, and what calls k..
#: spent (tokens, USD) = avoided.
_STREAM = f"""
stream AS (
    SELECT c.run_id, c.start_utc AS ts, 1 AS is_call, c.turn,
           {_CALL_TOKENS} AS tok,
           coalesce(c.input_tokens, CASE WHEN c.usage_status = 'unknown' THEN c.reserved_tokens END, 0)
               AS inp,
           coalesce(c.output_tokens, 0) AS outp,
           coalesce(c.cost_usd, 0) AS cost
    FROM model_calls c SEMI JOIN candidates k ON c.run_id = k.run_id
    UNION ALL
    SELECT e.run_id, e.ts_utc, 0, NULL, 0, 0, 0, 0
    FROM budget_events e SEMI JOIN candidates k ON e.run_id = k.run_id
    WHERE e.name = 'budgetlens.tool_call'
),
cum AS (
    SELECT run_id, ts, is_call, tok, cost,
           sum(is_call) OVER w AS k,
           sum(1 - is_call) OVER w AS tools_before,
           sum(tok) OVER w AS cum_tok,
           sum(inp) OVER w AS cum_in,
           sum(outp) OVER w AS cum_out,
           sum(cost) OVER w - cost AS cost_before
    FROM stream
    WINDOW w AS (PARTITION BY run_id ORDER BY ts, is_call, turn ROWS UNBOUNDED PRECEDING)
)"""

_FLAGGED = """
flagged AS (
    SELECT cum.run_id, u.budget_id, k, tok, cum_tok, cost, cost_before,
           CASE
               WHEN epoch(cum.ts - u.run_start) >= u.max_duration_s THEN 'budget_time'
               WHEN k > u.max_turns THEN 'budget_turns'
               WHEN tools_before > u.max_tool_calls THEN 'budget_tools'
               WHEN cost_before >= u.max_cost_usd THEN 'budget_cost'
               WHEN cum_tok > u.max_total_tokens OR cum_in > u.max_input_tokens
                    OR cum_out > u.max_output_tokens THEN 'budget_tokens'
           END AS reason
    FROM cum JOIN under u ON u.run_id = cum.run_id
    WHERE is_call = 1
),
per_run AS (
    SELECT run_id, budget_id,
           min(k) FILTER (WHERE reason IS NOT NULL) AS stop_turn,
           arg_min(reason, k) FILTER (WHERE reason IS NOT NULL) AS replay_reason,
           arg_min(cum_tok - tok, k) FILTER (WHERE reason IS NOT NULL) AS tokens_before_stop,
           arg_min(cost_before, k) FILTER (WHERE reason IS NOT NULL) AS cost_before_stop,
           sum(tok) AS spent_tokens,
           sum(cost) AS spent_cost
    FROM flagged
    GROUP BY run_id, budget_id
)"""
_PER_RUN = _STREAM + "," + _FLAGGED

#: Whether the candidate budget is "not larger" than the one that stopped a run, per stop reason:
#: every limit of that kind the old budget set is also set by the new one, at or below it. With
#: no recorded limit of that kind the outcome is unknown (the run is censored).
NOT_LARGER = {
    "budget_tokens": ("total_tokens", "input_tokens", "output_tokens"),
    "budget_turns": ("turns",),
    "budget_tools": ("tool_calls",),
    "budget_time": ("duration_s",),
    "budget_cost": ("cost_usd",),
}


def _not_larger(reason: str, names: tuple[str, ...]) -> str:
    any_set = " OR ".join(f"u.limit_{n} IS NOT NULL" for n in names)
    each = " AND ".join(f"(u.limit_{n} IS NULL OR u.max_{n} <= u.limit_{n})" for n in names)
    return f"WHEN '{reason}' THEN ({any_set}) AND {each}"


_NOT_LARGER_CASE = (
    "CASE u.recorded_stop_reason "
    + " ".join(_not_larger(reason, names) for reason, names in NOT_LARGER.items())
    + " ELSE false END"
)

#: A run without call records (an importer's summary only) is judged on its totals: stopped when
#: a total passes a limit, at its end (nothing counted as avoided: the calls are unknown).
_TOTALS_REASON = """CASE
    WHEN u.run_duration_s > u.max_duration_s THEN 'budget_time'
    WHEN u.run_turns > u.max_turns THEN 'budget_turns'
    WHEN u.run_tool_calls > u.max_tool_calls THEN 'budget_tools'
    WHEN u.run_cost_usd > u.max_cost_usd THEN 'budget_cost'
    WHEN u.run_total_tokens > u.max_total_tokens OR u.run_input_tokens > u.max_input_tokens
         OR u.run_output_tokens > u.max_output_tokens THEN 'budget_tokens'
END"""

#: One row per budget and filtered run that the budget may stop (a candidate walked call by
#: call, a run the old budget stopped, a run without call records, a run whose counted tool calls
#: pass the limit; every other run completes), with the replay's verdict: budget_id, run_id, task_type,
#: start_utc, recorded_stop_reason, replayed (it has call records), calls, outcome, stop_reason,
#: stop_turn (the call that would not have been sent, 1-based), avoided_tokens,
#: avoided_cost_usd, spent_tokens, spent_cost_usd. ``outcome``: 'stopped' (the candidate budget
#: stops it: in the replay, or a run the old budget stopped under a limit the new one does not
#: raise), 'censored' (the old budget stopped it and the new one is larger: what it would have
#: used is unknown) or 'completed'. A run whose tool calls are counted (``runs.tool_calls``) but
#: not recorded one by one before a model call (no ``budgetlens.tool_call`` events, or events
#: after its last call) is stopped by ``max_tool_calls`` at its last call when its count passes
#: the limit (nothing avoided: where the calls fell is unknown).
REPLAY_RUNS = f"""
WITH {FILTERED},
{_BUDGET},
{_UNDER},
{_CANDIDATES},
{_PER_RUN},
verdict AS (
    SELECT u.budget_id, u.run_id, u.run_task_type AS task_type, u.run_start AS start_utc,
           u.recorded_stop_reason,
           u.calls IS NOT NULL AS replayed,
           coalesce(u.calls, 0) AS calls,
           coalesce(u.run_total_tokens, 0) AS spent_tokens,
           coalesce(u.run_cost_usd, 0) AS spent_cost_usd,
           CASE
               WHEN u.calls IS NULL THEN {_TOTALS_REASON}
               WHEN p.replay_reason IS NOT NULL THEN p.replay_reason
               WHEN u.run_tool_calls > u.max_tool_calls THEN 'budget_tools'
           END AS replay_reason,
           p.stop_turn,
           p.spent_tokens - p.tokens_before_stop AS avoided_tokens,
           p.spent_cost - p.cost_before_stop AS avoided_cost_usd,
           coalesce(starts_with(u.recorded_stop_reason, 'budget_'), false) AS old_stop,
           {_NOT_LARGER_CASE} AS not_larger
    FROM under u
    LEFT JOIN per_run p ON p.run_id = u.run_id AND p.budget_id = u.budget_id
    WHERE p.run_id IS NOT NULL OR starts_with(u.recorded_stop_reason, 'budget_')
       OR u.calls IS NULL OR u.run_tool_calls > u.max_tool_calls
)
SELECT budget_id, run_id, task_type, start_utc, recorded_stop_reason, replayed, calls,
       CASE WHEN replay_reason IS NOT NULL OR (old_stop AND not_larger) THEN 'stopped'
            WHEN old_stop THEN 'censored' ELSE 'completed' END AS outcome,
       coalesce(replay_reason, CASE WHEN old_stop AND not_larger THEN recorded_stop_reason END)
           AS stop_reason,
       CASE WHEN replay_reason IS NOT NULL THEN coalesce(stop_turn, nullif(calls, 0))
            WHEN old_stop AND not_larger THEN nullif(calls, 0) END AS stop_turn,
       CASE WHEN replay_reason IS NOT NULL OR (old_stop AND not_larger)
            THEN coalesce(avoided_tokens, 0) ELSE 0 END AS avoided_tokens,
       CASE WHEN replay_reason IS NOT NULL OR (old_stop AND not_larger)
            THEN coalesce(avoided_cost_usd, 0) ELSE 0 END AS avoided_cost_usd,
       spent_tokens, spent_cost_usd
FROM verdict
"""


#: Per task type, independent of the budget: runs, runs without call records, what they spent
#: (the ``runs`` rollup's total tokens and cost: known spend, each run's own use, ``SPEND``).
_TASK_TOTALS = f"""
{SPEND},
task_totals AS (
    SELECT task_type, count(*) AS runs,
           count(*) FILTER (WHERE coalesce(model_calls, 0) = 0) AS runs_without_calls,
           CAST(sum(coalesce(own_total_tokens, 0)) AS BIGINT) AS spent_tokens,
           sum(coalesce(own_cost_usd, 0)) AS spent_cost_usd
    FROM spend
    GROUP BY task_type
)"""

STOP_COUNTS = {
    "stops_tokens": "budget_tokens",
    "stops_cost": "budget_cost",
    "stops_turns": "budget_turns",
    "stops_tools": "budget_tools",
    "stops_time": "budget_time",
}


def _summary(source: str) -> str:
    # ``source`` is a constant of this module (a subquery or the temp table's name).
    stops = ",\n           ".join(
        f"count(*) FILTER (WHERE stop_reason = '{reason}') AS {name}" for name, reason in STOP_COUNTS.items()
    )
    picked = ",\n       ".join(f"coalesce(s.{name}, 0) AS {name}" for name in STOP_COUNTS)
    return f"""
WITH {FILTERED},
{_BUDGET},
{_TASK_TOTALS},
s AS (
    SELECT budget_id, task_type,
           count(*) FILTER (WHERE outcome = 'stopped') AS stopped,
           count(*) FILTER (WHERE outcome = 'censored') AS censored,
           {stops},
           CAST(sum(avoided_tokens) AS BIGINT) AS avoided_tokens,
           sum(avoided_cost_usd) AS avoided_cost_usd
    FROM {source} v
    GROUP BY budget_id, task_type
)
SELECT b.budget_id, tt.task_type, tt.runs,
       coalesce(s.stopped, 0) AS stopped,
       coalesce(s.censored, 0) AS censored,
       tt.runs - coalesce(s.stopped, 0) - coalesce(s.censored, 0) AS completed,
       tt.runs_without_calls,
       {picked},
       tt.spent_tokens, tt.spent_cost_usd,
       coalesce(s.avoided_tokens, 0) AS avoided_tokens,
       coalesce(s.avoided_cost_usd, 0) AS avoided_cost_usd
FROM (SELECT DISTINCT budget_id FROM budget) b
CROSS JOIN task_totals tt
LEFT JOIN s ON s.budget_id = b.budget_id AND s.task_type IS NOT DISTINCT FROM tt.task_type
ORDER BY b.budget_id, tt.task_type
"""


#: Per budget and task type: runs, stopped, censored, completed, runs_without_calls, the stops
#: per reason, spend and what the stops would have avoided. Same parameters as ``REPLAY_RUNS``.
REPLAY_SUMMARY = _summary(f"({REPLAY_RUNS})")

#: One replay read twice (its summary and its stopped runs) without replaying twice: the verdicts
#: go to a temporary table of the read-only connection (DuckDB keeps temp objects in memory).
REPLAY_TABLE = "whatif_replay"
CREATE_REPLAY_TABLE = f"CREATE OR REPLACE TEMP TABLE {REPLAY_TABLE} AS {REPLAY_RUNS}"
REPLAY_TABLE_SUMMARY = _summary(REPLAY_TABLE)
REPLAY_TABLE_STOPPED = f"SELECT * FROM {REPLAY_TABLE} WHERE outcome <> 'completed'"
DROP_REPLAY_TABLE = f"DROP TABLE IF EXISTS {REPLAY_TABLE}"

#: The task types of the filtered runs (NULL included): every budget of a replay lists them all.
TASK_TYPES = f"WITH {FILTERED} SELECT DISTINCT task_type FROM filtered ORDER BY task_type NULLS LAST"


# --- the fast path (``budgetlens.analysis.whatif_peaks``): per-run peaks, calls only where needed --

#: The filtered runs some budget of ``$b_*`` may stop (the ``under`` runs of ``REPLAY_RUNS``, once
#: each, not once per budget), in no particular order: what the ``runs`` rollup says about them (calls,
#: totals, stop reason, the limits they ran under) and ``walked`` (a candidate of ``REPLAY_RUNS``:
#: its calls are read and replayed; ``run_key``: its integer key, 0 when not walked;
#: ``tool_events``: its ``budgetlens.tool_call`` events). One pass over the runs and their
#: ``run_totals``, whatever the number of budgets; every run not listed completes under every budget.
UNDER_RUNS = f"""
WITH {FILTERED},
{_BUDGET},
{_UNDER},
flagged AS (
    SELECT u.*, coalesce({_WALKED}, false) AS walked, t.e_tool_calls AS tool_events
    FROM probe u LEFT JOIN run_totals t ON t.run_id = u.run_id
)
SELECT r.run_id, r.run_task_type AS task_type, r.run_start AS start_utc, r.recorded_stop_reason,
       CAST(r.calls AS DOUBLE) AS calls, CAST(r.run_tool_calls AS DOUBLE) AS run_tool_calls,
       CAST(r.run_total_tokens AS DOUBLE) AS run_total_tokens,
       CAST(r.run_input_tokens AS DOUBLE) AS run_input_tokens,
       CAST(r.run_output_tokens AS DOUBLE) AS run_output_tokens,
       CAST(r.run_turns AS DOUBLE) AS run_turns, r.run_cost_usd, r.run_duration_s,
       {", ".join(f"CAST(r.{c} AS DOUBLE) AS {c}" for c in LIMIT_COLUMNS)},
       r.walked,
       CASE WHEN r.walked THEN {run_key_of("r.run_id")} ELSE 0 END AS run_key,
       CASE WHEN r.walked THEN coalesce(r.tool_events, 0) ELSE 0 END AS tool_events
FROM flagged r
WHERE r.walked OR {_MAY_STOP}
"""


def _walk_calls(key: str, kind: str) -> str:
    # ``key``/``kind``: run_key UBIGINT or run_id VARCHAR (constants of this module)
    stream = _STREAM.replace("c.run_id", f"c.{key}").replace("e.run_id", f"e.{key}")
    stream = stream.replace("k.run_id", "k.run_key")
    stream = stream.split("),\ncum AS (")[0] + ")"
    return f"""
WITH candidates AS (
    SELECT unnest(CAST($walk_keys AS {kind}[])) AS run_key, unnest(CAST($walk_idx AS INTEGER[])) AS ui,
           make_timestamp(unnest(CAST($walk_start_us AS BIGINT[]))) AS run_start
),
{stream},
cum AS (
    SELECT {key.replace("run_id", "run_id AS run_key") if key == "run_id" else key}, ts, is_call, turn,
           tok, inp, outp, cost, sum(cost) OVER w - cost AS cost_before
    FROM stream
    WINDOW w AS (PARTITION BY {key} ORDER BY ts, is_call, turn ROWS UNBOUNDED PRECEDING)
)
SELECT k.ui, CAST(cum.is_call AS BIGINT) AS is_call, epoch(cum.ts - k.run_start) AS time_s,
       CAST(cum.tok AS BIGINT) AS tok, CAST(cum.inp AS BIGINT) AS inp, CAST(cum.outp AS BIGINT) AS outp,
       CAST(cum.cost AS DOUBLE) AS cost, CAST(cum.cost_before AS DOUBLE) AS cost_before
FROM cum JOIN candidates k ON k.run_key = cum.run_key
ORDER BY k.ui, cum.ts, cum.is_call, cum.turn
"""


#: The call-by-call stream of the walked runs ``$walk_keys`` (their ``run_key``s; ``$walk_idx``:
#: their positions in the caller's list; ``$walk_start_us``: their starts, epoch microseconds),
#: their model calls and ``budgetlens.tool_call`` events in the replay's order (``REPLAY_RUNS``'
#: ``cum``): ui, is_call (1 = a model call, 0 = a tool call), time_s (seconds since the run's
#: start), tok, inp, outp, cost (a call's charge, as ``_STREAM``; 0 for a tool call) and
#: cost_before (USD of the run's calls before it, summed as the reference sums). The running
#: counts and token sums are the caller's (integers: exact in any order). Reads the calls and
#: events by integer key only.
WALK_CALLS = _walk_calls("run_key", "UBIGINT")
#: ``WALK_CALLS`` by run id (``$walk_keys``: the run ids): for keys two run ids share.
WALK_CALLS_BY_ID = _walk_calls("run_id", "VARCHAR")

#: Per task type of the filtered runs: runs, runs_without_calls, spent_tokens, spent_cost_usd
#: (the replay summary's budget-independent columns), NULL task type last.
TASK_TOTALS = f"WITH {FILTERED},\n{_TASK_TOTALS}\nSELECT * FROM task_totals ORDER BY task_type NULLS LAST"
