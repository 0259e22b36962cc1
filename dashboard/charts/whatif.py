"""The what-if trade-off curve: per task type, the projected hit rate against the spend a
budget at each multiplier (1.0–3.0) would have avoided, with the target hit rate as a line."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from budgetlens.dashboard.charts._style import TASK_COLORS, _base, _colors, _empty, _require, plot_text


def tradeoff_curve(
    curve: pd.DataFrame,
    target: float | None = None,
    chosen: pd.DataFrame | None = None,
    *,
    colors: dict[str, str] | None = None,
) -> go.Figure:
    """Lines of projected hit rate (%, y) against spend avoided (% of the window's priced spend,
    x), one point per multiplier, one line per task type; the hover names the multiplier, the
    hit rate and the USD avoided. ``curve``: ``budgetlens.analysis.whatif.tradeoff`` [multiplier,
    task_type, hit_rate, avoided_cost_usd, avoided_cost_share, avoided_tokens_share] (rates and
    shares 0..1). ``target`` (0..1) draws a dashed line; ``chosen``
    (``whatif.target_presets``: task_type, multiplier) rings each task type's pick. A task
    type without priced spend uses its tokens share. Raises ValueError for missing columns."""
    _require(curve, ("multiplier", "task_type", "hit_rate", "avoided_cost_share"), "tradeoff_curve")
    fig = _base(
        "Trade-off: projected hit rate vs spend avoided", "Spend avoided (%)", "Projected hit rate (%)"
    )
    fig.update_layout(hovermode="closest")
    if curve.empty:
        return _empty(fig)
    colors = _colors(curve["task_type"].astype(str), colors, TASK_COLORS)
    for task, part in curve.groupby("task_type", sort=True):
        part = part.sort_values("multiplier")
        share = pd.to_numeric(part["avoided_cost_share"], errors="coerce")
        if share.isna().all() and "avoided_tokens_share" in part.columns:
            share = pd.to_numeric(part["avoided_tokens_share"], errors="coerce")
        usd = pd.to_numeric(
            part.get("avoided_cost_usd", pd.Series(index=part.index, dtype=float)), errors="coerce"
        )
        fig.add_trace(
            go.Scatter(
                x=share * 100,
                y=pd.to_numeric(part["hit_rate"], errors="coerce") * 100,
                name=plot_text(task),
                mode="lines+markers",
                line={"color": colors[str(task)], "width": 2},
                marker={"size": 6},
                customdata=list(zip(part["multiplier"], usd.fillna(0), strict=True)),
                hovertemplate=(
                    "× %{customdata[0]:.1f}: hit rate %{y:.1f} %, avoided %{x:.1f} % "
                    "($%{customdata[1]:,.2f})<extra>" + plot_text(task) + "</extra>"
                ),
            )
        )
        if chosen is not None and not chosen.empty:
            pick = chosen[(chosen["task_type"] == task) & chosen["multiplier"].notna()]
            if not pick.empty:
                at = part[part["multiplier"] == pick["multiplier"].iloc[0]]
                if not at.empty:
                    fig.add_trace(
                        go.Scatter(
                            x=pd.to_numeric(at["avoided_cost_share"], errors="coerce").fillna(0) * 100,
                            y=pd.to_numeric(at["hit_rate"], errors="coerce") * 100,
                            mode="markers",
                            marker={
                                "size": 14,
                                "symbol": "circle-open",
                                "color": colors[str(task)],
                                "line": {"width": 2},
                            },
                            showlegend=False,
                            hoverinfo="skip",
                        )
                    )
    if target is not None:
        fig.add_hline(
            y=target * 100,
            line_dash="dash",
            line_color="#E45756",
            line_width=1.5,
            annotation_text=f"target {target * 100:.1f} %",
            annotation_position="top right",
            annotation_font_color="#E45756",
        )
    return fig
