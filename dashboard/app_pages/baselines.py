"""Baselines: n, P50, P95 and max per task type (optionally per model), the same for cache read,
cache write and reasoning tokens, and per task type the
distribution of total tokens per run on a log axis with P50, P95, the preset and the current
limit marked. Keys: ``baselines_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.analysis import views as analysis
from budgetlens.analysis.defaults import BASELINE_HEADLINE_COLUMNS
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _evidence, _paint, _tables, _ui
from budgetlens.dashboard.formatting import MISSING, is_missing, safe_text


def render() -> None:
    f = data.filters()
    _ui.header(
        "Baselines",
        "What a run of each task type really uses: P50 / P95 / max "
        f"(quantile_cont; fewer than {analysis.LOW_SAMPLE_RUNS} runs = low sample).",
        f,
    )
    drift_slot = st.container()  # filled after the table: the table's numbers come first
    by_model = st.toggle("Split by model", key="baselines_by_model")
    multiplier = float(st.session_state.get("presets_multiplier", analysis.DEFAULT_MULTIPLIER))
    table = data.baselines(f, by_model=by_model)
    per_task = table if not by_model else data.baselines(f, by_model=False)

    if table.empty:
        _ui.no_runs(f)
    else:
        low = table.loc[table["low_sample"], "task_type"].unique().tolist()
        if low:
            st.warning(
                f"Low sample (< {analysis.LOW_SAMPLE_RUNS} runs): {', '.join(map(safe_text, low))}. Their P95 "
                "is a rough guide; collect more runs before adopting a preset.",
                icon=":material/science:",
            )
        st.caption(
            "P50 and P95 are interpolated (quantile_cont) and shown with one decimal; "
            "cost columns use only fully priced runs (n_cost); — = no value."
        )
        _tables.table(
            table,
            unpriced=MISSING,
            first=(*BASELINE_HEADLINE_COLUMNS, "max_cost_usd"),
        )
    with drift_slot:
        _evidence.drift_flag(data.drift(f))
    if not table.empty:
        distribution = data.token_distribution(f)
        limits = data.current_limits(f)
        # the one recommendation (as Presets, What-if and `budgetlens presets`)
        presets = analysis.recommended_presets(per_task, data.censored_baselines(f), multiplier).set_index(
            "task_type"
        )
        limit_by_task = (
            limits.set_index("task_type")["limit_total_tokens"].to_dict() if not limits.empty else {}
        )
        colors = _ui.task_colors()
        st.subheader("Total tokens per run")
        st.caption(
            f"Log axis. Preset = P95 × {multiplier:g} rounded up to the next 1,000 tokens, on the "
            "Kaplan–Meier P95 where more than 5 % of the runs were stopped (as on Presets) "
            "(change the multiplier on the Presets page). The limit in force (the latest) is "
            "drawn when the runs ran under one."
        )
        columns = st.columns(2)
        for index, (_, row) in enumerate(per_task.sort_values("task_type").iterrows()):
            task = row["task_type"]
            limit = limit_by_task.get(task)
            fig = _ui.figure(
                charts.token_distribution,
                distribution,
                task,
                p50=row["p50_total_tokens"],
                p95=row["p95_total_tokens"],
                preset=presets.loc[task, "max_total_tokens"] if task in presets.index else None,
                limit=None if limit is None or is_missing(limit) else float(limit),
                color=colors.get(str(task)),
            )
            with columns[index % 2]:
                _ui.chart(fig, f"baselines_dist_{index}")
        _evidence.limits_in_force(limits, data.limit_history(f), f.tz)
        st.subheader("Cache and reasoning tokens per run")
        st.caption(
            "Parts of a run's tokens: cache reads and cache writes are part of its input tokens, "
            "reasoning part of its output tokens. P50 / P95 / max over the runs that report each "
            "part (their count is shown); — = no run reports it (never read as 0)."
        )
        _tables.table(
            data.token_part_baselines(f),
            unpriced=MISSING,
            first=(
                "task_type",
                "n",
                "low_sample",
                "n_cache_read_tokens",
                "p50_cache_read_tokens",
                "p95_cache_read_tokens",
                "n_cache_write_tokens",
                "p50_cache_write_tokens",
                "p95_cache_write_tokens",
                "n_reasoning_tokens",
                "p50_reasoning_tokens",
                "p95_reasoning_tokens",
            ),
            key="baselines_token_parts",
        )
        st.subheader("Censoring-aware P95 (Kaplan–Meier)")
        st.caption(
            "A run stopped by a budget would have used more: Kaplan–Meier counts it as "
            '"at least" its usage. ≥ = only a lower bound (every run that could show the tail was '
            "stopped): raise that limit for a while to learn the real tail. Material = more than 5 % "
            "of the runs were stopped; their presets use these figures."
        )
        km = _evidence.km_table(data.censored_baselines(f))
        if _paint.hold_table(len(km)):
            return
        st.dataframe(
            km,
            hide_index=True,
            placeholder=MISSING,
            column_config={"Task type": st.column_config.Column("Task type", pinned=True)},
        )


render()
