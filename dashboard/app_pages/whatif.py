"""What-if: pick a target hit rate, read per task type the smallest multiplier (and its limits)
whose replay over the history meets it, see the trade-off curve and the runs it would stop, and
download that preset. Same numbers as ``budgetlens whatif --view target``. Keys: ``whatif_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.analysis import whatif
from budgetlens.analysis.values import format_rate_range
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _tables, _ui
from budgetlens.dashboard.formatting import MISSING, column_label, safe_text
from budgetlens.limits import LIMIT_KEYS

#: The replay's run rows the page lists (the store returns only these; the count says how many).
SHOWN_RUNS = data.WHATIF_SHOWN_RUNS

METHOD_LABELS = {
    "auto": "Auto: Kaplan–Meier where > 5 % of runs were stopped",
    "plain": "Plain P95",
    "kaplan-meier": "Kaplan–Meier (censoring-aware) everywhere",
}


def render() -> None:
    f = data.filters()
    _ui.header(
        "What-if",
        "Replay candidate budgets over the stored runs, call by call: how often each would have "
        "stopped them and what it would have saved.",
        f,
    )
    controls = st.columns(2)
    target_pct = controls[0].slider(
        "Target hit rate (%)",
        min_value=0.0,
        max_value=30.0,
        value=whatif.DEFAULT_TARGET_HIT_RATE * 100,
        step=0.5,
        key="whatif_target",
        help="The share of runs the budget may stop. Per task type the smallest multiplier "
        "(1.0–3.0) whose replayed hit rate is at most this is chosen.",
    )
    method = (
        controls[1].selectbox(
            "P95 method", tuple(METHOD_LABELS), format_func=lambda m: METHOD_LABELS[m], key="whatif_method"
        )
        or "auto"
    )
    target = target_pct / 100
    plan = data.whatif_plan(f, target, method, run_limit=SHOWN_RUNS)
    if plan.evidence.baselines.empty:
        _ui.no_runs(f)
        return

    chosen = plan.presets
    missed = chosen.loc[chosen["verdict"] == whatif.VERDICT_NOT_MET, "task_type"].tolist()
    unsure = chosen.loc[chosen["verdict"] == whatif.VERDICT_UNKNOWN, "task_type"].tolist()
    notes = []
    if missed:
        notes.append(
            f"No multiplier up to 3.0 meets {target_pct:.1f} % for {', '.join(map(safe_text, missed))} (shown at 3.0)."
        )
    if unsure:
        notes.append(
            f"Unknown for {', '.join(map(safe_text, unsure))}: only the lower bound meets {target_pct:.1f} %; "
            "with the censored runs the hit rate may be higher."
        )
    bounds = [
        f"{safe_text(row.task_type)}: {', '.join(map(safe_text, row.lower_bound_keys))}"
        for row in chosen.itertuples()
        if row.lower_bound_keys
    ]
    if bounds:
        notes.append(
            "Lower-bound P95 (every run that could show the tail was stopped; raise these limits for "
            f"a while to learn it): {'; '.join(bounds)}."
        )
    if notes:
        st.warning(" ".join(notes), icon=":material/warning:")

    st.subheader("Smallest multiplier per task type for the target, and its limits")
    st.caption(
        "Met = the upper bound (stopped + censored runs) is at most the target; unknown = only the "
        "lower bound is; the projected hit rate is that range."
    )
    shown = chosen.copy()
    shown["lower_bound_keys"] = [", ".join(keys) for keys in shown["lower_bound_keys"]]
    shown["projected"] = [
        format_rate_range(lo, hi)
        for lo, hi in zip(shown["projected_hit_rate"], shown["projected_hit_rate_upper"])
    ]
    _tables.table(
        shown.drop(columns=["target_hit_rate", "met"]),
        unpriced=MISSING,
        first=("task_type", "multiplier", "verdict", "projected", "max_total_tokens", "max_cost_usd"),
        column_config={
            "projected": st.column_config.TextColumn("Projected hit rate", alignment="right"),
            **{
                k: st.column_config.NumberColumn(column_label(k), format="%,.0f")
                for k in LIMIT_KEYS
                if not k.endswith("_usd")
            },
        },
    )

    first, last, _ = data.data_extent()
    document = whatif.plan_document(plan, f, first, last)
    _ui.preset_downloads(document, "Download this preset", "whatif")

    _ui.chart(_ui.figure(charts.tradeoff_curve, plan.curve, target, chosen), "whatif_curve")

    st.subheader("What that preset would have done")
    _tables.table(
        plan.replay.summary,
        first=("task_type", "runs", "stopped", "censored", "hit_rate", "avoided_tokens", "avoided_cost_usd"),
        column_config={
            "hit_rate": st.column_config.TextColumn("Hit rate (stopped ÷ runs)", alignment="right")
        },
    )
    st.caption(
        "Stopped: the preset stops the run (first limit crossed, call by call). Censored: the old "
        "budget stopped it and this one is larger, so what it would have used is unknown. The hit "
        "rate here divides by every run of the window, since under this preset every run has a "
        "budget; the Hit rate page divides today's budget stops by the runs that ran under one, "
        "and Baselines' censored share divides the censored runs by every run."
    )
    count = plan.replay.run_count if plan.replay.run_count is not None else len(plan.replay.runs)
    with st.expander(f"Runs it would stop or leave censored ({count:,})"):
        if count > len(plan.replay.runs):
            st.caption(f"The first {len(plan.replay.runs):,} by tokens avoided, per task type.")
        _tables.table(plan.replay.runs)


render()
