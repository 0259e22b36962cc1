"""Presets: P95 x multiplier per task type (the multiplier is a control), the change against
the limits the runs ran under, and downloads as YAML, TOML and JSON. Keys: ``presets_``."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from budgetlens.analysis import preset_export as presets_export
from budgetlens.analysis import views as analysis
from budgetlens.analysis import whatif
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _evidence, _paint, _tables, _ui
from budgetlens.dashboard.formatting import MISSING, column_label, safe_text
from budgetlens.guard.preset_file import LIMIT_KEYS


def render() -> None:
    f = data.filters()
    _ui.header(
        "Presets",
        "Recommended budgets: P95 × multiplier, rounded up (tokens to 1,000, "
        "counts to 1, seconds to 5, USD to 2 significant figures).",
        f,
    )
    drift_slot = st.container()  # filled after the tables: their numbers come first
    multiplier = st.slider(
        "Multiplier (preset = P95 × multiplier)",
        min_value=1.0,
        max_value=3.0,
        value=analysis.DEFAULT_MULTIPLIER,
        step=0.1,
        key="presets_multiplier",
    )
    baselines = data.baselines(f)
    limits = data.current_limits(f)
    first, last, _ = data.data_extent()

    if baselines.empty:
        with drift_slot:
            _evidence.drift_flag(data.drift(f))
        _ui.no_runs(f)
        return

    # P95 x multiplier, on the Kaplan–Meier P95 where censoring is material (as `budgetlens presets`)
    recommended = whatif.evidence_presets(data.evidence(f), multiplier)
    changes = analysis.preset_changes(recommended, limits)
    low = recommended.loc[recommended["low_sample"], "task_type"].tolist()
    if low:
        st.warning(
            f"Low sample (< {analysis.LOW_SAMPLE_RUNS} runs): {', '.join(map(safe_text, low))}.",
            icon=":material/science:",
        )

    start = f.start_utc or first
    end = f.end_utc or last
    window_days = max(1, round((end - start).total_seconds() / 86400)) if start and end else None

    downloads_slot = st.container()  # filled after the table: its numbers come first
    _recommended_table(recommended)
    document = presets_export.build_document(recommended, multiplier, window_days, baselines)
    with downloads_slot:
        _downloads(document)
    with drift_slot:
        _evidence.drift_flag(data.drift(f))
    _changes(changes)
    _evidence.limits_in_force(limits, data.limit_history(f), f.tz)
    with st.expander("Preview of the preset file (YAML)"):
        # the code block's highlighter loads and draws before the table beside it: held as a chart
        if not _paint.hold_chart(300):
            st.code(presets_export.to_yaml(document), language="yaml")


def _downloads(document: dict) -> None:
    """The YAML / TOML / JSON download buttons of the preset document."""
    _ui.preset_downloads(document, "Download presets", "presets")


def _recommended_table(recommended: pd.DataFrame) -> None:
    """The recommended presets per task type, one column per preset key."""
    st.subheader("Recommended presets")
    st.caption(
        "— = no recommendation: no run of the task type reported that figure (a cost "
        "preset needs fully priced runs)."
    )
    _tables.table(
        recommended,
        unpriced=MISSING,
        first=("task_type", "n", "low_sample", "max_total_tokens", "max_cost_usd"),
        column_config={
            k: st.column_config.NumberColumn(column_label(k), format="%,.0f", help=f"Preset file key {k}")
            for k in LIMIT_KEYS
            if not k.endswith("_usd")
        },
    )


def _changes(changes: pd.DataFrame) -> None:
    """Per limit key: the current limit against the recommendation (chart and table)."""
    st.subheader("Change against the limits in force (the latest)")
    key = st.selectbox("Limit", LIMIT_KEYS, key="presets_key")
    _ui.chart(_ui.figure(charts.preset_comparison, changes, key), "presets_comparison")
    shown = changes[changes["key"] == key].copy()
    shown["change"] = [
        charts.format_change(change, current=current, recommended=recommended)
        for change, current, recommended in zip(shown["change_pct"], shown["current"], shown["recommended"])
    ]
    for column in ("current", "recommended"):
        shown[column] = pd.to_numeric(shown[column], errors="coerce")
    if key.endswith("_usd"):  # the CLI's USD format, as text
        shown = shown.rename(columns={c: f"{c}_usd" for c in ("current", "recommended")})
        labels: dict[str, Any] = {
            "current_usd": "Current limit (USD)",
            "recommended_usd": "Recommended (USD)",
        }
    else:
        labels = {
            c: st.column_config.NumberColumn(column_label(c), format="%,.0f")
            for c in ("current", "recommended")
        }
    _tables.table(
        shown.drop(columns=["change_pct"]),
        unpriced=MISSING,
        column_config=labels,
        first=("task_type", "current", "current_usd", "recommended", "recommended_usd", "change", "key"),
    )


render()
