"""Runs: a searchable table of runs (newest first); pick one to see its turns as cumulative used
tokens against its limit, with its reservations and budget events. Keys: ``runs_``."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data
from dashboard.app_pages import _ui

PAGE_SIZE = 500

def render() -> None:
    f = data.filters()
    _ui.header("Runs", "Every run, newest first. Pick one to see how its budget was spent.", f)
    search = st.text_input("Search", key="runs_search",
                           placeholder="run id, task type, service, model or stop reason")
    table = data.query("runs_table", f, search=search, limit=PAGE_SIZE)

    if table.empty:
        st.info("No run matches." if search else "No runs match these filters.",
                icon=":material/search_off:")
        return

    newest = f" (the newest {PAGE_SIZE})" if len(table) == PAGE_SIZE else ""
    st.caption(f"{len(table):,} runs shown{newest}")
    shown = _ui.local_time(_ui.usd_column(table), "start_utc", f.tz)
    st.dataframe(shown.rename(columns={"start_utc": f"start ({f.tz})"}), hide_index=True,
                 height=280,
                 column_config={c: st.column_config.NumberColumn(c, format="%,d")
                                for c in shown.columns if c.endswith("_tokens")})

    labels = {row.run_id: f"{row.run_id} · {row.task_type} · {row.stop_reason}"
              for row in table.itertuples()}
    run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="runs_pick")
    detail = data.query("run_detail", run_id)
    if detail is None:
        st.info("This run is no longer in the store.")
        return

    run = detail.run
    limit = run.get("limit_total_tokens")
    stop = str(run.get("stop_reason"))
    color = "green" if stop == "completed" else "red" if stop.startswith("budget_") else "gray"
    usage = str(run.get("usage_status"))
    st.markdown(
        f"**Task type** :blue-badge[{run.get('task_type')}] · **Service** "
        f":gray-badge[{run.get('service_name') or 'n/a'}] · **Models** "
        f":gray-badge[{run.get('models') or 'n/a'}] · **Stop reason** :{color}-badge[{stop}] · "
        f"**Usage** :{'orange' if usage == 'unknown' else 'green'}-badge[{usage}]"
        + (" · retryable" if run.get("retryable") else "")
    )
    limit_text = charts.format_tokens(limit) if limit else "none"
    _ui.tiles([
        ("Total tokens", charts.format_tokens(run.get("total_tokens")),
         "Input + output tokens; unknown usage counts its reservation"),
        ("Token limit", limit_text, "The total-token limit the run ran under"),
        ("Turns / tool calls", f"{run.get('turns') or 0} / {run.get('tool_calls') or 0}", None),
        ("Cost", charts.format_usd(run.get("cost_usd")), "USD; unpriced when a model has no price"),
        ("Duration", "n/a" if run.get("duration_s") is None else f"{run['duration_s']:.1f} s",
         None),
    ])
    _ui.chart(charts.run_turns(detail.calls, detail.events, limit, run_id=run_id), "runs_turns")
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Model calls**")
        calls = _ui.usd_column(_ui.local_time(detail.calls, "start_utc", f.tz))
        st.dataframe(calls, hide_index=True)
    with right:
        st.markdown("**Budget events**")
        if detail.events.empty:
            st.caption("No warnings, downgrades, summaries, tool calls or stops were recorded.")
        else:
            st.dataframe(_ui.local_time(detail.events, "ts_utc", f.tz), hide_index=True)


render()
