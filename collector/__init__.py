"""budgetlens: hard budgets for LLM agent runs.

The names an agent loop imports. Everything else in the package is private. Importing
``budgetlens`` loads the guard only (no DuckDB, pandas, Plotly or Streamlit): the in-process
exporter ``DuckDBSpanExporter`` is imported on first use.

Wings (design §8): ``guard`` (the run budget), ``otlp`` (OTLP -> rows), ``ingest`` (the collector
service), ``importers`` (agent logs), ``store`` (DuckDB), ``analysis`` (baselines, presets, hit
rate), ``sample``, ``cli``; ``dashboard`` is the UI. ``usage``, ``pricing``, ``semconv`` and
``config`` are the shared contract.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from budgetlens.guard.children import use_store_estimate
from budgetlens.guard.otel_setup import configure
from budgetlens.guard.pool import PoolAlert, TokenPool
from budgetlens.guard.results import (
    Action,
    BudgetEvent,
    BudgetExceeded,
    BudgetStats,
    Effect,
    LimitChange,
    Reservation,
    RunResult,
)
from budgetlens.guard.run_budget import RunBudget
from budgetlens.guard.snapshot import Authorization, RunSnapshot
from budgetlens.guard.spend import SpendAlert, SpendTracker
from budgetlens.pricing import cost_usd
from budgetlens.usage import Usage, UsageAccumulator, normalize_usage

if TYPE_CHECKING:
    from budgetlens.ingest.exporter import DuckDBSpanExporter

__all__ = [
    "Action",
    "Authorization",
    "BudgetEvent",
    "BudgetExceeded",
    "BudgetStats",
    "DuckDBSpanExporter",
    "Effect",
    "LimitChange",
    "PoolAlert",
    "Reservation",
    "RunBudget",
    "RunResult",
    "RunSnapshot",
    "SpendAlert",
    "SpendTracker",
    "TokenPool",
    "Usage",
    "UsageAccumulator",
    "configure",
    "cost_usd",
    "normalize_usage",
]


def _store_p50(db: Any, task_type: str) -> tuple[float | None, float | None]:
    """``RunBudget.fan_out(db=...)``'s estimate, read by the analysis wing (loaded on first use):
    wired here, at the top of the import graph, so the guard imports neither store nor analysis."""
    from budgetlens.analysis.fan_out_estimate import p50_estimate

    return p50_estimate(db, task_type)


use_store_estimate(_store_p50)


def __getattr__(name: str) -> Any:
    """``DuckDBSpanExporter`` on first use (it loads the OTel SDK and the store)."""
    if name == "DuckDBSpanExporter":
        from budgetlens.ingest.exporter import DuckDBSpanExporter

        return DuckDBSpanExporter
    raise AttributeError(f"module 'budgetlens' has no attribute {name!r}")
