"""Runs: a searchable table of runs (newest first); pick one to see its turns as cumulative used
tokens against its limit, with its reservations and budget events. Keys: ``runs_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _ui
from budgetlens.dashboard.formatting import MISSING, is_missing, text

PAGE_SIZE = 500
#: Badge text of a run whose stop reason was not recorded (imports, foreign traces).
NO_STOP_REASON = "not recorded"


def _count(value) -> str:
    return MISSING if is_missing(value) else f"{int(value):,}"


def render() -> None:
    f = data.filters()
    _ui.header("Runs", "Every run, newest first. Pick one to see how its budget was spent.", f)
    if "run" in st.query_params and "runs_search" not in st.session_state:  # a link /runs?run=ID
        st.session_state["runs_search"] = st.query_params["run"]
    search = st.text_input(
        "Search", key="runs_search", placeholder="run id, task type, service, model or stop reason"
    )
    table = data.query("runs_table", f, search=search, limit=PAGE_SIZE)

    if table.empty:
        st.info("No run matches." if search else "No runs match these filters.", icon=":material/search_off:")
        return

    newest = f" (the newest {PAGE_SIZE})" if len(table) == PAGE_SIZE else ""
    st.caption(f"{len(table):,} runs shown{newest}")
    _ui.table(
        table,
        tz=f.tz,
        height=280 if len(table) > 7 else "auto",
        first=(
            "run_id",
            "start_utc",
            "task_type",
            "cost_usd",
            "total_tokens",
            "stop_reason",
            "turns",
            "tool_calls",
            "models",
            "service_name",
        ),
    )

    labels = {
        row.run_id: " · ".join(text(v) for v in (row.run_id, row.task_type, row.stop_reason))
        for row in table.itertuples()
    }
    run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="runs_pick")
    detail = data.query("run_detail", run_id)
    if detail is None:
        st.info("This run is no longer in the store.")
        return

    run = detail.run
    limit = run.get("limit_total_tokens")
    stop = run.get("stop_reason") or NO_STOP_REASON
    color = "green" if stop == "completed" else "red" if stop.startswith("budget_") else "gray"
    usage = run.get("usage_status") or "n/a"
    st.markdown(
        f"**Task type** :blue-badge[{run.get('task_type')}] · **Service** "
        f":gray-badge[{run.get('service_name') or 'n/a'}] · **Models** "
        f":gray-badge[{run.get('models') or 'n/a'}] · **Stop reason** :{color}-badge[{stop}] · "
        f"**Usage** :{'orange' if usage == 'unknown' else 'green'}-badge[{usage}]"
        + (" · retryable" if run.get("retryable") else "")
    )
    limit_text = "none" if is_missing(limit) or not limit else charts.format_tokens(limit)
    _ui.tiles(
        [
            (
                "Total tokens",
                charts.format_tokens(run.get("total_tokens")),
                "Input + output tokens; unknown usage counts its reservation",
            ),
            ("Token limit", limit_text, "The total-token limit the run ran under"),
            (
                "Turns / tool calls",
                f"{_count(run.get('turns'))} / {_count(run.get('tool_calls'))}",
                "— = not recorded (a foreign trace or an import without these figures)",
            ),
            ("Cost", charts.format_usd(run.get("cost_usd")), "USD; unpriced when a model has no price"),
            ("Duration", "n/a" if is_missing(run.get("duration_s")) else f"{run['duration_s']:,.1f} s", None),
        ]
    )
    if detail.calls.empty:
        st.info(
            "No model calls were recorded for this run (its log carried no per-call usage), "
            "so there is nothing to draw per turn.",
            icon=":material/timeline:",
        )
    else:
        _ui.chart(charts.run_turns(detail.calls, detail.events, limit, run_id=run_id), "runs_turns")
    left, right = st.columns([1, 1])
    with left:
        st.markdown("**Model calls**")
        if detail.calls.empty:
            st.caption("No model calls recorded.")
        else:
            _ui.table(
                detail.calls.drop(columns=["limit_total_tokens"], errors="ignore"),
                tz=f.tz,
                first=(
                    "turn",
                    "model",
                    "reserved_tokens",
                    "cumulative_tokens",
                    "cost_usd",
                    "input_tokens",
                    "output_tokens",
                ),
            )
    with right:
        st.markdown("**Budget events**")
        if detail.events.empty:
            st.caption("No warnings, downgrades, summaries, tool calls or stops were recorded.")
        else:
            events = detail.events.assign(name=detail.events["name"].str.removeprefix("budgetlens."))
            _ui.table(
                events,
                tz=f.tz,
                first=(
                    "ts_utc",
                    "name",
                    "tool_name",
                    "reason",
                    "from_model",
                    "to_model",
                    "used_tokens",
                    "percent",
                ),
            )


render()
