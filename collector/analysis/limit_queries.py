"""Named SQL of the limits the runs ran under (design §6): per task type the periods during which
one set of limits was in force (``LIMIT_HISTORY``: a new period starts at the first run whose
``limit_*`` values differ from the previous budgeted run's) and the latest of them
(``CURRENT_LIMITS``: the limits in force now, with the date they took effect). Runs without any
limit are left out (they ran under no budget). Filtered by ``budgetlens.analysis.queries.FILTERED``.
"""

from __future__ import annotations

from budgetlens.analysis.queries import FILTERED
from budgetlens.store.schema import LIMIT_COLUMNS

_ANY_LIMIT = " OR ".join(f"{c} IS NOT NULL" for c in LIMIT_COLUMNS)
_LIMIT_STRUCT = "{" + ", ".join(f"'{c}': {c}" for c in LIMIT_COLUMNS) + "}"
_LIMIT_SELECT = ", ".join(f"any_value({c}) AS {c}" for c in LIMIT_COLUMNS)

_PERIODS = f"""
WITH {FILTERED},
budgeted AS (
    SELECT task_type, run_id, start_utc, {", ".join(LIMIT_COLUMNS)}, {_LIMIT_STRUCT} AS limit_set
    FROM filtered WHERE {_ANY_LIMIT}
),
marked AS (
    SELECT *, CASE WHEN limit_set IS NOT DISTINCT FROM lag(limit_set) OVER w THEN 0 ELSE 1 END AS starts
    FROM budgeted WINDOW w AS (PARTITION BY task_type ORDER BY start_utc, run_id)
),
numbered AS (
    SELECT *, sum(starts) OVER (
        PARTITION BY task_type ORDER BY start_utc, run_id ROWS UNBOUNDED PRECEDING
    ) AS period
    FROM marked
),
periods AS (
    SELECT task_type, period, min(start_utc) AS since_utc, max(start_utc) AS last_run_utc,
           count(*) AS runs, {_LIMIT_SELECT}
    FROM numbered GROUP BY task_type, period
)"""

#: One row per task type and period of unchanged limits, oldest first: task_type, since_utc (the
#: first run under them), last_run_utc, runs, the ``limit_*`` columns.
LIMIT_HISTORY = f"""{_PERIODS}
SELECT task_type, since_utc, last_run_utc, runs, {", ".join(LIMIT_COLUMNS)}
FROM periods ORDER BY task_type, since_utc
"""

#: One row per task type of the filtered runs: the latest period's limits (NULL when no run of
#: the task type had a limit), since_utc (when they took effect), runs under them, changes
#: (periods before it).
CURRENT_LIMITS = f"""{_PERIODS},
latest AS (
    SELECT *, count(*) OVER (PARTITION BY task_type) - 1 AS changes FROM periods
    QUALIFY row_number() OVER (PARTITION BY task_type ORDER BY period DESC) = 1
)
SELECT t.task_type, {", ".join(f"l.{c}" for c in LIMIT_COLUMNS)},
       l.since_utc, l.runs AS runs_since, coalesce(l.changes, 0) AS changes
FROM (SELECT DISTINCT task_type FROM filtered) t
LEFT JOIN latest l ON l.task_type IS NOT DISTINCT FROM t.task_type
ORDER BY t.task_type
"""
