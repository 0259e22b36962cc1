"""The analysis layer (design §6): baselines, presets, hit rate, cost — one definition for the
dashboard and the CLI.

Every query function takes an open read-only DuckDB connection (``budgetlens.store.read_connection``)
and a ``Filters``; aggregation runs in DuckDB with the named statements of ``budgetlens.analysis.queries``
and comes back as a small pandas DataFrame (or a small dataclass). An empty result is a frame
with the documented columns and zero rows. ``presets`` and ``preset_changes`` (pure; defined in
``budgetlens.analysis.presets`` with their rounding rules, ``PRESET_RULES``, and re-exported here) turn a
baseline into recommended limits. The run lists and one run's detail (``runs_table``,
``run_detail``, ...) are defined in ``budgetlens.analysis.run_views`` and re-exported here.

Definitions:

- percentiles are ``quantile_cont`` (linear interpolation between closest ranks; numpy
  ``method="linear"``), so P95 is never above the max;
- baselines count every run in the window (completed, stopped and failed alike); a run with
  unknown usage counts its conservative charge in ``total_tokens``;
- hit rate = runs stopped by the budget (stop_reason ``budget_*``) / finished runs that ran
  under a budget (``budgeted_runs``: at least one ``limit_*`` set, or stopped by a budget;
  ``budgetlens.analysis.queries.IS_BUDGETED``). Runs without any limit (imported history, foreign traces,
  days before limits existed) cannot be stopped by a budget and are left out; the rate is None
  when no finished run was budgeted. The intervention rate, over the same runs, also counts runs
  that were downgraded or summarized;
- cost is NULL (never $0) when nothing in the group is priced; unpriced calls are counted apart;
  a run's ``cost_usd`` is the sum of its priced calls (known spend), so a run with unpriced calls
  or unknown usage has a partial cost: sums and charts show it as known spend (the Overview counts
  such runs in ``partially_priced_runs``), but cost baselines and presets use only runs whose
  cost is fully known (``n_cost`` of them; ``budgetlens.analysis.queries.COST_KNOWN``);
- times are stored in UTC; day/hour buckets are local to ``Filters.tz``;
- windows (``window_filters``) end now, never in the future and never at the newest run, so a
  collector that stopped sending shows as such; ``window_coverage`` says how many runs of the
  same scope a window leaves out (older or newer than it), for the "2 of 41 runs" notes of the
  CLI and the dashboard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pandas as pd

from budgetlens.analysis import local_periods
from budgetlens.analysis import queries as q
from budgetlens.analysis.cost_totals import cost_is_lower_bound
from budgetlens.analysis.filters import (  # noqa: F401  (re-exported)
    DEFAULT_WINDOW_DAYS,
    Filters,
    WindowCoverage,
    count_runs,
    data_extent,
    filter_options,
    run_query,
    utc_now,
    window_coverage,
    window_filters,
)

# Presets and their rounding live in budgetlens.analysis.presets; re-exported: one analysis namespace.
from budgetlens.analysis.presets import (  # noqa: F401
    DEFAULT_MULTIPLIER,
    LIMIT_COLUMNS,
    OMIT_WHEN_ZERO,
    PRESET_RULES,
    SIGNIFICANT,
    preset_changes,
    preset_limit,
    presets,
    recommended_presets,
    round_significant,
    round_up,
    round_up_significant,
)

# The run lists and one run's detail live in budgetlens.analysis.run_views; re-exported.
from budgetlens.analysis.run_views import (  # noqa: F401
    RunDetail,
    run_detail,
    run_tree,
    runs_export,
    runs_table,
    top_runs,
)
from budgetlens.analysis.spend_queries import for_store

# The low-sample cutoff and the alarm line live in budgetlens.analysis.thresholds; re-exported.
from budgetlens.analysis.thresholds import HIT_RATE_ALARM, LOW_SAMPLE_RUNS
from budgetlens.analysis.values import is_missing, scalar  # noqa: F401  (re-exported)
from budgetlens.store.schema import LIMIT_COLUMNS as LIMIT_COLUMNS_STORE

log = logging.getLogger(__name__)

#: The periods of the cost charts (DuckDB ``date_trunc`` parts; a week starts on Monday).
PERIODS = ("hour", "day", "week", "month")


@dataclass(frozen=True)
class Overview:
    """Headline figures of a window. Rates are 0..1 over the ``budgeted_runs`` (finished runs
    that ran under a budget), None when there is none; cost_usd is the
    sum of the priced calls of the runs (USD, known spend) or None when nothing is priced; tokens
    are counts. Sums count each run's own use (``spend_queries.SPEND``: a parent's stored totals include
    its children's, which are counted once, in the child); ``p95_total_tokens`` is per run, inclusive. ``priced_runs`` counts runs with a cost; ``partially_priced_runs`` those of them
    whose cost is not complete (they also had unpriced calls or unknown usage). When
    ``cost_is_lower_bound``, ``cost_usd`` leaves usage out: show it as "+ unpriced usage"."""

    runs: int
    finished_runs: int
    budgeted_runs: int
    cost_usd: float | None
    priced_runs: int
    partially_priced_runs: int
    unpriced_calls: int
    unknown_usage_runs: int
    hit_rate: float | None
    intervention_rate: float | None
    p95_total_tokens: float | None
    per_task: pd.DataFrame = field(repr=False)
    #: runs with a data-quality flag (``runs.quality``: repaired times, normalized usage, ...)
    flagged_runs: int = 0
    #: Token sums of the runs (None when no run reports them): input includes the cache reads
    #: and writes, output includes reasoning (design §3).
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    #: Shares 0..1 over the runs reporting both the part and its whole: cache reads and cache
    #: writes of input tokens, reasoning of output tokens (None when no run reports them).
    cache_read_share: float | None = None
    cache_write_share: float | None = None
    reasoning_share: float | None = None
    #: "tool spend": the paid tool calls' fees of the runs (USD, 0.0 without any), apart from
    #: ``cost_usd`` (model cost)
    tool_cost_usd: float = 0.0

    @property
    def cost_is_lower_bound(self) -> bool:
        """True when ``cost_usd`` leaves out usage of unknown cost (unpriced calls, partly priced
        runs, or calls with unknown usage): show it as known spend "+ unpriced usage"."""
        return cost_is_lower_bound(self.unpriced_calls, self.partially_priced_runs, self.unknown_usage_runs)

    def alarms(self, threshold: float = HIT_RATE_ALARM) -> list[str]:
        """Task types whose hit rate is above ``threshold``, whatever their sample, in
        ``per_task`` order (``split_alarms`` tells the alarms from the low samples)."""
        hot, _ = split_alarms(self.per_task, threshold, min_runs=0)
        return self.per_task.loc[self.per_task.index.isin(hot.index), "task_type"].tolist()


def split_alarms(
    per_task: pd.DataFrame, threshold: float = HIT_RATE_ALARM, min_runs: int = LOW_SAMPLE_RUNS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The one "in alarm" rule: the rows of ``per_task`` ([task_type, hit_rate, budgeted_runs,
    ...], ``Overview.per_task``) whose hit rate (0..1) is above ``threshold``, highest first, as
    (alarms: at least ``min_runs`` budgeted runs, low sample: fewer; one stop in four runs is
    25 % but says little). A task type without a hit rate (no budgeted run) is never in alarm.
    Pure."""
    if per_task.empty:
        return per_task, per_task
    rates = pd.to_numeric(per_task["hit_rate"], errors="coerce").fillna(0)
    hot = per_task[rates > threshold].sort_values("hit_rate", ascending=False)
    enough = pd.to_numeric(hot["budgeted_runs"], errors="coerce").fillna(0) >= min_runs
    return hot[enough], hot[~enough]


def overview(conn, f: Filters) -> Overview:
    """Headline figures and per task type [task_type, runs, budgeted_runs, hit_rate,
    intervention_rate, cost_usd, p95_total_tokens, cache_read_share, cache_write_share,
    reasoning_share] for the filtered runs (hit_rate and intervention_rate None for a task type
    without budgeted runs; shares 0..1 as ``Overview.cache_read_share``, None when unreported)."""
    frame = run_query(conn, for_store(conn, q.OVERVIEW), f.params())  # per task type, then the total
    is_total = frame["is_total"].astype(bool)
    totals = frame[is_total].iloc[0]
    per_task = frame[~is_total].reset_index(drop=True)[
        [
            "task_type",
            "runs",
            "budgeted_runs",
            "hit_rate",
            "intervention_rate",
            "cost_usd",
            "p95_total_tokens",
            "cache_read_share",
            "cache_write_share",
            "reasoning_share",
        ]
    ]
    parts = {k: _int_or_none(totals[k]) for k in (*q.TOKEN_PART_METRICS, "input_tokens", "output_tokens")}
    shares = {k: scalar(totals[k]) for k in ("cache_read_share", "cache_write_share", "reasoning_share")}
    return Overview(
        runs=int(totals["runs"]),
        finished_runs=int(totals["finished_runs"]),
        budgeted_runs=int(totals["budgeted_runs"]),
        cost_usd=scalar(totals["cost_usd"]),
        priced_runs=int(totals["priced_runs"]),
        partially_priced_runs=int(totals["partially_priced_runs"]),
        unpriced_calls=int(totals["unpriced_calls"]),
        unknown_usage_runs=int(totals["unknown_usage_runs"]),
        hit_rate=scalar(totals["hit_rate"]),
        intervention_rate=scalar(totals["intervention_rate"]),
        p95_total_tokens=scalar(totals["p95_total_tokens"]),
        per_task=per_task,
        flagged_runs=int(totals["flagged_runs"]),
        tool_cost_usd=float(totals["tool_cost_usd"]),
        **parts,
        **shares,
    )


def _int_or_none(value) -> int | None:
    value = scalar(value)
    return None if value is None else int(value)


def baselines(conn, f: Filters, by_model: bool = False) -> pd.DataFrame:
    """Baselines per task type (and per ``models`` combination when ``by_model``).

    Columns: task_type, (model,) n, low_sample (n < ``LOW_SAMPLE_RUNS``), then p50_/p95_/max_ of total_tokens,
    input_tokens, output_tokens, turns, tool_calls, duration_s (s), then n_cost and
    p50_/p95_/max_cost_usd (USD). Every metric counts all n runs except cost: n_cost <= n is the
    number of runs whose cost is fully known (priced, no unpriced call, usage reported), and the
    cost columns use only those (NULL when there is none), since a partial sum would understate
    the P95. Percentiles: quantile_cont.
    """
    statement = q.BASELINES_BY_TASK_MODEL if by_model else q.BASELINES_BY_TASK
    frame = run_query(conn, statement, {**f.params(), "low_sample_runs": LOW_SAMPLE_RUNS})
    if by_model:
        frame = frame.rename(columns={"models": "model"})
    return frame


def token_part_baselines(conn, f: Filters) -> pd.DataFrame:
    """P50, P95 and max per task type of the parts of a run's tokens: cache reads and cache
    writes (parts of input tokens) and reasoning (part of output tokens), design §3.

    Columns: task_type, n (runs), low_sample (n < ``LOW_SAMPLE_RUNS``), then for each of
    ``queries.TOKEN_PART_METRICS`` n_<part> (runs that report it), p50_<part>, p95_<part>,
    max_<part> (tokens; quantile_cont over those runs only, NULL when none reports it: a
    source that does not report cache reads is never read as 0). Statement
    ``queries.TOKEN_PART_BASELINES``.
    """
    return run_query(conn, q.TOKEN_PART_BASELINES, {**f.params(), "low_sample_runs": LOW_SAMPLE_RUNS})


def model_latency(conn, f: Filters) -> pd.DataFrame:
    """Latency per model over the calls of the filtered runs: model (the response model, else
    the requested one, else 'unknown'), calls, timed_calls (calls with a duration),
    p50_duration_s, p95_duration_s, max_duration_s (seconds per call, quantile_cont over the
    timed calls; NULL when none has a duration). With a model filter only those models' calls
    count. Most calls first. The quantiles come from the rollup's latency sketch
    (``rollup_queries.MODEL_LATENCY_SKETCH``; within a bucket, about 1.33x, of the exact
    quantiles over ``model_calls``)."""
    from budgetlens.analysis import rollup_queries

    return rollup_queries.model_latency(conn, f)


#: Columns of ``limit_history`` and of ``current_limits`` (from ``limit_periods``).
LIMIT_HISTORY_COLUMNS = ("task_type", "since_utc", "last_run_utc", "runs", *LIMIT_COLUMNS_STORE)
CURRENT_LIMITS_COLUMNS = ("task_type", *LIMIT_COLUMNS_STORE, "since_utc", "runs_since", "changes")


def limit_periods(conn, f: Filters) -> pd.DataFrame:
    """Both readings of the limits the filtered runs ran under, in one pass
    (``limit_queries.LIMIT_PERIODS``): the periods of unchanged limits, ``is_current`` on each
    task type's latest, ``changes``, and a row per task type without any limit. Read it once
    for both pages' sections: ``limit_history_of`` and ``current_limits_of`` read it."""
    from budgetlens.analysis import limit_queries

    return run_query(conn, limit_queries.LIMIT_PERIODS, f.params())


def current_limits(conn, f: Filters) -> pd.DataFrame:
    """The limits in force now: per task type those of the latest budgeted run's period of
    unchanged limits (``budgetlens.analysis.limit_queries``; NULL when no run had that limit),
    not the most common ones. Columns: task_type, limit_total_tokens, limit_input_tokens,
    limit_output_tokens, limit_turns, limit_tool_calls, limit_duration_s, limit_cost_usd,
    since_utc (the first run under them, naive UTC), runs_since (runs under them), changes
    (earlier periods: ``limit_history``). ``current_limits_of(limit_periods(conn, f))``."""
    return current_limits_of(limit_periods(conn, f))


def limit_history(conn, f: Filters) -> pd.DataFrame:
    """Every change of limits per task type, oldest first: one row per period of unchanged
    ``limit_*`` values. Columns: task_type, since_utc, last_run_utc (naive UTC), runs, the
    ``limit_*`` columns (NULL = no such limit). Runs without any limit are left out.
    ``limit_history_of(limit_periods(conn, f))``."""
    return limit_history_of(limit_periods(conn, f))


def current_limits_of(periods: pd.DataFrame) -> pd.DataFrame:
    """``current_limits`` from a ``limit_periods`` frame (pure)."""
    current = periods[periods["is_current"].astype(bool)].rename(columns={"runs": "runs_since"})
    return current[list(CURRENT_LIMITS_COLUMNS)].reset_index(drop=True)


def limit_history_of(periods: pd.DataFrame) -> pd.DataFrame:
    """``limit_history`` from a ``limit_periods`` frame (pure): its periods, without the rows of
    task types that ran under no limit."""
    history = periods[periods["since_utc"].notna()][list(LIMIT_HISTORY_COLUMNS)].reset_index(drop=True)
    return history.astype({"runs": "int64"})


#: Columns of ``hit_rate_by_task`` (and of ``budgetlens hit-rate``).
HIT_RATE_COLUMNS = (
    "task_type",
    "finished_runs",
    "budgeted_runs",
    "budget_stops",
    "interventions",
    "hit_rate",
    "intervention_rate",
    # issue 21: budget stops that still returned an answer (budget_wrap_up), and their share
    "answered_stops",
    "answered_share",
)


def hit_rate_daily(conn, f: Filters, period: str = "day") -> pd.DataFrame:
    """Per local day (``f.tz``) and task type: day (date), task_type, finished_runs,
    budgeted_runs (finished under a budget: the rates' denominator), budget_stops,
    interventions, hit_rate, intervention_rate (0..1; None on a day without budgeted runs),
    answered_stops, answered_share (as :func:`hit_rate_by_task`). ``period`` 'hour': per local
    hour instead, ``day`` then the hour's start (naive local timestamp). Raises ValueError for
    another period."""
    if period not in ("day", "hour"):
        raise ValueError(f"period must be 'day' or 'hour', got {period!r}")
    statement, bucket = local_periods.for_window(
        conn, q.HIT_RATE_HOURLY if period == "hour" else q.HIT_RATE_DAILY, f, period
    )
    frame = run_query(conn, statement, {**f.params(), **bucket})
    stamps = pd.to_datetime(frame["day"])
    frame["day"] = stamps if period == "hour" else stamps.dt.date  # DuckDB DATE -> datetime.date
    return frame[["day", *HIT_RATE_COLUMNS]]


def stop_reasons(conn, f: Filters) -> pd.DataFrame:
    """Runs per task type and stop reason: task_type, stop_reason, runs."""
    return run_query(conn, q.STOP_REASONS, f.params())


def cost_by_period(conn, f: Filters, period: str = "day", by: str = "model") -> pd.DataFrame:
    """Cost per local ``period`` (one of ``PERIODS``: 'hour', 'day', 'week' starting Monday,
    'month', in ``f.tz``) and key (``by`` 'model' or 'task_type'). Columns: period_start (naive
    local timestamp), key, cost_usd (USD; NULL when nothing in the bucket is priced), runs,
    unpriced_calls. Both views bucket by the run's start, so a period's total is the same either
    way. Raises ValueError for another period or key."""
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")
    if by not in ("model", "task_type"):
        raise ValueError(f"by must be 'model' or 'task_type', got {by!r}")
    from budgetlens.analysis import rollup_queries

    statement = rollup_queries.COST_BY_PERIOD_MODEL if by == "model" else q.COST_BY_PERIOD_TASK
    statement, bucket = local_periods.for_window(conn, for_store(conn, statement), f, period)
    return run_query(conn, statement, {**f.params(), "period": period, **bucket})


def cost_per_run(conn, f: Filters, per_decade: int = 4) -> pd.DataFrame:
    """Histogram of run cost on log-spaced buckets (``per_decade`` per power of ten); unpriced
    runs are left out. Columns: task_type, bucket_low_usd, bucket_high_usd, runs."""
    return run_query(conn, q.COST_PER_RUN, {**f.params(), "per_decade": float(per_decade)})


def token_distribution(conn, f: Filters, per_decade: int = 10) -> pd.DataFrame:
    """Histogram of run total tokens on log-spaced buckets. Columns: task_type,
    bucket_low_tokens, bucket_high_tokens, runs."""
    return run_query(conn, q.TOKEN_DISTRIBUTION, {**f.params(), "per_decade": float(per_decade)})


def hit_rate_by_task(conn, f: Filters) -> pd.DataFrame:
    """The Hit rate page's figures per task type: task_type, finished_runs, budgeted_runs (the
    rates' denominator: finished runs that ran under a budget), budget_stops, interventions,
    hit_rate, intervention_rate (0..1; None for a task type without budgeted runs), answered_stops
    (budget stops whose final call used the wrap-up slice: ``budget_wrap_up``) and answered_share
    (answered_stops / budget_stops, 0..1; None without a budget stop)."""
    return run_query(conn, for_store(conn, q.OVERVIEW_PER_TASK), f.params())[list(HIT_RATE_COLUMNS)]
