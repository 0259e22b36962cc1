"""Runs: a searchable table of runs (newest first, every run id a link, a CSV of every matching
run); the run named by ``?run=<id>`` in the URL (a link from any table, or a row picked here)
shows its turns as cumulative used tokens against its limit, with its reservations, the budget's
own events and the real stop, its parent run and child runs (sub-agents). Keys: ``runs_``."""

from __future__ import annotations

import streamlit as st

from budgetlens.analysis.views import RunDetail
from budgetlens.dashboard import charts, data
from budgetlens.dashboard.app_pages import _tables, _ui
from budgetlens.dashboard.formatting import MISSING, is_missing, safe_text

PAGE_SIZE = data.RUNS_PAGE_SIZE
#: The most runs one CSV download carries (every column, costs as numbers in USD).
CSV_MAX_RUNS = 1_000_000
#: Badge text of a run whose stop reason was not recorded (imports, foreign traces).
NO_STOP_REASON = "not recorded"
RUN_PARAM = "run"
#: The runs table shows up to this many rows before it scrolls (35 px a row plus the header).
TABLE_ROWS = 15


def _table_height(rows: int) -> int | str:
    """The runs table's height: Streamlit's own ("auto", up to 10 rows) for a short table, else
    room for ``min(rows, TABLE_ROWS)`` rows (never 7 rows above empty space)."""
    return "auto" if rows <= 10 else 35 * (min(rows, TABLE_ROWS) + 1) + 3


TABLE_FIRST = (
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
    "team",
    "user_id",
)


def _count(value) -> str:
    return MISSING if is_missing(value) else f"{int(value):,}"


def _runs_list(f) -> None:
    """The search box, the runs table (pick a row to open it) and the CSV download."""
    search = st.text_input(
        "Search",
        key="runs_search",
        placeholder="run id, task type, service, team, user, model or stop reason",
    )
    table = data.runs_table(f, search=search, limit=PAGE_SIZE)
    if table.empty:
        if search:
            st.info("No run matches this search.", icon=":material/search_off:")
        else:
            _ui.no_runs(f)
        return
    newest = f" (the newest {PAGE_SIZE}; the CSV has all)" if len(table) == PAGE_SIZE else ""
    row = st.container(horizontal=True, vertical_alignment="center")
    row.caption(f"{len(table):,} runs shown{newest}. Click a run id, or pick a row, to open it.")
    row.download_button(
        "CSV of these runs",
        data=lambda: data.runs_table(f, search=search, limit=CSV_MAX_RUNS).to_csv(index=False),
        file_name="runs.csv",
        mime="text/csv",
        key="runs_csv",
        icon=":material/download:",
        help="Every matching run, every column; costs in USD as numbers (empty = unpriced)",
        width="content",
        on_click="ignore",
    )
    event = _tables.table(
        table,
        tz=f.tz,
        height=_table_height(len(table)),
        first=TABLE_FIRST,
        key="runs_table",
        on_select="rerun",
        selection_mode="single-row",
    )
    picked = event.selection.rows if event is not None else []
    if picked:
        run_id = str(table.iloc[picked[0]]["run_id"])
        if st.query_params.get(RUN_PARAM) != run_id:
            st.query_params[RUN_PARAM] = run_id


def _run_summary(run: dict) -> None:
    """Badges and KPI tiles of one run."""
    stop = run.get("stop_reason") or NO_STOP_REASON
    color = "green" if stop == "completed" else "red" if stop.startswith("budget_") else "gray"
    usage = run.get("usage_status") or "n/a"
    st.markdown(
        f"**Task type** :blue-badge[{safe_text(run.get('task_type'))}] · **Service** "
        f":gray-badge[{safe_text(run.get('service_name') or 'n/a')}] · **Models** "
        f":gray-badge[{safe_text(run.get('models') or 'n/a')}] · **Stop reason** "
        f":{color}-badge[{safe_text(stop)}] · "
        f"**Usage** :{'orange' if usage == 'unknown' else 'green'}-badge[{safe_text(usage)}]"
        + (" · retryable" if run.get("retryable") else "")
    )
    limit = run.get("limit_total_tokens")
    limit_text = "none" if is_missing(limit) or not limit else charts.format_tokens(limit)
    cache = [run.get(k) for k in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")]
    _ui.tiles(
        [
            (
                "Total tokens",
                charts.format_tokens(run.get("total_tokens")),
                "Input + output tokens; unknown usage counts its reservation. Of them: "
                + ", ".join(
                    f"{label} {charts.format_tokens(v)}"
                    for label, v in zip(("cache read", "cache write", "reasoning"), cache)
                ),
            ),
            ("Token limit", limit_text, "The total-token limit the run ran under"),
            (
                "Turns / tools",
                f"{_count(run.get('turns'))} / {_count(run.get('tool_calls'))}",
                "Model turns / tool calls; — = not recorded (a foreign trace or an import)",
            ),
            ("Cost", charts.format_usd(run.get("cost_usd")), "USD; unpriced when a model has no price"),
            ("Duration", charts.format_duration(run.get("duration_s")), "Wall time of the run"),
        ]
    )


def _run_tables(detail: RunDetail, tz: str) -> None:
    """The run's model calls and its events, one above the other (no column is cut off)."""
    st.markdown("**Model calls**")
    if detail.calls.empty:
        st.caption("No model calls recorded.")
    else:
        _tables.table(
            detail.calls.drop(columns=["limit_total_tokens"], errors="ignore"),
            tz=tz,
            first=(
                "turn",
                "model",
                "input_tokens",
                "output_tokens",
                "cumulative_tokens",
                "reserved_tokens",
                "cost_usd",
            ),
        )
    st.markdown("**Events** (budget warnings, downgrades, summaries, tool calls, the stop)")
    if detail.events.empty:
        st.caption("No warnings, downgrades, summaries, tool calls or stops were recorded.")
    else:
        events = detail.events.assign(name=detail.events["name"].str.removeprefix("budgetlens."))
        _tables.table(
            events,
            tz=tz,
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


def _run_detail(run_id: str, tz: str) -> None:
    """One run: summary, the per-turn chart and its tables."""
    detail = data.run_detail(run_id)
    if detail is None:
        st.warning(f"Run {safe_text(run_id)} is not in this store.", icon=":material/search_off:")
        return
    st.subheader(f"Run {safe_text(run_id)}")
    _run_summary(detail.run)
    _trace_link(detail.run)
    _run_tree(detail, tz)
    if detail.calls.empty:
        st.info(
            "No model calls were recorded for this run (its log carried no per-call usage), "
            "so there is nothing to draw per turn.",
            icon=":material/timeline:",
        )
    else:
        limit = detail.run.get("limit_total_tokens")
        _ui.chart(charts.run_turns(detail.calls, detail.events, limit, run_id=run_id), "runs_turns")
    _run_limits(detail)
    _run_tables(detail, tz)


def _run_tree(detail: RunDetail, tz: str) -> None:
    """The run's place in its tree of runs (issue 21): a link to its parent run, its child runs."""
    parent = detail.run.get("parent_run_id")
    if not is_missing(parent) and parent:
        st.markdown(f"**Parent run** [{safe_text(parent)}]({_tables.run_link(str(parent))})")
    if not detail.children.empty:
        st.markdown("**Child runs** (sub-agents whose budget was carved from this run's)")
        _tables.table(detail.children, first=("depth", "run_id", "task_type", "stop_reason"), tz=tz)


def _trace_link(run: dict) -> None:
    """A link to the run's trace in the team's tracing UI (``BUDGETLENS_TRACE_URL``)."""
    from budgetlens.config import trace_url, trace_url_template

    try:
        url = trace_url(run.get("trace_id"), trace_url_template())
    except ValueError as error:
        st.warning(str(error), icon=":material/link_off:")
        return
    if url:
        st.link_button("Open the trace", url, icon=":material/open_in_new:")


def _run_limits(detail: RunDetail) -> None:
    """Every limit the run ran under, the one that stopped it marked, and cost and time per turn
    on their own axes with their limits."""
    from budgetlens.analysis.run_limits import run_limits

    limits = run_limits(detail.run)
    if limits.empty:
        st.caption("This run ran under no limit.")
        return
    st.markdown("**Limits the run ran under** (the one that stopped it is marked)")
    shown = limits.assign(fired=["stopped the run" if f else "" for f in limits["fired"]])
    shown["limit"] = [_limit_text(k, v) for k, v in zip(shown["key"], shown["limit"], strict=True)]
    shown["used"] = [_limit_text(k, v) for k, v in zip(shown["key"], shown["used"], strict=True)]
    _tables.table(
        shown.drop(columns=["unit"]),
        first=("key", "limit", "used", "used_share", "fired"),
        column_config={
            "key": st.column_config.TextColumn("Limit"),
            "limit": st.column_config.TextColumn("Allowed", alignment="right"),  # not a 2nd "Limit"
            "fired": st.column_config.TextColumn("Stopped the run"),
        },
    )
    fired = next((k for k, f in zip(limits["key"], limits["fired"], strict=True) if f), None)
    keyed = dict(zip(limits["key"], limits["limit"], strict=True))
    if not detail.calls.empty and ("max_cost_usd" in keyed or "max_duration_s" in keyed):
        figure = charts.run_cost_time(
            detail.calls, keyed.get("max_cost_usd"), keyed.get("max_duration_s"), fired
        )
        _ui.chart(figure, "runs_cost_time")


def _limit_text(key: str, value) -> str:
    """A limit or used figure in the limit's unit (text: one column holds several units)."""
    if is_missing(value):
        return "—"
    if key.endswith("_usd"):
        return charts.format_usd(value)
    if key.endswith("_s"):
        return charts.format_duration(value)
    return charts.format_tokens(value)


def render() -> None:
    f = data.filters()
    _ui.header("Runs", "Every run, newest first. Open one to see how its budget was spent.", f)
    _runs_list(f)
    run_id = st.query_params.get(RUN_PARAM)
    if run_id:
        _run_detail(run_id, f.tz)


render()
