"""Named, parameterised SQL of the evidence beside the replay (design §6): the censoring input of
the Kaplan–Meier baselines (``censoring``), runaway runs and the spend they are a share of
(``runaways``), and the drift of the P95 between two windows (``drift``). Filtered by
``budgetlens.analysis.queries.FILTERED``.
"""

from __future__ import annotations

from budgetlens.analysis.queries import (
    BASELINE_METRICS,
    COST_KNOWN,
    FILTERED,
    FILTERED_INLINE,
    IS_BUDGET_STOP,
)
from budgetlens.analysis.spend_queries import SPEND

#: The censoring input of the Kaplan–Meier baselines: per filtered run its task type, the
#: baseline metrics, whether its cost is fully known, and ``censored`` (a budget stopped it, so
#: it would have used more). Columns: run_id, task_type, censored, cost_known, total_tokens,
#: input_tokens, output_tokens, turns, tool_calls, duration_s, cost_usd.
CENSORING_INPUT = f"""
WITH {FILTERED}
SELECT run_id, task_type, coalesce({IS_BUDGET_STOP}, false) AS censored,
       coalesce({COST_KNOWN}, false) AS cost_known,
       total_tokens, input_tokens, output_tokens, turns, tool_calls, duration_s, cost_usd
FROM filtered
"""

#: ``CENSORING_INPUT`` as the Kaplan–Meier baselines read it, straight into numpy arrays: no
#: run_id, the task type as its 1-based position in ``$task_types_known`` (0: not in it, or
#: NULL; issue 25: the text column was half of the read at 1M runs), ``flags``: 1 when a budget
#: stopped the run (censored) plus 2 when its cost is fully known (one byte instead of two
#: columns), the metrics as DOUBLE (NULL = NaN), cost NULL unless fully known (the runs the
#: cost baselines use, as ``BASELINES_BY_TASK``). The caller groups the rows by the code. Columns:
#: task_code, flags, then ``BASELINE_METRICS``.
#: The columns of ``CENSORING_ARRAYS``: (name, SQL) in order.
_ARRAY_COLUMNS: tuple[tuple[str, str], ...] = (
    (
        "task_code",
        "CAST(coalesce(list_position(CAST($task_types_known AS VARCHAR[]), task_type), 0) AS INTEGER)",
    ),
    (
        "flags",
        f"""CAST(CASE WHEN coalesce({IS_BUDGET_STOP}, false) THEN 1 ELSE 0 END
            + CASE WHEN coalesce({COST_KNOWN}, false) THEN 2 ELSE 0 END AS UTINYINT)""",
    ),
    *(
        (
            m,
            f"CAST(CASE WHEN {COST_KNOWN} THEN {m} END AS DOUBLE)"
            if m == "cost_usd"
            else f"CAST({m} AS DOUBLE)",
        )
        for m in BASELINE_METRICS
    ),
)


def _arrays_of(names: tuple[str, ...]) -> str:
    """``CENSORING_ARRAYS`` with only the columns ``names`` (in ``_ARRAY_COLUMNS``' order)."""
    picked = ", ".join(f"{sql} AS {name}" for name, sql in _ARRAY_COLUMNS if name in names)
    return f"WITH {FILTERED}\nSELECT {picked}\nFROM filtered\n"


CENSORING_ARRAYS = _arrays_of(tuple(name for name, _ in _ARRAY_COLUMNS))

#: ``CENSORING_ARRAYS`` in two statements that together give its columns, each half of the
#: values, for a reader that runs them side by side on two cursors of one read-only file
#: (``evidence_arrays.read_arrays``; issue 25: DuckDB turns one result into Arrow on one thread,
#: two-thirds of the read at 1M runs). Both read the filtered runs in the table's order (no
#: ORDER BY: DuckDB keeps the insertion order), so their rows are the same rows, row by row.
#: The first holds every column that reads text (the task type, the stop reason, the usage
#: status) and the cost; the second the other metrics.
CENSORING_ARRAYS_TEXT = _arrays_of(("task_code", "flags", "total_tokens", "cost_usd"))
CENSORING_ARRAYS_NUMBERS = _arrays_of(("input_tokens", "output_tokens", "turns", "tool_calls", "duration_s"))


def _streaks_of(runs: str) -> str:
    """The ``tools`` and ``streaks`` CTEs of the runs of the CTE ``runs`` (a fixed name): each
    run's longest streak of one tool and that tool (``RUNAWAYS``' columns)."""
    return f"""tools AS (
    SELECT e.run_id, e.tool_name, e.ts_utc, e.event_id,
           row_number() OVER (PARTITION BY e.run_id ORDER BY e.ts_utc, e.event_id)
         - row_number() OVER (PARTITION BY e.run_id, e.tool_name ORDER BY e.ts_utc, e.event_id)
               AS streak
    FROM budget_events e JOIN {runs} f ON f.run_id = e.run_id
    WHERE e.name = 'budgetlens.tool_call' AND e.tool_name IS NOT NULL
),
streaks AS (
    SELECT run_id, arg_max(tool_name, (n, tool_name)) AS repeated_tool, max(n) AS longest_repeat
    FROM (SELECT run_id, tool_name, streak, count(*) AS n FROM tools GROUP BY ALL)
    GROUP BY run_id
)"""


#: The rows of the runaways ``picked`` (with ``streaks``), as ``RUNAWAYS`` returns them.
_RUNAWAY_ROWS = """
SELECT f.run_id, f.task_type, f.start_utc, f.total_tokens, f.cost_usd, f.stop_reason,
       f.p95_total_tokens,
       f.total_tokens / nullif(f.p95_total_tokens, 0) AS tokens_ratio,
       coalesce(s.longest_repeat, 0) AS longest_repeat,
       s.repeated_tool,
       coalesce(f.total_tokens > $k * f.p95_total_tokens, false) AS over_p95,
       coalesce(s.longest_repeat >= $repeats, false) AS tool_loop,
       f.own_cost_usd
FROM picked f
LEFT JOIN streaks s ON s.run_id = f.run_id
ORDER BY f.total_tokens DESC NULLS LAST, f.run_id
"""

#: Runaway runs: above ``$k`` x their task type's P95 of total tokens, or with the same tool
#: called ``$repeats`` or more times in a row (``budgetlens.tool_call`` events in time order;
#: arguments are never stored, so "the same call" is the same tool name; of two tools with
#: equally long streaks, the later name in sort order is ``repeated_tool``). Columns: run_id,
#: task_type, start_utc, total_tokens, cost_usd, stop_reason, p95_total_tokens, tokens_ratio
#: (total / P95), longest_repeat, repeated_tool, over_p95, tool_loop, own_cost_usd (the run's own
#: spend, ``spend_queries.SPEND``: what the runaways' share sums). The tool loops are picked
#: first (``loops``) so that the WHERE does not read the LEFT JOIN: the few runaways are found
#: before their streaks are joined (issue 25: DuckDB built the join's hash table on every
#: filtered run); the runs filter is inlined (``FILTERED_INLINE``: read three times).
RUNAWAYS = f"""
WITH {FILTERED_INLINE},
{SPEND},
p95 AS (
    SELECT task_type, quantile_cont(total_tokens, 0.95) AS p95_total_tokens
    FROM filtered GROUP BY task_type
),
{_streaks_of("filtered")},
loops AS (SELECT run_id FROM streaks WHERE longest_repeat >= $repeats),
picked AS (
    SELECT f.run_id, f.task_type, f.start_utc, f.total_tokens, f.cost_usd, f.stop_reason,
           f.own_cost_usd, p.p95_total_tokens
    FROM spend f JOIN p95 p ON p.task_type IS NOT DISTINCT FROM f.task_type
    WHERE f.total_tokens > $k * p.p95_total_tokens OR f.run_id IN (SELECT run_id FROM loops)
)
{_RUNAWAY_ROWS}"""

#: What ``RUNAWAYS_GIVEN_P95`` takes from the filtered runs, per task type: task_type,
#: p95_total_tokens (as ``RUNAWAYS``' ``p95``), runs, cost_usd (the own spend summed: the
#: share's denominator). The Overview's per-task rows hold the same figures
#: (``runaways.basis_of``), so the Overview page does not read them twice.
RUNAWAY_BASIS = f"""
WITH {FILTERED},
{SPEND}
SELECT task_type, quantile_cont(total_tokens, 0.95) AS p95_total_tokens, count(*) AS runs,
       sum(own_cost_usd) AS cost_usd
FROM spend GROUP BY task_type ORDER BY task_type NULLS LAST
"""

#: ``RUNAWAYS`` with each task type's P95 given (``$basis_task_types``, ``$basis_tokens``: lists
#: of the same length, a NULL task type and a NULL P95 allowed) instead of computed from the
#: runs: the same rows and columns, without the pass over the runs for the P95 (issue 25).
RUNAWAYS_GIVEN_P95 = RUNAWAYS.replace(
    """p95 AS (
    SELECT task_type, quantile_cont(total_tokens, 0.95) AS p95_total_tokens
    FROM filtered GROUP BY task_type
)""",
    """p95 AS (
    SELECT unnest(CAST($basis_task_types AS VARCHAR[])) AS task_type,
           unnest(CAST($basis_tokens AS DOUBLE[])) AS p95_total_tokens
)""",
    1,
)

#: Whether some stored run may be a tool loop (``$repeats`` or more ``budgetlens.tool_call``
#: events naming a tool): when not, no run of any window is, and its runaways are the runs over
#: their P95 alone (``RUNAWAYS_OVER_P95_GIVEN``). Reads the events only (~20 ms at 1M runs).
MAY_HAVE_TOOL_LOOPS = """
SELECT EXISTS (
    SELECT run_id FROM budget_events
    WHERE name = 'budgetlens.tool_call' AND tool_name IS NOT NULL
    GROUP BY run_id HAVING count(*) >= $repeats
)
"""

#: ``RUNAWAYS_GIVEN_P95`` where no filtered run is a tool loop (``MAY_HAVE_TOOL_LOOPS`` false):
#: the same rows and columns from the runs over ``$k`` x their P95 alone, without the ``OR``;
#: ``$least_given`` (the smallest given P95; NULL: none) filters the runs' scan before the P95s
#: are joined, and only the picked runs' tool streaks are read (issue 25).
RUNAWAYS_OVER_P95_GIVEN = f"""
WITH {FILTERED_INLINE},
{SPEND},
p95 AS (
    SELECT unnest(CAST($basis_task_types AS VARCHAR[])) AS task_type,
           unnest(CAST($basis_tokens AS DOUBLE[])) AS p95_total_tokens
),
picked AS MATERIALIZED (
    SELECT f.run_id, f.task_type, f.start_utc, f.total_tokens, f.cost_usd, f.stop_reason,
           f.own_cost_usd, p.p95_total_tokens
    FROM spend f JOIN p95 p ON p.task_type IS NOT DISTINCT FROM f.task_type
    WHERE f.total_tokens > $k * CAST($least_given AS DOUBLE) AND f.total_tokens > $k * p.p95_total_tokens
),
{_streaks_of("picked")}
{_RUNAWAY_ROWS}"""

#: Drift: per task type, the P95 of total tokens and of known cost in the recent window
#: [$split_utc, $end_utc) against the previous one [$start_utc, $split_utc). Columns: task_type,
#: n_recent, n_previous, p95_total_tokens_recent, p95_total_tokens_previous, p95_cost_usd_recent,
#: p95_cost_usd_previous. Each window's figures per task type in one group (issue 25: the same
#: values as four filtered quantiles over every run, at less cost), then side by side.
DRIFT = f"""
WITH {FILTERED},
windows AS (
    SELECT task_type, start_utc >= CAST($split_utc AS TIMESTAMP) AS recent, count(*) AS n,
           quantile_cont(total_tokens, 0.95) AS p95_total_tokens,
           quantile_cont(CASE WHEN {COST_KNOWN} THEN cost_usd END, 0.95) AS p95_cost_usd
    FROM filtered
    GROUP BY ALL
)
SELECT task_type,
       coalesce(max(n) FILTER (WHERE recent), 0) AS n_recent,
       coalesce(max(n) FILTER (WHERE NOT recent), 0) AS n_previous,
       max(p95_total_tokens) FILTER (WHERE recent) AS p95_total_tokens_recent,
       max(p95_total_tokens) FILTER (WHERE NOT recent) AS p95_total_tokens_previous,
       max(p95_cost_usd) FILTER (WHERE recent) AS p95_cost_usd_recent,
       max(p95_cost_usd) FILTER (WHERE NOT recent) AS p95_cost_usd_previous
FROM windows
GROUP BY task_type
ORDER BY task_type
"""
