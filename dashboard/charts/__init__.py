"""Plotly figure builders for the dashboard (pure: no streamlit import, no database access).

Each builder takes the pandas DataFrame an analysis function returns (columns as documented in
``budgetlens.analysis.views``) and returns a ``plotly.graph_objects.Figure`` with titled axes that carry
their units. An empty frame gives an empty figure that says "No runs in this selection", never a
misleading zero. Text formatting (``"unpriced"``, never ``$0``) lives in ``budgetlens.dashboard.formatting``.

One module per concern: ``cost``, ``rates`` (hit rate, intervention rate, stop reasons),
``distributions`` (token distribution, preset comparison), ``runs`` (one run, runs per day) and
``_style`` (palette, colors, shared layout). Every public name is re-exported here, so
``from dashboard import charts; charts.cost_stacked(...)`` keeps working.
"""

from __future__ import annotations

from budgetlens.dashboard.charts._style import (
    EMPTY_TEXT,
    HIT_RATE_ALARM,
    MARKER_COLORS,
    PALETTE,
    STOP_COLORS,
    TASK_COLORS,
    TEMPLATE,
    color_map,
    period_for_span,
    plot_text,
    roll_up,
)
from budgetlens.dashboard.charts.cost import bucket_label, cost_per_run, cost_stacked, spend_by
from budgetlens.dashboard.charts.distributions import preset_comparison, token_distribution
from budgetlens.dashboard.charts.rates import hit_rate_daily, rate_by_task, stop_reasons
from budgetlens.dashboard.charts.runs import run_cost_time, run_turns, runs_per_day
from budgetlens.dashboard.charts.whatif import tradeoff_curve
from budgetlens.dashboard.formatting import (  # re-exported for the pages
    format_change,
    format_duration,
    format_percent,
    format_tokens,
    format_usd,
    is_missing,
)

__all__ = [
    "EMPTY_TEXT",
    "HIT_RATE_ALARM",
    "MARKER_COLORS",
    "PALETTE",
    "STOP_COLORS",
    "TASK_COLORS",
    "TEMPLATE",
    "bucket_label",
    "color_map",
    "period_for_span",
    "plot_text",
    "roll_up",
    "cost_per_run",
    "cost_stacked",
    "format_change",
    "format_duration",
    "format_percent",
    "format_tokens",
    "format_usd",
    "hit_rate_daily",
    "is_missing",
    "preset_comparison",
    "rate_by_task",
    "run_cost_time",
    "run_turns",
    "runs_per_day",
    "spend_by",
    "stop_reasons",
    "token_distribution",
    "tradeoff_curve",
]
