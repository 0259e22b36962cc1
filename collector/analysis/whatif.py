"""What-if replay (design §6): how often a candidate budget would have stopped the stored runs,
which ones, where, and what it would have saved.

A candidate budget (``Budget``: limits per task type) comes from a multiplier over the evidence
(P95 x multiplier, plain or censoring-aware: ``evidence_presets``), from explicit limits
(``Budget.uniform``) or from a preset file (``Budget.from_preset_file``). ``replay`` runs it call
by call over the history in DuckDB (``budgetlens.analysis.replay_queries.REPLAY_RUNS``: window
functions over ``model_calls`` in time order, the first crossing per run), so all task types of
1M runs / 10M calls replay in one statement.

Outcomes per run: *stopped* (the budget stops it, at a turn and with a stop reason; a run the old
budget stopped counts as stopped when the new budget does not raise that limit), *censored* (the
old budget stopped it and the new one is larger: what it would have used is unknown) or
*completed*. The projected hit rate is stopped / runs (every run of the window would have run
under the candidate); ``hit_rate_upper`` adds the censored runs. Avoided tokens and USD are
what the stopped runs spent from their stopping call on (the calls that would not have been sent).

The trade-off curve (``tradeoff``) replays the multipliers 1.0–3.0 in one pass;
``tradeoff`` and ``plan_for_target`` use the fast path (``budgetlens.analysis.whatif_peaks``:
per-run peaks, one pass over the runs, calls read only for the runs some budget may stop, by
integer run key; the chosen presets of ``plan_for_target`` are replayed from the curve's walk),
with the same values as the SQL replay, which stays the reference (``full_replay=True``);
``smallest_multiplier`` picks, per task type, the smallest one whose projected hit rate meets a
target (default 5 %).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from budgetlens.analysis import replay_queries as rq
from budgetlens.analysis import whatif_peaks
from budgetlens.analysis.censoring import evidence_frames
from budgetlens.analysis.filters import Filters, run_query
from budgetlens.analysis.presets import (
    METHODS,
    PRESET_RULES,
    preset_grid,
    recommended_presets,
    recommended_presets_each,
)
from budgetlens.analysis.replay import (  # noqa: F401  (re-exported)
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    Budget,
    WhatIf,
    budget_params,
    replay,
    summarize,
    task_types_of,
)

__all__ = [
    "CURVE_MULTIPLIERS",
    "DEFAULT_TARGET_HIT_RATE",
    "METHODS",
    "VERDICT_MET",
    "VERDICT_NOT_MET",
    "VERDICT_UNKNOWN",
    "Budget",
    "Evidence",
    "TargetPlan",
    "WhatIf",
    "evidence",
    "evidence_presets",
    "plan_document",
    "plan_for_target",
    "replay",
    "smallest_multiplier",
    "target_presets",
    "tradeoff",
    "with_projection",
]

#: The target hit rate of ``smallest_multiplier`` unless the user picks one (0..1).
DEFAULT_TARGET_HIT_RATE = 0.05
#: The multipliers of the trade-off curve: 1.0 to 3.0 in steps of 0.1.
CURVE_MULTIPLIERS: tuple[float, ...] = tuple(round(1.0 + 0.1 * i, 1) for i in range(21))


@dataclass(frozen=True)
class Evidence:
    """What presets rest on: ``baselines`` (``views.baselines``) and ``censoring``
    (``censoring.censored_baselines``) of the same filters."""

    baselines: pd.DataFrame
    censoring: pd.DataFrame


def evidence(conn, f: Filters) -> Evidence:
    """The plain and the censoring-aware baselines of ``f``, from one read of its runs
    (``censoring.evidence_frames``: the frames of ``views.baselines`` and
    ``censoring.censored_baselines``, the same values)."""
    return Evidence(*evidence_frames(conn, f))


def evidence_presets(ev: Evidence, multiplier: float, method: str = "auto") -> pd.DataFrame:
    """Presets at ``multiplier`` from the evidence, per ``method`` (``METHODS``).

    Returns the ``presets.presets`` frame plus columns: method (``plain`` or ``kaplan-meier``),
    censored_share (0..1), lower_bound_keys (the preset keys whose Kaplan–Meier P95 is only a
    lower bound: raise that limit for a while to learn the real tail), km_p95_total_tokens (the
    Kaplan–Meier P95 of total tokens, whether used or not), multiplier. Raises
    ValueError for an unknown method or multiplier (as ``presets``).
    """
    return recommended_presets(ev.baselines, ev.censoring, multiplier, method)


def with_projection(conn, f: Filters, presets_df: pd.DataFrame) -> pd.DataFrame:
    """``presets_df`` (one row per task type, the limit keys as columns) plus
    ``projected_hit_rate`` and ``projected_hit_rate_upper`` (0..1): the replay of those presets
    over the runs ``f`` keeps (``replay``)."""
    summary = replay(conn, f, Budget.from_presets(presets_df)).summary.set_index("task_type")
    out = presets_df.copy()
    out["projected_hit_rate"] = [
        summary["hit_rate"].get(t) if t in summary.index else None for t in out["task_type"]
    ]
    out["projected_hit_rate_upper"] = [
        summary["hit_rate_upper"].get(t) if t in summary.index else None for t in out["task_type"]
    ]
    return out


def tradeoff(
    conn,
    f: Filters,
    ev: Evidence | None = None,
    multipliers: Iterable[float] = CURVE_MULTIPLIERS,
    method: str = "auto",
    *,
    full_replay: bool = False,
) -> pd.DataFrame:
    """The trade-off curve: for each multiplier (default 1.0–3.0 by 0.1) and task type, the
    replay of the presets at that multiplier: from per-run peaks, one pass over the runs and the
    calls of the runs some multiplier may stop only (``whatif_peaks.summaries``), or with
    ``full_replay`` the reference, one SQL replay of every multiplier (``REPLAY_SUMMARY``); the
    same values.

    Columns: multiplier, then ``SUMMARY_COLUMNS`` (task_type, runs, stopped, censored, ...,
    hit_rate, avoided_tokens, avoided_cost_usd, shares). Empty (those columns) for an empty window.
    """
    ev = ev if ev is not None else evidence(conn, f)
    grid = [float(m) for m in multipliers]
    if not full_replay:
        return _fast_curve(conn, f, ev, grid, method)[0]
    task_types = task_types_of(conn, f)
    if not task_types or ev.baselines.empty or not grid:
        return pd.DataFrame(columns=["multiplier", *SUMMARY_COLUMNS])
    budgets = [Budget.from_presets(evidence_presets(ev, m, method)) for m in grid]
    params = {**f.params(), **budget_params(budgets, task_types)}
    frame = summarize(run_query(conn, rq.REPLAY_SUMMARY, params))
    return _curve_frame(frame, grid)


def _curve_frame(frame: pd.DataFrame, grid: list[float]) -> pd.DataFrame:
    frame["multiplier"] = frame["budget_id"].map(dict(enumerate(grid)))
    columns = ["multiplier", *SUMMARY_COLUMNS]
    return frame[columns].sort_values(["task_type", "multiplier"]).reset_index(drop=True)


def _fast_curve(
    conn, f: Filters, ev: Evidence, grid: list[float], method: str
) -> tuple[pd.DataFrame, whatif_peaks.Replays | None]:
    """The curve from per-run peaks (``whatif_peaks``), and the walk it read (None for an empty
    window), from which a budget made of the curve's presets replays without reading again.
    The limits are the presets frames' (the tests compare), computed once."""
    columns = ["multiplier", *SUMMARY_COLUMNS]
    if ev.baselines.empty or not grid:
        return pd.DataFrame(columns=columns), None
    budgets = [Budget(limits=entry) for entry in preset_grid(ev.baselines, ev.censoring, grid, method)]
    replays = whatif_peaks.prepare(conn, f, budgets)
    if replays is None:
        return pd.DataFrame(columns=columns), None
    return _curve_frame(replays.summaries([replays.verdict(b, turns=False) for b in budgets]), grid), replays


#: ``smallest_multiplier`` verdicts: ``met`` when the upper bound (stopped + censored runs) meets
#: the target, ``unknown`` when only the lower bound (stopped runs) does, ``not met`` otherwise.
VERDICT_MET = "met"
VERDICT_UNKNOWN = "unknown"
VERDICT_NOT_MET = "not met"


def smallest_multiplier(curve: pd.DataFrame, target: float = DEFAULT_TARGET_HIT_RATE) -> pd.DataFrame:
    """Per task type, the smallest multiplier of ``curve`` (``tradeoff``) that meets ``target``
    (0..1). A projected hit rate with censored runs is a range, ``hit_rate`` (the stopped runs)
    to ``hit_rate_upper`` (plus the censored ones), so the verdict is ``met`` only when the upper
    bound is at most the target, ``unknown`` when only the lower bound is (the smallest such
    multiplier is chosen), ``not met`` otherwise (at the largest multiplier).

    Columns: task_type, multiplier (None when ``not met``), hit_rate, hit_rate_upper,
    avoided_tokens, avoided_cost_usd (at that multiplier), verdict (``VERDICT_*``), met (bool:
    verdict is ``met``). Raises ValueError for a target outside [0, 1]. Pure."""
    if not (isinstance(target, int | float) and 0 <= target <= 1):
        raise ValueError(f"target hit rate must be a number in [0, 1], got {target!r}")
    rows = []
    for task_type, group in curve.groupby("task_type", dropna=False, sort=True):
        group = group.sort_values("multiplier")
        lower = group["hit_rate"].fillna(0)
        upper = group["hit_rate_upper"].fillna(lower)
        sure = group[upper <= target + 1e-12]
        maybe = group[lower <= target + 1e-12]
        if not sure.empty:
            verdict, chosen = VERDICT_MET, sure.iloc[0]
        elif not maybe.empty:
            verdict, chosen = VERDICT_UNKNOWN, maybe.iloc[0]
        else:
            verdict, chosen = VERDICT_NOT_MET, group.iloc[-1]
        rows.append(
            {
                "task_type": None if pd.isna(task_type) else task_type,
                "multiplier": None if verdict == VERDICT_NOT_MET else float(chosen["multiplier"]),
                "hit_rate": chosen["hit_rate"],
                "hit_rate_upper": chosen["hit_rate_upper"],
                "avoided_tokens": chosen["avoided_tokens"],
                "avoided_cost_usd": chosen["avoided_cost_usd"],
                "verdict": verdict,
                "met": verdict == VERDICT_MET,
            }
        )
    columns = [
        "task_type",
        "multiplier",
        "hit_rate",
        "hit_rate_upper",
        "avoided_tokens",
        "avoided_cost_usd",
        "verdict",
        "met",
    ]
    return pd.DataFrame(rows, columns=columns)


def target_presets(
    ev: Evidence, curve: pd.DataFrame, target: float = DEFAULT_TARGET_HIT_RATE, method: str = "auto"
) -> pd.DataFrame:
    """The preset of each task type at the smallest multiplier of ``curve`` that meets ``target``
    (``smallest_multiplier``: ``verdict`` met / unknown / not met, ``met`` only when the upper
    bound meets it); where none does, at the curve's largest multiplier.

    Columns: the ``evidence_presets`` columns (task_type, n, low_sample, the limit keys, method,
    censored_share, lower_bound_keys, multiplier), then projected_hit_rate, projected_hit_rate_upper,
    avoided_tokens, avoided_cost_usd, met, target_hit_rate. Empty for an empty curve.
    """
    choice = smallest_multiplier(curve, target)
    largest = float(curve["multiplier"].max()) if len(curve) else CURVE_MULTIPLIERS[-1]
    picks = {}
    for _, pick in choice.iterrows():
        unset = pick["multiplier"] is None or pd.isna(pick["multiplier"])
        picks[pick["task_type"]] = (float(largest if unset else pick["multiplier"]), pick)
    # every task type's preset at its own multiplier, from one choice of the P95s
    table = recommended_presets_each(
        ev.baselines, ev.censoring, {t: m for t, (m, _) in picks.items()}, method
    )
    mine = {None if pd.isna(row["task_type"]) else row["task_type"]: row for row in table.to_dict("records")}
    rows = []
    for task_type, (_multiplier, pick) in picks.items():  # the curve's order
        if task_type not in mine:
            continue
        row = dict(mine[task_type])
        row.update(
            projected_hit_rate=pick["hit_rate"],
            projected_hit_rate_upper=pick["hit_rate_upper"],
            avoided_tokens=pick["avoided_tokens"],
            avoided_cost_usd=pick["avoided_cost_usd"],
            verdict=pick["verdict"],
            met=bool(pick["met"]),
            target_hit_rate=float(target),
        )
        rows.append(row)
    columns = [
        "task_type",
        "n",
        "low_sample",
        *PRESET_RULES,
        "method",
        "censored_share",
        "lower_bound_keys",
        "km_p95_total_tokens",
        "multiplier",
        "projected_hit_rate",
        "projected_hit_rate_upper",
        "avoided_tokens",
        "avoided_cost_usd",
        "verdict",
        "met",
        "target_hit_rate",
    ]
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class TargetPlan:
    """Everything the what-if page and ``budgetlens whatif --view target`` show for a target hit
    rate: the ``evidence``, the trade-off ``curve`` (``tradeoff``), the ``presets`` at each task
    type's smallest multiplier that meets ``target`` (``target_presets``), and the ``replay`` of
    those presets (which runs they stop, where, and what they avoid)."""

    evidence: Evidence = field(repr=False)
    curve: pd.DataFrame = field(repr=False)
    presets: pd.DataFrame = field(repr=False)
    replay: WhatIf = field(repr=False)
    target: float
    method: str


def plan_for_target(
    conn,
    f: Filters,
    target: float = DEFAULT_TARGET_HIT_RATE,
    method: str = "auto",
    *,
    run_limit: int | None = None,
    full_replay: bool = False,
) -> TargetPlan:
    """The ``TargetPlan`` of ``f`` for ``target`` (0..1) and ``method`` (``METHODS``): the curve
    and the replay from per-run peaks (``whatif_peaks``), or with ``full_replay`` the reference
    SQL replay (the same values). ``run_limit`` keeps that many of the replay's run rows (the
    rows a page shows; ``replay.run_count`` counts them all). Raises ValueError for a target
    outside [0, 1] or an unknown method."""
    if not (isinstance(target, int | float) and 0 <= target <= 1):
        raise ValueError(f"target hit rate must be a number in [0, 1], got {target!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    ev = evidence(conn, f)
    if full_replay:
        curve = tradeoff(conn, f, ev, method=method, full_replay=True)
        replays = None
    else:
        curve, replays = _fast_curve(conn, f, ev, [float(m) for m in CURVE_MULTIPLIERS], method)
    chosen = target_presets(ev, curve, target, method)
    budget = Budget.from_presets(chosen)
    if full_replay:
        replayed = replay(conn, f, budget)
        if run_limit is not None:
            replayed = WhatIf(replayed.summary, replayed.runs.head(run_limit), budget, replayed.run_count)
    elif replays is not None and replays.covers(budget):  # the curve's presets: nothing more to read
        replayed = replays.whatif(budget, run_limit)
    else:
        replayed = whatif_peaks.replay_fast(conn, f, budget, run_limit=run_limit)
    return TargetPlan(ev, curve, chosen, replayed, float(target), method)


def plan_document(
    plan: TargetPlan, f: Filters, first_utc=None, last_utc=None, generated_utc=None
) -> dict[str, Any]:
    """The preset document (``budgetlens.analysis.preset_export.build_document``) of ``plan``'s
    presets: each task type at its own multiplier (in its ``basis``; the top-level
    ``multiplier`` is the largest), with the provenance of ``f`` (filters, date range: the
    filter's bounds, else ``first_utc`` / ``last_utc``), the method and the target hit rate."""
    from budgetlens.analysis import preset_export

    origin = preset_export.provenance(f, plan.method, first_utc, last_utc, plan.target)
    top = float(plan.presets["multiplier"].max()) if len(plan.presets) else CURVE_MULTIPLIERS[-1]
    return preset_export.build_document(
        plan.presets, top, None, plan.evidence.baselines, generated_utc=generated_utc, provenance=origin
    )
