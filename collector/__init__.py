"""budgetlens: hard budgets for LLM agent runs.

The names an agent loop imports. Everything else in the package is private.
"""

from collector.actions import (
    Action,
    BudgetEvent,
    BudgetExceeded,
    BudgetStats,
    Reservation,
    RunResult,
)
from collector.exporter import DuckDBSpanExporter
from collector.guard import RunBudget
from collector.pricing import cost_usd
from collector.spend import SpendAlert, SpendTracker
from collector.usage import Usage, UsageAccumulator, normalize_usage

__all__ = [
    "Action",
    "BudgetEvent",
    "BudgetExceeded",
    "BudgetStats",
    "DuckDBSpanExporter",
    "Reservation",
    "RunBudget",
    "RunResult",
    "SpendAlert",
    "SpendTracker",
    "Usage",
    "UsageAccumulator",
    "cost_usd",
    "normalize_usage",
]
