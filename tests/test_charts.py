"""The Plotly figure builders of the dashboard (pure: frames in, figures out)."""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd
import pytest

from budgetlens.dashboard import charts

DAY1, DAY2 = dt.date(2026, 11, 20), dt.date(2026, 11, 21)


def _annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_cost_bars_stack_priced_keys_and_leave_unpriced_rows_out():
    frame = pd.DataFrame(
        {
            "period_start": [pd.Timestamp(DAY1)] * 3 + [pd.Timestamp(DAY2)],
            "key": ["gpt-4.1", "claude-haiku-4-5", "local-llama", "gpt-4.1"],
            "cost_usd": [1.5, 0.25, None, 2.0],
            "runs": [10, 4, 3, 12],
            "unpriced_calls": [0, 0, 9, 0],
        }
    )
    fig = charts.cost_stacked(frame, period="day", by="model")
    names = sorted(trace.name for trace in fig.data)
    assert names == ["claude-haiku-4-5", "gpt-4.1"]
    assert fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == "Cost (USD)"
    gpt = next(t for t in fig.data if t.name == "gpt-4.1")
    assert list(gpt.y) == [1.5, 2.0]


def test_cost_chart_of_only_unpriced_usage_says_so_instead_of_zero():
    frame = pd.DataFrame(
        {
            "period_start": [pd.Timestamp(DAY1)],
            "key": ["local-llama"],
            "cost_usd": [None],
            "runs": [3],
            "unpriced_calls": [9],
        }
    )
    fig = charts.cost_stacked(frame)
    assert not fig.data  # no bar: an unpriced day is never drawn as $0
    assert _annotations(fig) == ["unpriced<br>9 calls"]  # issue 22: the day drawn as unpriced
    assert len(fig.layout.shapes) == 1


def test_hit_rate_chart_is_in_percent_with_the_20_percent_line():
    frame = pd.DataFrame(
        {
            "day": [DAY1, DAY2, DAY1],
            "task_type": ["research", "research", "simple_qa"],
            "finished_runs": [10, 20, 8],
            "budget_stops": [3, 2, 0],
            "interventions": [4, 2, 1],
            "hit_rate": [0.3, 0.1, 0.0],
            "intervention_rate": [0.4, 0.1, 0.125],
        }
    )
    fig = charts.hit_rate_daily(frame)
    research = next(t for t in fig.data if t.name == "research")
    assert [round(v, 6) for v in research.y] == [30.0, 10.0]
    lines = [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert [line.y0 for line in lines] == [20.0]
    assert fig.layout.yaxis.title.text == "Hit rate (%)"
    interventions = charts.hit_rate_daily(frame, rate="intervention_rate")
    assert [round(v, 6) for v in interventions.data[1].y] == [12.5]


def test_distribution_is_on_a_log_axis_with_p50_p95_and_preset_marked():
    frame = pd.DataFrame(
        {
            "task_type": ["code_generation"] * 3 + ["simple_qa"],
            "bucket_low_tokens": [10_000.0, 20_000.0, 40_000.0, 2_000.0],
            "bucket_high_tokens": [20_000.0, 40_000.0, 80_000.0, 4_000.0],
            "runs": [5, 12, 3, 40],
        }
    )
    fig = charts.token_distribution(
        frame, "code_generation", p50=25_000, p95=61_000, preset=92_000, limit=60_000
    )
    assert fig.layout.xaxis.type == "log"
    markers = {t.name.split(" ")[0]: t.x[0] for t in fig.data[1:]}
    assert markers == {"P50": 25_000, "P95": 61_000, "Preset": 92_000, "current": 60_000}
    low, high = fig.layout.xaxis.range
    assert low < math.log10(10_000) and high > math.log10(92_000)
    assert max(fig.data[0].y) == 12  # only code_generation's buckets are drawn


def test_distribution_skips_markers_that_are_unknown():
    frame = pd.DataFrame(
        {
            "task_type": ["tool_use"],
            "bucket_low_tokens": [5_000.0],
            "bucket_high_tokens": [6_000.0],
            "runs": [2],
        }
    )
    fig = charts.token_distribution(frame, "tool_use", p50=5_500, p95=None, preset=float("nan"))
    assert [t.name.split(" ")[0] for t in fig.data] == ["runs", "P50"]


def test_rates_by_task_type_draw_both_rates_against_the_alarm_line():
    frame = pd.DataFrame(
        {
            "task_type": ["research", "tool_use"],
            "runs": [30, 50],
            "hit_rate": [0.3, 0.05],
            "intervention_rate": [0.45, 0.1],
            "cost_usd": [3.0, None],
            "p95_total_tokens": [120_000.0, 9_000.0],
        }
    )
    fig = charts.rate_by_task(frame)
    hit = next(t for t in fig.data if t.name.startswith("hit rate"))
    intervention = next(t for t in fig.data if t.name.startswith("intervention rate"))
    assert dict(zip(hit.y, hit.x)) == {"research": 30.0, "tool_use": 5.0}
    assert dict(zip(intervention.y, intervention.x)) == {"research": 45.0, "tool_use": 10.0}
    assert [(s.x0, s.x1) for s in fig.layout.shapes] == [(20.0, 20.0)]


def test_stop_reasons_stack_runs_with_their_share_per_task_type():
    frame = pd.DataFrame(
        {
            "task_type": ["research", "research", "tool_use"],
            "stop_reason": ["completed", "budget_tokens", "completed"],
            "runs": [6, 2, 5],
        }
    )
    fig = charts.stop_reasons(frame)
    assert [t.name for t in fig.data] == ["completed", "budget_tokens"]
    budget = fig.data[1]
    assert list(budget.x) == [2] and budget.customdata[0][0] == pytest.approx(25.0)
    assert budget.marker.color == charts.STOP_COLORS["budget_tokens"]


def test_run_turns_show_cumulative_tokens_reservations_limit_and_events():
    start = dt.datetime(2026, 11, 20, 10, 0, 0)
    calls = pd.DataFrame(
        {
            "turn": [1, 2, 3],
            "start_utc": [start, start + dt.timedelta(seconds=10), start + dt.timedelta(seconds=20)],
            "model": ["gpt-4.1"] * 3,
            "input_tokens": [900, 1800, None],
            "output_tokens": [100, 200, None],
            "reserved_tokens": [1500, 2500, 3000],
            "cumulative_tokens": [1000, 3000, 6000],
            "limit_total_tokens": [8000] * 3,
            "usage_status": ["reported", "reported", "unknown"],
            "cost_usd": [0.01, 0.02, None],
        }
    )
    events = pd.DataFrame(
        {
            "ts_utc": [start + dt.timedelta(seconds=12)],
            "name": ["budgetlens.downgrade"],
            "reason": [None],
            "from_model": ["gpt-4.1"],
            "to_model": ["gpt-4.1-mini"],
            "tool_name": [None],
            "used_tokens": [3000],
            "percent": [37.5],
        }
    )
    fig = charts.run_turns(calls, events, run_id="r-1")
    reserved, used, marks = fig.data
    assert list(reserved.y) == [1500, 2500, 3000]
    assert list(used.y) == [1000, 3000, 6000]
    assert list(used.marker.symbol) == ["circle", "circle", "x"]  # unknown usage stands out
    assert [s.y0 for s in fig.layout.shapes] == [8000]  # the limit, taken from the calls
    assert list(marks.x) == [2] and list(marks.text) == ["downgrade: gpt-4.1-mini"]


def test_events_of_the_stop_turn_are_drawn_beside_the_stop_not_under_it():
    start = dt.datetime(2026, 11, 20, 10, 0, 0)
    calls = pd.DataFrame(
        {
            "turn": [1, 2],
            "start_utc": [start, start + dt.timedelta(seconds=10)],
            "reserved_tokens": [1500, 2500],
            "cumulative_tokens": [1000, 7000],
            "usage_status": ["reported", "reported"],
        }
    )
    at = start + dt.timedelta(seconds=11)  # a warning, a summary and the stop, all on turn 2
    events = pd.DataFrame(
        {
            "ts_utc": [at, at + dt.timedelta(milliseconds=1), at + dt.timedelta(milliseconds=2)],
            "name": ["budgetlens.warning", "budgetlens.summarize", "budgetlens.stop"],
            "reason": ["80 %", None, "budget_tokens"],
            "used_tokens": [6400, 6400, 7000],
        }
    )
    fig = charts.run_turns(calls, events)
    marks = {trace.name: list(trace.x) for trace in fig.data[2:]}
    spread = charts.runs.EVENT_SPREAD_TURNS
    assert marks == {
        "warning": [pytest.approx(2 - spread)],
        "summary": [pytest.approx(2.0)],
        "budget stop": [pytest.approx(2 + spread)],
    }  # side by side around turn 2, in the order they happened: the X covers neither


def test_preset_comparison_puts_current_limit_next_to_the_recommendation():
    changes = pd.DataFrame(
        {
            "task_type": ["research", "research", "tool_use"],
            "key": ["max_total_tokens", "max_turns", "max_total_tokens"],
            "current": [150_000, 30, None],
            "recommended": [264_000, 25, 43_000],
            "change_pct": [76.0, -16.7, None],
        }
    )
    fig = charts.preset_comparison(changes, "max_total_tokens")
    current, recommended = fig.data
    assert list(current.x) == ["research", "tool_use"]
    assert list(recommended.y) == [264_000, 43_000]
    assert list(recommended.text) == ["+76 %", ""]  # only changes are printed on the bars
    assert list(recommended.hovertext) == ["+76 %", "no current limit"]
    assert fig.layout.yaxis.title.text == "Max total tokens (tokens)"  # a human label
    assert list(fig.layout.yaxis.ticktext)[:3] == ["0", "100K", "200K"]  # not Plotly's 200k


@pytest.mark.parametrize(
    "builder, columns",
    [
        (charts.cost_stacked, ["period_start", "key", "cost_usd"]),
        (charts.cost_per_run, ["task_type", "bucket_low_usd", "bucket_high_usd", "runs"]),
        (charts.hit_rate_daily, ["day", "task_type", "hit_rate", "finished_runs"]),
        (charts.stop_reasons, ["task_type", "stop_reason", "runs"]),
        (charts.runs_per_day, ["day", "task_type", "finished_runs"]),
    ],
)
def test_empty_frames_give_a_labelled_empty_chart(builder, columns):
    fig = builder(pd.DataFrame(columns=columns))
    assert not fig.data
    assert _annotations(fig) and _annotations(fig)[0].startswith("No ")


def test_a_frame_without_the_documented_columns_is_rejected_by_name():
    with pytest.raises(ValueError, match=r"stop_reasons: data frame lacks column\(s\) \['runs'\]"):
        charts.stop_reasons(pd.DataFrame({"task_type": ["a"], "stop_reason": ["completed"]}))


def test_colors_are_stable_for_the_seed_task_types_and_distinct_for_others():
    colors = charts.color_map(["research", "zeta", "alpha"], charts.TASK_COLORS)
    assert colors["research"] == charts.TASK_COLORS["research"]
    assert colors["alpha"] != colors["zeta"]


def test_more_than_five_task_types_never_share_a_color():
    tasks = [
        *charts.TASK_COLORS,
        "foreign_agent",
        "imported_history",
        "local_unpriced",
        "rare_task",
        *[f"team_{i}" for i in range(8)],
    ]
    colors = charts.color_map(tasks, charts.TASK_COLORS)
    assert len(set(colors.values())) == len(tasks) == 17
    assert colors["foreign_agent"] != colors["simple_qa"]


def test_a_task_type_keeps_its_color_across_charts_given_the_store_wide_map():
    colors = charts.color_map(["alpha", "beta", "gamma", "simple_qa"], charts.TASK_COLORS)
    cost = pd.DataFrame(
        {
            "period_start": [pd.Timestamp(DAY1)] * 2,
            "key": ["gamma", "beta"],
            "cost_usd": [1.0, 2.0],
            "runs": [1, 1],
            "unpriced_calls": [0, 0],
        }
    )
    daily = pd.DataFrame(
        {
            "day": [DAY1],
            "task_type": ["gamma"],
            "finished_runs": [3],
            "budget_stops": [0],
            "interventions": [0],
            "hit_rate": [0.0],
            "intervention_rate": [0.0],
        }
    )
    cost_fig = charts.cost_stacked(cost, by="task_type", colors=colors)
    runs_fig = charts.runs_per_day(daily, colors=colors)
    assert {t.name: t.marker.color for t in cost_fig.data} == {
        "beta": colors["beta"],
        "gamma": colors["gamma"],
    }
    assert runs_fig.data[0].marker.color == colors["gamma"]
    # a key the map lacks gets a color none of the mapped keys uses
    other = charts.cost_stacked(cost.assign(key=["gamma", "delta"]), by="task_type", colors=colors)
    delta = next(t for t in other.data if t.name == "delta").marker.color
    assert delta not in colors.values()


def test_cost_buckets_read_alike_and_empty_buckets_inside_the_range_show():
    edges = [10 ** (k / 4) for k in range(9)]  # $1 .. $100 in quarter decades
    frame = pd.DataFrame(
        {
            "task_type": ["research", "research", "tool_use"],
            "bucket_low_usd": [edges[0], edges[4], edges[2]],  # $5.62–$10 (edges[3]) is empty
            "bucket_high_usd": [edges[1], edges[5], edges[3]],
            "runs": [4, 2, 7],
        }
    )
    fig = charts.cost_per_run(frame)
    order = list(fig.layout.xaxis.categoryarray)
    assert order == ["$1.00–$1.78", "$1.78–$3.16", "$3.16–$5.62", "$5.62–$10.00", "$10.00–$17.78"]
    research = next(t for t in fig.data if t.name == "research")
    assert list(research.x) == ["$1.00–$1.78", "$10.00–$17.78"]
    assert charts.bucket_label(0.01778, 0.03162) == "$0.0178–$0.0316"


@pytest.mark.parametrize("missing", [None, float("nan"), pd.NA])
def test_distribution_markers_accept_every_kind_of_missing_value(missing):
    frame = pd.DataFrame(
        {
            "task_type": ["imported"],
            "bucket_low_tokens": [5_000.0],
            "bucket_high_tokens": [6_000.0],
            "runs": [2],
        }
    )
    fig = charts.token_distribution(
        frame, "imported", p50=missing, p95=5_800.5, preset=missing, limit=missing
    )
    assert [t.name.split(" ")[0] for t in fig.data] == ["runs", "P95"]
    assert "%{x:,.1f}" in fig.data[1].hovertemplate  # the interpolated P95, one decimal


def test_calls_without_turn_numbers_are_numbered_in_start_order():
    start = dt.datetime(2026, 11, 20, 10, 0, 0)
    calls = pd.DataFrame(
        {
            "turn": pd.array([None, None, None], dtype="Int64"),
            "start_utc": [start + dt.timedelta(seconds=s) for s in (10, 0, 20)],
            "model": ["m"] * 3,
            "input_tokens": [900, 1800, 500],
            "output_tokens": [100, 200, 50],
            "reserved_tokens": pd.array([None, None, None], dtype="Int64"),
            "cumulative_tokens": [3000, 2000, 3550],
            "limit_total_tokens": [None] * 3,
            "usage_status": ["reported"] * 3,
            "cost_usd": [None] * 3,
        }
    )
    fig = charts.run_turns(calls, pd.DataFrame(), run_id="foreign")
    (used,) = fig.data  # no reservation bars: the trace reported none
    assert list(used.x) == [1, 2, 3]
    assert list(used.y) == [2000, 3000, 3550]
    assert fig.layout.xaxis.title.text == "Model call (in start order)"
    assert not fig.layout.shapes  # no limit line


def test_preset_comparison_says_when_no_run_had_the_limit():
    changes = pd.DataFrame(
        {
            "task_type": ["imported"],
            "key": ["max_turns"],
            "current": [None],
            "recommended": [40],
            "change_pct": [None],
        }
    )
    fig = charts.preset_comparison(changes, "max_turns")
    assert [t.name for t in fig.data] == ["recommended preset"]
    assert _annotations(fig) == ["No run ran under a max_turns limit: recommendations only"]


def test_days_without_a_budgeted_run_are_gaps_in_the_hit_rate_line_not_zero():
    daily = pd.DataFrame(
        {
            "day": [dt.date(2026, 11, d) for d in (20, 21, 22)],
            "task_type": ["qa"] * 3,
            "finished_runs": [10, 4, 10],
            "budget_stops": [2, 0, 1],
            "interventions": [2, 0, 1],
            "hit_rate": [0.2, None, 0.1],
            "intervention_rate": [0.2, None, 0.1],
        }
    )
    line = charts.hit_rate_daily(daily).data[0]
    values = list(line.y)
    assert values[0] == pytest.approx(20.0) and values[2] == pytest.approx(10.0)
    assert math.isnan(values[1])  # a gap, never 0 %
    assert line.connectgaps is False


def test_a_task_type_without_budgeted_runs_reads_no_budget_instead_of_a_zero_bar():
    per_task = pd.DataFrame(
        {"task_type": ["imported", "qa"], "hit_rate": [None, 0.3], "intervention_rate": [None, 0.4]}
    )
    fig = charts.rate_by_task(per_task)
    hit = next(t for t in fig.data if t.name == "hit rate (budget stops)")
    assert math.isnan(list(hit.x)[list(hit.y).index("imported")])
    note = next(t for t in fig.data if t.type == "scatter")
    assert list(note.y) == ["imported"] and list(note.text) == ["no budget"]
    assert fig.layout.yaxis.automargin  # long task-type names are never cut off


@pytest.mark.parametrize(
    "top, labels", [(210_000, ["0", "50K", "100K", "150K", "200K"]), (1_600_000, ["0", "500K", "1M", "1.5M"])]
)
def test_token_axes_read_like_the_tiles(top, labels):
    calls = pd.DataFrame(
        {"turn": [1, 2], "cumulative_tokens": [top / 2, top], "reserved_tokens": [None, None]}
    )
    fig = charts.run_turns(calls)
    assert list(fig.layout.yaxis.ticktext)[: len(labels)] == labels


def test_cost_axes_never_round_a_small_cost_to_zero_dollars():
    df = pd.DataFrame(
        {
            "period_start": [dt.datetime(2026, 11, 20)],
            "key": ["m"],
            "cost_usd": [0.0039],
            "runs": [1],
            "unpriced_calls": [0],
        }
    )
    fig = charts.cost_stacked(df)
    assert fig.layout.yaxis.tickformat == "$,.3~g"
    assert "$,.2f" not in fig.data[0].hovertemplate


# --- issue 11: bars at the edges, markers, colors -------------------------------------------------
def test_one_day_of_cost_is_a_bar_most_of_a_day_wide_not_a_hairline():
    frame = pd.DataFrame(
        {
            "period_start": [pd.Timestamp(DAY1)] * 2,
            "key": ["simple_qa", "research"],
            "cost_usd": [3.5, 4.87],
            "runs": [10, 4],
            "unpriced_calls": [0, 0],
        }
    )
    fig = charts.cost_stacked(frame, period="day", by="task_type")
    assert {trace.width for trace in fig.data} == {0.8 * 86_400_000}  # ms on a date axis
    low, high = (pd.Timestamp(v) for v in fig.layout.xaxis.range)
    assert high - low == pd.Timedelta(days=2)  # a day of room either side of the one bar
    daily = pd.DataFrame({"day": [DAY1], "task_type": ["simple_qa"], "finished_runs": [12]})
    runs = charts.runs_per_day(daily)
    assert runs.data[0].width == 0.8 * 86_400_000


@pytest.mark.parametrize(
    "days, period", [(0.5, "hour"), (2, "hour"), (14, "day"), (92, "day"), (200, "week"), (1000, "month")]
)
def test_long_ranges_roll_up_to_weeks_and_months(days, period):
    assert charts.period_for_span(days) == period


def test_days_roll_up_into_weeks_from_monday_and_months():
    days = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(30)]  # Sun 1 Nov .. 30 Nov
    daily = pd.DataFrame({"day": days, "task_type": ["qa"] * 30, "finished_runs": range(1, 31)})
    weeks = charts.roll_up(daily, "day", "week", ["finished_runs"], ["task_type"])
    assert weeks["day"].min() == pd.Timestamp("2026-10-26")  # the Monday before Sunday 1 Nov
    assert weeks["finished_runs"].sum() == sum(range(1, 31))
    assert weeks.loc[weeks["day"] == pd.Timestamp("2026-11-02"), "finished_runs"].item() == sum(range(2, 9))
    months = charts.roll_up(daily, "day", "month", ["finished_runs"], ["task_type"])
    assert months["finished_runs"].tolist() == [sum(range(1, 31))]
    fig = charts.runs_per_day(daily, period="week")
    assert fig.layout.title.text == "Finished runs per week"
    assert fig.data[0].width == pytest.approx(0.8 * 7 * 86_400_000)


def test_cost_per_run_counts_on_a_log_axis_so_the_dear_tail_shows():
    frame = pd.DataFrame(
        {
            "task_type": ["qa", "qa", "research"],
            "bucket_low_usd": [0.01, 1.0, 17.78],
            "bucket_high_usd": [0.01778, 1.778, 31.62],
            "runs": [2000, 3, 1],
        }
    )
    fig = charts.cost_per_run(frame)
    assert fig.layout.yaxis.type == "log"


def test_tool_calls_are_not_drawn_as_budget_events_and_the_stop_stands_apart():
    start = dt.datetime(2026, 11, 20, 10, 0, 0)
    calls = pd.DataFrame(
        {
            "turn": [1, 2],
            "start_utc": [start, start + dt.timedelta(seconds=10)],
            "reserved_tokens": [None, None],
            "cumulative_tokens": [1000, 3000],
            "usage_status": ["reported", "reported"],
        }
    )
    names = ["budgetlens.tool_call"] * 5 + ["budgetlens.warning", "budgetlens.stop"]
    events = pd.DataFrame(
        {
            "ts_utc": [start + dt.timedelta(seconds=1 + i) for i in range(7)],
            "name": names,
            "reason": [None] * 6 + ["budget_tokens"],
            "from_model": [None] * 7,
            "to_model": [None] * 7,
            "tool_name": ["search"] * 5 + [None, None],
            "used_tokens": [None] * 7,
            "percent": [None] * 7,
        }
    )
    fig = charts.run_turns(calls, events)
    markers = {t.name: t for t in fig.data if t.mode == "markers"}
    assert set(markers) == {"warning", "budget stop"}  # 5 tool calls: no marker
    assert markers["budget stop"].marker.symbol == "x" and markers["budget stop"].marker.color == "#E45756"
    assert markers["warning"].marker.color != markers["budget stop"].marker.color


def test_the_intervention_chart_has_no_alarm_line():
    daily = pd.DataFrame(
        {
            "day": [DAY1],
            "task_type": ["qa"],
            "finished_runs": [10],
            "budget_stops": [1],
            "interventions": [3],
            "hit_rate": [0.1],
            "intervention_rate": [0.3],
        }
    )
    assert len(charts.hit_rate_daily(daily).layout.shapes) == 1
    assert len(charts.hit_rate_daily(daily, rate="intervention_rate").layout.shapes) == 0


def test_task_types_never_take_the_reds_of_a_budget_stop():
    colors = charts.color_map([f"task-{i}" for i in range(16)], charts.TASK_COLORS)
    assert not set(colors.values()) & {"#E45756", "#FF9DA6", "#B22222", "#843C39"}


def test_p95_preset_and_limit_are_told_apart_by_hue_and_dash():
    frame = pd.DataFrame(
        {"task_type": ["qa"], "bucket_low_tokens": [1000.0], "bucket_high_tokens": [1259.0], "runs": [5]}
    )
    fig = charts.token_distribution(frame, "qa", p50=1100, p95=1200, preset=2000, limit=3000)
    lines = {t.name.split(" ")[0]: (t.line.color, t.line.dash) for t in fig.data[1:]}
    assert len({color for color, _ in lines.values()}) == 4 and len({d for _, d in lines.values()}) == 4
    assert not {color for color, _ in lines.values()} & {"#E45756", "#F58518"}  # no red/orange


PLANTED = "<a href='http://evil.example/x'>click</a> %{y} <img src=x>"


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list | tuple):
        return [s for value in node for s in _strings(value)]
    if hasattr(node, "tolist"):
        return _strings(node.tolist())
    return []


def test_a_planted_task_type_is_plotly_text_not_a_link_or_a_hover_substitution():
    day = pd.Timestamp(DAY1)
    daily = pd.DataFrame(
        {
            "day": [day],
            "task_type": [PLANTED],
            "finished_runs": [4],
            "budget_stops": [1],
            "interventions": [1],
            "hit_rate": [0.25],
            "intervention_rate": [0.25],
        }
    )
    per_task = pd.DataFrame({"task_type": [PLANTED], "hit_rate": [0.25], "intervention_rate": [0.5]})
    stops = pd.DataFrame({"task_type": [PLANTED], "stop_reason": [PLANTED], "runs": [3]})
    cost = pd.DataFrame({"period_start": [day], "key": [PLANTED], "cost_usd": [1.0], "runs": [2]})
    figures = [
        charts.hit_rate_daily(daily),
        charts.runs_per_day(daily),
        charts.rate_by_task(per_task),
        charts.stop_reasons(stops),
        charts.cost_stacked(cost, by="task_type"),
    ]
    shown = charts.plot_text(PLANTED)
    assert shown == "&lt;a href='http://evil.example/x'&gt;click&lt;/a&gt; &#37;{y} &lt;img src=x&gt;"
    for fig in figures:
        texts = _strings(fig.to_dict()["data"]) + _strings(fig.to_dict()["layout"])
        assert any(shown in t for t in texts), fig.layout.title.text
        assert not [t for t in texts if "<a " in t or "<img" in t or "%{y} <" in t]
