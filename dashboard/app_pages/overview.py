"""Overview: runs, cost, hit rate, P95 tokens, unpriced calls, and the share of input that was
cache reads / writes and of output that was reasoning; a banner per task type whose
budget hit rate is above the alarm line (``HIT_RATE_ALARM``). Session-state keys start with ``overview_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.analysis.views import HIT_RATE_ALARM, LOW_SAMPLE_RUNS
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _tables, _ui
from budgetlens.dashboard.formatting import format_hit_rate, format_percent

#: A tile of a token part no run reports (never 0 %).
NOT_REPORTED = "not reported"


def _part_help(tokens: int | None, part: str, whole: str) -> str:
    if tokens is None:
        return f"No run of the window reports {part} tokens (the source does not send them)"
    return f"{tokens:,} {part} tokens: their share of the {whole} tokens of the runs that report them"


def render() -> None:
    f = data.filters()
    period = _ui.period(f)
    ov = data.overview(f)
    previous_f = _ui.previous_window(f, data.data_extent()[0])
    before = data.overview(previous_f) if previous_f else None

    _ui.header("Overview", "What the agents cost and how often their budgets stop them.", f)
    _ui.alarm_banner(ov.per_task)
    no_runs = ov.runs == 0
    _ui.tiles(
        [
            (
                "Runs",
                f"{ov.runs:,}",
                f"{ov.finished_runs:,} finished, {ov.budgeted_runs:,} of them "
                "under a budget (the hit rate's denominator); the change is against the window of "
                "the same length just before this one, shown only when the data covers all of it",
                _ui.change_text(ov.runs, before.runs) if before else None,
            ),
            (
                "Cost",
                "—" if no_runs else charts.format_usd(ov.cost_usd),
                f"Known spend: the priced calls of {ov.priced_runs:,} runs (USD, prices from "
                "genai-prices); unpriced usage is not included, never counted as $0",
                _ui.change_text(ov.cost_usd, before.cost_usd) if before else None,
            ),
            (
                "Budget hit rate",
                format_hit_rate(ov.hit_rate, ov.finished_runs)
                + (" (low sample)" if _ui.low_sample_mark(ov.budgeted_runs) else ""),
                f"Finished budgeted runs stopped by a budget (stop reason budget_*) over "
                f"{ov.budgeted_runs:,} budgeted runs; alarm above {HIT_RATE_ALARM * 100:.0f} %; low sample "
                f"below {LOW_SAMPLE_RUNS} runs; no budget = none of the runs ran under a limit",
            ),
            (
                "P95 tokens / run",
                charts.format_tokens(ov.p95_total_tokens),
                "95th percentile of total tokens per run (quantile_cont): "
                + ("n/a" if ov.p95_total_tokens is None else f"{ov.p95_total_tokens:,.1f}"),
            ),
        ]
    )
    _ui.tiles(
        [
            (
                "Intervention rate",
                format_hit_rate(ov.intervention_rate, ov.finished_runs),
                "Budget stops plus downgraded or summarized runs, over the budgeted runs (a share, "
                "as on the Hit rate page; the count of runs is there as Intervened runs)",
            ),
            (
                "Priced runs",
                f"{ov.priced_runs:,}",
                f"Runs with a cost; {ov.partially_priced_runs:,} of them also had unpriced calls or "
                "unknown usage, so their cost is partial",
            ),
            (
                "Unpriced calls",
                f"{ov.unpriced_calls:,}",
                "Calls with reported usage but no known price: not in the cost, never counted as $0",
            ),
            (
                "Unknown-usage runs",
                f"{ov.unknown_usage_runs:,}",
                "Runs with a call whose usage was not reported; the reservation was charged",
            ),
        ]
    )
    _ui.tiles(
        [
            (
                "Input tokens",
                charts.format_tokens(ov.input_tokens),
                "All input tokens of the runs, cache reads and cache writes included; output: "
                + charts.format_tokens(ov.output_tokens)
                + " tokens, reasoning included",
            ),
            (
                "Cache reads",
                format_percent(ov.cache_read_share, none=NOT_REPORTED),
                _part_help(ov.cache_read_tokens, "cache read", "input")
                + " (a high share = the prompt cache saves input cost)",
            ),
            (
                "Cache writes",
                format_percent(ov.cache_write_share, none=NOT_REPORTED),
                _part_help(ov.cache_write_tokens, "cache write", "input"),
            ),
            (
                "Reasoning",
                format_percent(ov.reasoning_share, none=NOT_REPORTED),
                _part_help(ov.reasoning_tokens, "reasoning", "output") + " (billed as output)",
            ),
        ]
    )
    if ov.flagged_runs:
        st.caption(
            f"{ov.flagged_runs:,} {'run has' if ov.flagged_runs == 1 else 'runs have'} data-quality flags "
            "(times clamped, usage normalized, aggregate mismatch, partial usage): see the Quality "
            "column on the Runs page."
        )
    if ov.cost_usd is not None and ov.cost_is_lower_bound:
        parts = [
            f"{n:,} {one if n == 1 else many}"
            for n, one, many in (
                (ov.unpriced_calls, "call with no known price", "calls with no known price"),
                (ov.partially_priced_runs, "partly priced run", "partly priced runs"),
                (ov.unknown_usage_runs, "run with unknown usage", "runs with unknown usage"),
            )
            if n
        ]
        st.caption(
            f"Cost {charts.format_usd(ov.cost_usd)} is the known spend only: the unpriced usage "
            f"({', '.join(parts)}) is not in it, and never counted as $0."
        )
    if no_runs:
        _ui.no_runs(f)
    else:
        # The tiles above are on screen by now; the charts read and draw after them.
        daily = data.hit_rate_daily(f)
        cost_daily = data.cost_by_period(f, period=period, by="task_type")
        left, right = st.columns(2)
        with left:
            _ui.chart(_ui.figure(charts.rate_by_task, ov.per_task), "overview_rates")
        with right:
            _ui.chart(
                _ui.figure(
                    charts.cost_stacked, cost_daily, period=period, by="task_type", colors=_ui.task_colors()
                ),
                "overview_cost",
            )
        _ui.chart(
            _ui.figure(
                charts.runs_per_day,
                daily,
                colors=_ui.task_colors(),
                period="day" if period == "hour" else period,
            ),
            "overview_runs_per_day",
        )
        st.subheader("Per task type")
        _tables.table(
            ov.per_task,  # rates become 0..100 in _ui.display_frame
            first=tuple(ov.per_task.columns),  # the analysis view's column order
            column_config={
                "hit_rate": st.column_config.ProgressColumn(
                    "Hit rate",
                    format="%.1f %%",
                    min_value=0.0,
                    max_value=100.0,
                    help="Budget stops / finished budgeted runs; — = no budgeted run",
                ),
                "intervention_rate": st.column_config.ProgressColumn(
                    "Intervention rate", format="%.1f %%", min_value=0.0, max_value=100.0
                ),
            },
        )
        _runaways = data.runaways(f)
        st.subheader("Runaway runs")
        share = (
            ""
            if _runaways.cost_share is None
            else f", {format_percent(_runaways.cost_share)} of the priced spend"
        )
        st.caption(
            f"**{_runaways.count:,}** of {_runaways.total_runs:,} runs{share}: above "
            f"{_runaways.k:g} × their task type's P95 of total tokens, or the same tool called "
            f"{_runaways.repeats} or more times in a row (`budgetlens runaways` lists them)."
        )
        if _runaways.count:
            listed = _runaways.runs.head(50).copy()
            listed.insert(
                0, "link", [_tables.run_link(str(run_id), from_root=True) for run_id in listed["run_id"]]
            )
            _tables.table(
                listed,
                first=("link", "task_type", "total_tokens", "tokens_ratio", "cost_usd", "longest_repeat"),
                column_config={
                    "link": st.column_config.LinkColumn("Run", display_text=_tables.RUN_LINK_TEXT),
                    "run_id": None,
                },
            )


render()
