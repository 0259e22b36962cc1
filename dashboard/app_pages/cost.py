"""Cost: daily or hourly cost stacked by model and by task type, the cost-per-run distribution,
who spent it (spend by team, user or service), P50/P95 call latency per model and the most
expensive runs. Unpriced usage is counted apart, never as $0. Keys: ``cost_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _tables, _ui
from budgetlens.dashboard.formatting import safe_text

#: The most unpriced models the Cost page's banner names (the rest are counted).
UNPRICED_MODELS_NAMED = 5


def _unpriced_models(by_model) -> list[str]:
    """The models of ``by_model`` (``data.cost_by_period(by="model")``) with unpriced calls, most
    unpriced calls first, at most ``UNPRICED_MODELS_NAMED`` (then "+N more")."""
    if by_model.empty or "unpriced_calls" not in by_model:
        return []
    counts = by_model.groupby("key", dropna=False)["unpriced_calls"].sum()
    models = [str(m) for m in counts[counts > 0].sort_values(ascending=False).index]
    extra = len(models) - UNPRICED_MODELS_NAMED
    return models[:UNPRICED_MODELS_NAMED] + ([f"+{extra} more"] if extra > 0 else [])


def render() -> None:
    f = data.filters()
    _ui.header("Cost", "Spend per period, model and task type (USD; prices from genai-prices).", f)
    suggested = _ui.period(f)
    period = st.radio(
        "Period",
        ["hour", "day", "week", "month"],
        index=["hour", "day", "week", "month"].index(suggested),
        horizontal=True,
        key="cost_period",
        format_func=lambda p: f"per {p}",
    )
    ov = data.cost_totals(
        f
    )  # the tiles' one read (the spend figures alone): they show before the charts' reads

    no_runs = ov.runs == 0
    mean = ov.cost_usd / ov.priced_runs if ov.cost_usd is not None and ov.priced_runs else None
    _ui.tiles(
        [
            (
                "Total cost",
                "—" if no_runs else charts.format_usd(ov.cost_usd),
                "Known spend: the sum of the priced calls; unpriced usage is not included",
            ),
            (
                "Priced runs",
                f"{ov.priced_runs:,} of {ov.runs:,}",
                f"Runs with a cost; {ov.partially_priced_runs:,} of them are only partly priced",
            ),
            (
                "Mean cost / priced run",
                "—" if no_runs else charts.format_usd(mean),
                "Known spend per run with a cost (a partly priced run counts its priced calls)",
            ),
            (
                "Unpriced calls",
                f"{ov.unpriced_calls:,}",
                "Calls whose model has no known price; left out of the cost, shown as unpriced",
            ),
            (
                "Tool spend",
                # no paid tool call is "none", never a $0.00 that reads like priced usage
                "—" if no_runs else "none" if not ov.tool_cost_usd else charts.format_usd(ov.tool_cost_usd),
                "Fees of paid tool calls (web search, browser, paid APIs), apart from the model cost",
            ),
        ]
    )
    by_model = data.cost_by_period(f, period=period, by="model")
    notes = []
    if ov.cost_is_lower_bound:
        if ov.unpriced_calls:
            models = _unpriced_models(by_model)
            named = f" ({', '.join(map(safe_text, models))})" if models else ""
            notes.append(
                f"{ov.unpriced_calls:,} calls used a model with no known price{named}: their cost "
                "is **unpriced** and not included above (never counted as $0). Add the "
                f"model{'s' if len(models) > 1 else ''} to a price file (BUDGETLENS_PRICES_FILE) to price it."
            )
        if ov.partially_priced_runs:
            notes.append(
                f"Partly priced runs: {ov.partially_priced_runs:,} (unpriced calls or "
                "unknown usage); their cost is known spend **+ unpriced usage**."
            )
        if ov.unknown_usage_runs:
            notes.append(
                f"Runs with unknown usage: {ov.unknown_usage_runs:,} (a call reported no usage; "
                "the reservation was charged)."
            )
    if notes:  # never an empty warning box
        st.warning(" ".join(notes), icon=":material/money_off:")
    if no_runs:
        _ui.no_runs(f)
    else:
        by_task = data.cost_by_period(f, period=period, by="task_type")
        per_run = data.cost_per_run(f)
        left, right = st.columns(2)
        with left:
            _ui.chart(
                _ui.figure(
                    charts.cost_stacked, by_model, period=period, by="model", colors=_ui.model_colors()
                ),
                "cost_by_model",
            )
        with right:
            _ui.chart(
                _ui.figure(
                    charts.cost_stacked, by_task, period=period, by="task_type", colors=_ui.task_colors()
                ),
                "cost_by_task",
            )
        _ui.chart(_ui.figure(charts.cost_per_run, per_run, colors=_ui.task_colors()), "cost_per_run")
        _who_spent_it(f)
        st.subheader("Most expensive runs")
        _tables.table(
            data.top_runs(f, limit=20),
            tz=f.tz,
            first=("run_id", "cost_usd", "task_type", "total_tokens", "stop_reason", "models", "start_utc"),
        )
        st.subheader("Latency per model")
        st.caption(
            "Duration of one model call (s), P50 / P95 / max (quantile_cont) over the calls of the "
            "filtered runs that recorded one (timed calls); — = no call of that model was timed."
        )
        # On demand: exact percentiles read every call of the window (about 1 s at 1M runs), so the
        # page itself stays fast.
        if st.toggle("Show latency per model", key="cost_latency"):
            _tables.table(
                data.model_latency(f),
                first=("model", "calls", "timed_calls", "p50_duration_s", "p95_duration_s", "max_duration_s"),
                key="cost_model_latency",
            )


def _who_spent_it(f) -> None:
    """Spend and runs by team or user (the sidebar's Team/User/Tag filters narrow it)."""
    st.subheader("Who spent it")
    by = st.radio(
        "Group by",
        ["team", "user", "service"],
        horizontal=True,
        key="cost_who_by",
        format_func=str.capitalize,
    )
    spenders = data.spend_by(f, by=by)
    left, right = st.columns([3, 2])
    with left:
        _ui.chart(_ui.figure(charts.spend_by, spenders, by=by), "cost_who_spent")
    with right:
        _tables.table(spenders, first=(by, "cost_usd", "cost_share", "runs"), key="cost_who_table")
    st.caption(
        "Known spend (the priced calls) of the filtered runs; (none): runs without a "
        f"{by}. partial_cost_runs have unpriced calls or unknown usage: their cost is a lower bound."
    )


render()
