"""Named SQL of the limits the runs ran under (design §6): per task type the periods during which
one set of limits was in force (a new period starts at the first run whose ``limit_*`` values
differ from the previous budgeted run's) and the latest of them (the limits in force now, with
the date they took effect), both in one statement (``LIMIT_PERIODS``). Runs without any limit
are left out of the periods (they ran under no budget). Filtered by
``budgetlens.analysis.queries.FILTERED``.
"""

from __future__ import annotations

from budgetlens.analysis.queries import FILTERED_INLINE
from budgetlens.store.schema import LIMIT_COLUMNS

_ANY_LIMIT = " OR ".join(f"{c} IS NOT NULL" for c in LIMIT_COLUMNS)
_CHANGED = " OR ".join(f"lag({c}) OVER w IS DISTINCT FROM {c}" for c in LIMIT_COLUMNS)

_LIMITS = ", ".join(LIMIT_COLUMNS)
#: A run of a ``mixed`` task type (NULL is a task type here): an uncorrelated ``IN`` on a key
#: that is never NULL, a hash semi join, which ends at once when no task type is mixed (issue 25:
#: the correlated ``EXISTS`` with ``IS NOT DISTINCT FROM`` was planned as a delim join that read
#: every budgeted run, ``run_id`` included, even then: most of the statement at 1M runs).
_MIXED_KEY = "coalesce(task_type, chr(0))"
_IS_MIXED = f"{_MIXED_KEY} IN (SELECT {_MIXED_KEY} FROM mixed)"

#: Periods (issue 25). Usually each set of limits of a task type was in force over one stretch of
#: time, the stretches one after another: then a period is a set (``sets``: one hash aggregate,
#: no sort). A task type whose sets' stretches overlap or touch (limits changed back, runs at the
#: same instant) is ``mixed``: only its runs are sorted, in one window, each marked where its
#: limits differ from the previous budgeted run's (``starts``; the first run always does) and
#: where it is its task type's last; a period runs from one start to the next (its runs the
#: difference of positions, its last run the run before the next start: ``previous_utc``).
_PERIODS = f"""
WITH {FILTERED_INLINE},
sets AS (
    SELECT task_type, {_LIMITS}, min(start_utc) AS since_utc, max(start_utc) AS last_run_utc,
           count(*) AS runs
    FROM filtered WHERE {_ANY_LIMIT}
    GROUP BY ALL
),
ordered_sets AS (
    SELECT *, lag(last_run_utc) OVER (PARTITION BY task_type ORDER BY since_utc, last_run_utc) AS previous_last
    FROM sets
),
mixed AS (SELECT DISTINCT task_type FROM ordered_sets WHERE previous_last >= since_utc),
marked AS (
    SELECT task_type, start_utc, {_LIMITS},
           row_number() OVER w AS pos,
           lag(start_utc) OVER w AS previous_utc,
           ({_CHANGED}) AS starts,
           lead(start_utc) OVER w IS NULL AS last
    FROM filtered WHERE ({_ANY_LIMIT}) AND {_IS_MIXED}
    WINDOW w AS (PARTITION BY task_type ORDER BY start_utc, run_id)
),
points AS (SELECT * FROM marked WHERE starts OR last),
periods AS (
    SELECT s.task_type, row_number() OVER p AS period, s.start_utc AS since_utc,
           coalesce(lead(s.previous_utc) OVER p, l.start_utc) AS last_run_utc,
           coalesce(lead(s.pos) OVER p, l.pos + 1) - s.pos AS runs,
           {", ".join(f"s.{c}" for c in LIMIT_COLUMNS)}
    FROM points s JOIN points l ON l.last AND l.task_type IS NOT DISTINCT FROM s.task_type
    WHERE s.starts
    WINDOW p AS (PARTITION BY s.task_type ORDER BY s.pos)
    UNION ALL
    SELECT task_type, row_number() OVER (PARTITION BY task_type ORDER BY since_utc) AS period,
           since_utc, last_run_utc, runs, {_LIMITS}
    FROM sets
    WHERE NOT EXISTS (SELECT 1 FROM mixed m WHERE m.task_type IS NOT DISTINCT FROM sets.task_type)
)"""

#: Every period and the limits in force now in one read (issue 25: the Baselines and Presets
#: pages read both; each had its own pass over the runs): one row per task type and period of
#: unchanged limits, oldest first (task_type, since_utc, last_run_utc, runs, the ``limit_*``
#: columns), ``is_current`` on each task type's latest, ``changes`` (its periods less one), plus
#: one row per task type of the filtered runs without any limit (since_utc NULL, is_current,
#: changes 0). ``views.limit_history`` and ``views.current_limits`` are its two readings.
LIMIT_PERIODS = f"""{_PERIODS},
numbered AS (
    SELECT *, count(*) OVER (PARTITION BY task_type) - 1 AS changes,
           row_number() OVER (PARTITION BY task_type ORDER BY period DESC) = 1 AS is_current
    FROM periods
)
SELECT t.task_type, n.since_utc, n.last_run_utc, n.runs, {", ".join(f"n.{c}" for c in LIMIT_COLUMNS)},
       coalesce(n.is_current, true) AS is_current, coalesce(n.changes, 0) AS changes
FROM (SELECT DISTINCT task_type FROM filtered) t
LEFT JOIN numbered n ON n.task_type IS NOT DISTINCT FROM t.task_type
ORDER BY t.task_type, n.since_utc, n.period
"""
