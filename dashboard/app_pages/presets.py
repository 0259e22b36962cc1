"""Presets: P95 x multiplier per task type (the multiplier is a control), the change against
the limits the runs ran under, and downloads as YAML, TOML and JSON. Keys: ``presets_``."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from collector.preset_format import LIMIT_KEYS
from dashboard import analysis, charts, data, presets_export
from dashboard.app_pages import _ui


def _change_text(change, current) -> str:
    if pd.isna(current):
        return "new limit"
    return "—" if pd.isna(change) else charts.format_change(change)


def render() -> None:
    f = data.filters()
    _ui.header("Presets", "Recommended budgets: P95 × multiplier, rounded up (tokens to 1,000, "
               "counts to 1, seconds to 5, USD to the cent).", f)
    multiplier = st.slider("Multiplier (preset = P95 × multiplier)", min_value=1.0, max_value=3.0,
                           value=analysis.DEFAULT_MULTIPLIER, step=0.1, key="presets_multiplier")
    baselines = data.query("baselines", f)
    limits = data.query("current_limits", f)
    first, last, _ = data.query("data_extent")

    if baselines.empty:
        _ui.no_runs(f)
        return

    recommended = analysis.presets(baselines, multiplier)
    changes = analysis.preset_changes(recommended, limits)
    low = recommended.loc[recommended["low_sample"], "task_type"].tolist()
    if low:
        st.warning(f"Low sample (< {analysis.LOW_SAMPLE_RUNS} runs): {', '.join(low)}.",
                   icon=":material/science:")

    start = f.start_utc or first
    end = f.end_utc or last
    window_days = max(1, round((end - start).total_seconds() / 86400)) if start and end else None

    document = presets_export.build_document(recommended, multiplier, window_days, baselines)
    buttons = st.columns([1, 1, 1, 3])
    for column, (label, to_text, mime, ext) in zip(buttons, (
        ("YAML", presets_export.to_yaml, "application/yaml", "yaml"),
        ("TOML", presets_export.to_toml, "application/toml", "toml"),
        ("JSON", presets_export.to_json, "application/json", "json"),
    )):
        column.download_button(f"Download {label}", to_text(document), file_name=f"presets.{ext}",
                               mime=mime, key=f"presets_download_{ext}", icon=":material/download:")

    st.subheader("Recommended presets")
    st.dataframe(recommended, hide_index=True, column_config={
        "low_sample": st.column_config.CheckboxColumn("low sample"),
        "max_cost_usd": st.column_config.NumberColumn("max_cost_usd", format="$%.2f"),
        **{k: st.column_config.NumberColumn(k, format="%,d") for k in LIMIT_KEYS
           if k.endswith("_tokens")},
    })

    st.subheader("Change against the limits the runs ran under")
    key = st.selectbox("Limit", LIMIT_KEYS, key="presets_key")
    _ui.chart(charts.preset_comparison(changes, key), "presets_comparison")
    shown = changes[changes["key"] == key].copy()
    shown["change"] = [_change_text(change, current)
                       for change, current in zip(shown["change_pct"], shown["current"])]
    st.dataframe(shown.drop(columns=["change_pct"]), hide_index=True)
    with st.expander("Preview of the preset file (YAML)"):
        st.code(presets_export.to_yaml(document), language="yaml")


render()
