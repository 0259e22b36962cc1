"""Hit rate: the share of finished runs a budget stopped, per day and task type with the 20 %
alarm line; stop reasons; interventions (downgrades, summaries). Keys: ``hit_rate_``.

The rule of the time axis: a window of 48 hours or less (``_ui.period`` is 'hour', the bar
period of every time chart) draws the rates per local hour; a longer one per local day."""

from __future__ import annotations

import streamlit as st

from budgetlens.analysis.views import HIT_RATE_ALARM, LOW_SAMPLE_RUNS
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _tables, _ui
from budgetlens.dashboard.formatting import format_hit_rate


def render() -> None:
    f = data.filters()
    ov = data.overview(f)
    bucket = "hour" if _ui.period(f) == "hour" else "day"  # the module's rule: hours up to 48 h
    daily = data.hit_rate_daily(f, period=bucket)

    _ui.header(
        "Budget hit rate",
        f"Above {HIT_RATE_ALARM * 100:.0f} % a budget is too tight or the agent has a bug (stop reasons budget_*).",
        f,
    )
    _ui.alarm_banner(ov.per_task)
    stops = int(daily["budget_stops"].sum()) if not daily.empty else 0
    interventions = int(daily["interventions"].sum()) if not daily.empty else 0
    answered = int(daily["answered_stops"].sum()) if not daily.empty else 0
    _ui.tiles(
        [
            (
                "Hit rate",
                format_hit_rate(ov.hit_rate, ov.finished_runs)
                + (" (low sample)" if _ui.low_sample_mark(ov.budgeted_runs) else ""),
                f"Budget stops / finished budgeted runs ({ov.budgeted_runs:,}); low sample below "
                f"{LOW_SAMPLE_RUNS} runs; no budget = none of the runs ran under a limit",
            ),
            ("Budget stops", f"{stops:,}", None),
            (
                "Answered at the stop",
                f"{format_hit_rate(answered / stops)} ({answered:,})" if stops else "—",
                "Budget stops that still returned an answer: the final call used the wrap-up slice "
                "(stop reason budget_wrap_up)",
            ),
            (
                "Intervention rate",
                format_hit_rate(ov.intervention_rate, ov.finished_runs),
                "Budget stops plus downgraded or summarized runs, over the budgeted runs",
            ),
            (
                "Intervened runs",
                f"{interventions:,}",
                "Runs a budget stopped, downgraded or summarized (a count; the share is the Intervention rate)",
            ),
            (
                f"Budgeted runs (of {ov.finished_runs:,})",
                f"{ov.budgeted_runs:,}",
                f"{ov.budgeted_runs:,} of the {ov.finished_runs:,} finished runs ran under a budget "
                "(at least one limit): the rates' denominator",
            ),
        ]
    )
    if ov.runs == 0:
        _ui.no_runs(f)
    else:
        colors = _ui.task_colors()
        buckets = daily["day"].nunique() if not daily.empty else 0
        if buckets > 1:
            _ui.chart(
                _ui.figure(charts.hit_rate_daily, daily, colors=colors, period=bucket), "hit_rate_daily"
            )
        else:
            st.caption(
                f"All runs of this window fall in one {bucket}: no line to draw; the hit rate per "
                f"task type is in the bars below and the {bucket}'s figures in the table."
            )
        left, right = st.columns(2)
        with left:
            _ui.chart(_ui.figure(charts.stop_reasons, data.stop_reasons(f)), "hit_rate_reasons")
        with right:
            _ui.chart(_ui.figure(charts.rate_by_task, ov.per_task), "hit_rate_by_task")
        if buckets > 1:
            _ui.chart(
                _ui.figure(
                    charts.hit_rate_daily, daily, rate="intervention_rate", colors=colors, period=bucket
                ),
                "hit_rate_interventions",
            )
        if bucket == "hour":
            st.caption("A window of 48 hours or less: rates per hour (a longer window: per day).")
        with st.expander("Hourly figures" if bucket == "hour" else "Daily figures"):
            _tables.table(daily, first=("day", "task_type", "hit_rate", "budgeted_runs", "finished_runs"))


render()
