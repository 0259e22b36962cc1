"""Named, parameterised SQL of the run lists (design §6): the most expensive runs, the paged and
searched run table, its full export, and one run's detail (calls and budget events). Filtered by
``budgetlens.analysis.queries.FILTERED``; read by ``budgetlens.analysis.views``.
"""

from __future__ import annotations

from budgetlens.analysis.queries import FILTERED
from budgetlens.store.schema import RUN_COLUMNS, run_key_of

#: Columns of the run table (``budgetlens runs`` and the Runs page), in order.
RUN_TABLE_COLUMNS = (
    "run_id",
    "task_type",
    "service_name",
    "team",
    "user_id",
    "models",
    "start_utc",
    "turns",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost_usd",
    "stop_reason",
    "usage_status",
    "quality",
)
_RUN_TABLE_SELECT = ", ".join(RUN_TABLE_COLUMNS)

TOP_RUNS_REFERENCE = f"""
WITH {FILTERED}
SELECT {_RUN_TABLE_SELECT}
FROM filtered
WHERE cost_usd IS NOT NULL
ORDER BY cost_usd DESC, run_id
LIMIT $limit
"""
#: ``TOP_RUNS_REFERENCE``'s rows, read in two steps (issue 25: about a third less CPU at 1M runs):
#: the ``$limit``-th highest cost from the cost column alone, then the run table's columns of the
#: runs costing at least that (every run the reference can list, ties included), which the
#: cost's zone maps keep to a few row groups.
TOP_RUNS = f"""
WITH {FILTERED},
cut AS (
    SELECT min(cost_usd) AS cost_usd
    FROM (SELECT cost_usd FROM filtered WHERE cost_usd IS NOT NULL ORDER BY cost_usd DESC LIMIT $limit)
)
SELECT {_RUN_TABLE_SELECT}
FROM filtered
WHERE cost_usd >= (SELECT cost_usd FROM cut)
ORDER BY cost_usd DESC, run_id
LIMIT $limit
"""

#: ``$search`` matches (case-insensitive substring) the run id, task type, service, team, user, models, stop
#: reason or usage status; '' matches every run. Newest first.
RUNS_TABLE = f"""
WITH {FILTERED}
SELECT {_RUN_TABLE_SELECT}
FROM filtered
WHERE $search = ''
   OR contains(lower(run_id), lower($search))
   OR contains(lower(coalesce(task_type, '')), lower($search))
   OR contains(lower(coalesce(service_name, '')), lower($search))
   OR contains(lower(coalesce(team, '')), lower($search))
   OR contains(lower(coalesce(user_id, '')), lower($search))
   OR contains(lower(coalesce(models, '')), lower($search))
   OR contains(lower(coalesce(stop_reason, '')), lower($search))
   OR contains(lower(coalesce(usage_status, '')), lower($search))
   OR contains(lower(coalesce(quality, '')), lower($search))
ORDER BY start_utc DESC NULLS LAST, run_id
LIMIT $limit OFFSET $offset
"""

#: Every column of the ``runs`` rollup: the run table's first, then the others in schema order
#: (limits, duration, cache and reasoning tokens, warnings, downgrades, summaries...), filtered,
#: searched and ordered as ``RUNS_TABLE``: the rows of ``budgetlens runs --format json/csv``.
RUN_EXPORT_COLUMNS = RUN_TABLE_COLUMNS + tuple(c for c in RUN_COLUMNS if c not in RUN_TABLE_COLUMNS)
RUNS_EXPORT = RUNS_TABLE.replace(
    f"SELECT {_RUN_TABLE_SELECT}\n", f"SELECT {', '.join(RUN_EXPORT_COLUMNS)}\n", 1
)

RUN_DETAIL_RUN = "SELECT * FROM runs WHERE run_id = $run_id"


#: The rows of ``$run_id`` in a table with ``run_key``: its integer key first (a scan of one integer
#: column instead of every row's run id: issue 25), then the run id itself (a key two run ids
#: share); a row stored without a key is still found.
def _of_run(alias: str) -> str:
    return (
        f"({alias}.run_key = {run_key_of('$run_id')} OR {alias}.run_key IS NULL) AND {alias}.run_id = $run_id"
    )


#: One run's calls with the cumulative used tokens: the guard's ``used_tokens`` when recorded,
#: else the running sum of the calls' totals (an unknown call counts its reservation).
RUN_DETAIL_CALLS = f"""
SELECT
    c.turn,
    c.start_utc,
    coalesce(c.response_model, c.request_model) AS model,
    c.input_tokens,
    c.output_tokens,
    c.reserved_tokens,
    coalesce(c.used_tokens, sum(coalesce(
        c.total_tokens, c.input_tokens + c.output_tokens,
        CASE WHEN c.usage_status = 'unknown' THEN c.reserved_tokens END, 0))
        OVER (ORDER BY c.start_utc, c.turn, c.span_id ROWS UNBOUNDED PRECEDING))
        AS cumulative_tokens,
    r.limit_total_tokens,
    c.usage_status,
    c.cost_usd
FROM model_calls c
LEFT JOIN runs r ON r.run_id = c.run_id
WHERE {_of_run("c")}
ORDER BY c.start_utc, c.turn, c.span_id
"""

RUN_DETAIL_EVENTS = f"""
SELECT ts_utc, name, reason, from_model, to_model, tool_name, used_tokens, percent
FROM budget_events e
WHERE {_of_run("e")}
ORDER BY ts_utc, event_id
"""

#: The tree of runs below ``$run_id`` (issue 21: ``RunBudget.child`` runs name their parent in
#: ``parent_run_id``): the run itself at depth 0, then its children, theirs..., each with its
#: parent, in depth-first order of start. A cycle (a corrupt link) ends at depth 32. The rows carry
#: their columns down the recursion (issue 25: no join of the tree with every run's id at the end).
_TREE_COLUMNS = (
    "run_id, parent_run_id, task_type, start_utc, stop_reason, turns, total_tokens, cost_usd, tool_cost_usd"
)
RUN_TREE = f"""
WITH RECURSIVE tree(depth, {_TREE_COLUMNS}, path) AS (
    SELECT 0, {_TREE_COLUMNS}, [coalesce(CAST(start_utc AS VARCHAR), ''), run_id]
    FROM runs WHERE run_id = $run_id
    UNION ALL
    SELECT t.depth + 1, {", ".join("r." + c for c in _TREE_COLUMNS.split(", "))},
           list_concat(t.path, [coalesce(CAST(r.start_utc AS VARCHAR), ''), r.run_id])
    FROM (SELECT * FROM runs WHERE parent_run_id IS NOT NULL) r JOIN tree t ON r.parent_run_id = t.run_id
    WHERE t.depth < 32
)
SELECT depth, {_TREE_COLUMNS} FROM tree ORDER BY path
"""
