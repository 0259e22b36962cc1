"""The what-if replay itself (design §6): a candidate budget (``Budget``: limits per task type)
replayed call by call over the runs a filter keeps (``replay``, one DuckDB statement,
``budgetlens.analysis.replay_queries.REPLAY_RUNS``), and its result (``WhatIf``). The outcomes
and what the evidence tools build on top (presets, the trade-off curve, targets) are described
in ``budgetlens.analysis.whatif``, which re-exports every name here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import duckdb
import pandas as pd

from budgetlens.analysis import replay_queries as rq
from budgetlens.analysis.filters import Filters, run_query, used_params
from budgetlens.guard.preset_file import read_preset_document
from budgetlens.limits import LIMIT_KEYS, check_limit

__all__ = ["RUN_COLUMNS", "SUMMARY_COLUMNS", "Budget", "WhatIf", "replay"]

#: Summary columns of a replay (per task type).
SUMMARY_COLUMNS = (
    "task_type",
    "runs",
    "stopped",
    "censored",
    "completed",
    "hit_rate",
    "hit_rate_upper",
    "stops_tokens",
    "stops_cost",
    "stops_turns",
    "stops_tools",
    "stops_time",
    "runs_without_calls",
    "spent_tokens",
    "avoided_tokens",
    "avoided_tokens_share",
    "spent_cost_usd",
    "avoided_cost_usd",
    "avoided_cost_share",
)
#: Columns of a replay's run list (stopped and censored runs).
RUN_COLUMNS = (
    "run_id",
    "task_type",
    "start_utc",
    "outcome",
    "stop_reason",
    "stop_turn",
    "calls",
    "recorded_stop_reason",
    "spent_tokens",
    "avoided_tokens",
    "spent_cost_usd",
    "avoided_cost_usd",
)


@dataclass(frozen=True)
class Budget:
    """A candidate budget: per task type (None = runs without one) the limits of
    ``budgetlens.limits.LIMIT_KEYS`` (None or missing = no such limit). ``default`` applies
    to task types not in ``limits``. Raises ValueError naming the key for a limit the guard would
    refuse."""

    limits: Mapping[str | None, Mapping[str, float | None]] = field(default_factory=dict)
    default: Mapping[str, float | None] = field(default_factory=dict)

    def __post_init__(self):
        for task_type, entry in [*self.limits.items(), ("(default)", self.default)]:
            unknown = sorted(set(entry) - set(LIMIT_KEYS))
            if unknown:
                raise ValueError(f"budget for {task_type}: unknown limit(s) {unknown}; allowed: {LIMIT_KEYS}")
            for key, value in entry.items():
                check_limit(key, value, label=f"budget for {task_type}: {key}")

    @classmethod
    def uniform(cls, **limits: float | None) -> Budget:
        """The same limits for every task type (``max_total_tokens=50_000, max_turns=20``)."""
        return cls(default={k: v for k, v in limits.items() if v is not None})

    @classmethod
    def from_presets(cls, presets_df: pd.DataFrame) -> Budget:
        """From a ``budgetlens.analysis.presets.presets`` frame (one row per task type)."""
        limits: dict[str | None, dict[str, float | None]] = {}
        for _, row in presets_df.iterrows():
            entry: dict[str, float | None] = {}
            for key in LIMIT_KEYS:
                value = row.get(key)
                if value is not None and not pd.isna(value):
                    entry[key] = float(value)
            limits[None if pd.isna(row["task_type"]) else row["task_type"]] = entry
        return cls(limits=limits)

    @classmethod
    def from_preset_file(cls, path: str | os.PathLike) -> Budget:
        """From a preset file (YAML/TOML/JSON, ``budgetlens.guard.preset_file``): its task types'
        limits; task types the file does not name have no limit. Raises ValueError as
        ``read_preset_document``."""
        document = read_preset_document(path)
        limits = {
            task_type: {k: preset[k] for k in LIMIT_KEYS if preset.get(k) is not None}
            for task_type, preset in document["presets"].items()
        }
        return cls(limits=limits)

    def for_task(self, task_type: str | None) -> dict[str, float | None]:
        """The limits of ``task_type`` (every key; None = no limit)."""
        entry = self.limits.get(task_type, self.default)
        return {key: entry.get(key) for key in LIMIT_KEYS}


def budget_params(budgets: Sequence[Budget], task_types: Sequence[str | None]) -> dict:
    """The ``$b_*`` parameters of ``replay_queries.REPLAY_RUNS`` for ``budgets`` (ids 0..n-1)."""
    params: dict[str, list] = {"b_id": [], "b_task_type": [], **{f"b_{k}": [] for k in LIMIT_KEYS}}
    for budget_id, budget in enumerate(budgets):
        for task_type in task_types:
            params["b_id"].append(budget_id)
            params["b_task_type"].append(task_type)
            for key, value in budget.for_task(task_type).items():
                params[f"b_{key}"].append(None if value is None else float(value))
    return params


def task_types_of(conn, f: Filters) -> list[str | None]:
    """The task types of the runs ``f`` keeps (None included), sorted, NULL last."""
    return [row[0] for row in conn.execute(rq.TASK_TYPES, used_params(rq.TASK_TYPES, f.params())).fetchall()]


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the rates and shares to a ``REPLAY_SUMMARY`` frame."""
    out = frame.copy()
    runs = out["runs"].where(out["runs"] > 0)
    out["hit_rate"] = out["stopped"] / runs
    out["hit_rate_upper"] = (out["stopped"] + out["censored"]) / runs
    out["avoided_tokens_share"] = out["avoided_tokens"] / out["spent_tokens"].where(out["spent_tokens"] > 0)
    out["avoided_cost_share"] = out["avoided_cost_usd"] / out["spent_cost_usd"].where(
        out["spent_cost_usd"] > 0
    )
    return out


@dataclass(frozen=True)
class WhatIf:
    """A replay's result. ``summary``: one row per task type (``SUMMARY_COLUMNS``: runs, stopped,
    censored, completed, hit_rate and hit_rate_upper (0..1), stops per reason, tokens and USD
    spent and avoided, with shares 0..1). ``runs``: the stopped and censored runs
    (``RUN_COLUMNS``; ``stop_turn`` is the call that would not have been sent, 1-based).
    ``budget``: the replayed budget."""

    summary: pd.DataFrame
    runs: pd.DataFrame = field(repr=False)
    budget: Budget = field(repr=False)
    #: How many stopped and censored runs there are (``runs`` may list only the first of them).
    run_count: int | None = None


@contextlib.contextmanager
def dropped_after(conn, drop: str) -> Iterator[None]:
    """Run ``drop`` (a temp table's ``DROP TABLE IF EXISTS``) when the block ends. After a
    failure in the block its error is the one raised: the drop is tried and its own error
    ignored (inside a transaction the failure aborted it, and the table goes with its rollback)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            conn.execute(drop)
        raise
    conn.execute(drop)


def replay(conn: duckdb.DuckDBPyConnection, f: Filters, budget: Budget) -> WhatIf:
    """Replay ``budget`` over the runs ``f`` keeps, call by call (see the module docstring).

    Returns a ``WhatIf``; an empty window gives empty frames with the documented columns.
    """
    task_types = task_types_of(conn, f)
    if not task_types:
        return WhatIf(pd.DataFrame(columns=SUMMARY_COLUMNS), pd.DataFrame(columns=RUN_COLUMNS), budget)
    params = {**f.params(), **budget_params([budget], task_types)}
    run_query(conn, rq.CREATE_REPLAY_TABLE, params)
    with dropped_after(conn, rq.DROP_REPLAY_TABLE):
        summary = summarize(run_query(conn, rq.REPLAY_TABLE_SUMMARY, params))[list(SUMMARY_COLUMNS)]
        runs = run_query(conn, rq.REPLAY_TABLE_STOPPED, {})
    runs = runs.sort_values(["task_type", "avoided_tokens", "run_id"], ascending=[True, False, True])
    runs = runs[list(RUN_COLUMNS)].reset_index(drop=True)
    return WhatIf(summary.reset_index(drop=True), runs, budget, len(runs))
