"""Streamlit AppTests of the dashboard: every page on a sample store, the shared filters, the
numbers the tiles show, and what the app shows when the store is missing or busy."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _apptest import APP, run_app
from browser.live_writer import null_heavy_batches, run_rows, write_runs
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_DB
from budgetlens.dashboard import charts, data
from budgetlens.importers import import_paths
from budgetlens.sample import default_end_utc
from budgetlens.store import read_connection, write_batch, write_connection

pytestmark = pytest.mark.system  # Streamlit AppTests: seconds each

PAGES = {  # page file -> the fewest Plotly charts it draws on a sample store
    "overview": 3,
    "cost": 3,
    "hit_rate": 4,
    "baselines": 2,
    "presets": 1,
    "runs": 1,
}


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_copy) -> Path:
    path = tmp_path_factory.mktemp("sample") / "sample.duckdb"
    # ends today: the dashboard's default window (the last 14 days up to now) keeps most of it
    return sample_store_copy(path, days=14, seed=11, runs_per_day=25, end_utc=default_end_utc())


@pytest.fixture(scope="module")
def controlled_store(tmp_path_factory) -> Path:
    """hot: 20 runs, 6 stopped by the budget (30 %); calm: 20 runs, 2 stopped (10 %)."""
    path = tmp_path_factory.mktemp("controlled") / "controlled.duckdb"
    # three days ago at 09:00 UTC: inside the default window (the last 14 days up to now)
    start = (analysis.utc_now() - dt.timedelta(days=3)).replace(hour=9, minute=0, second=0, microsecond=0)
    batches = []
    for task, stops in (("hot", 6), ("calm", 2)):
        for index in range(20):
            batches.append(
                run_rows(
                    f"{task}-{index:04d}",
                    task_type=task,
                    start_utc=start + dt.timedelta(minutes=7 * index),
                    stop_reason="budget_tokens" if index < stops else "completed",
                )
            )
    with write_connection(path) as conn:
        write_runs(conn, batches)  # one commit (as one write_batch per run would store them)
    return path


@pytest.fixture(scope="module")
def null_heavy_store(tmp_path_factory) -> Path:
    """Seven task types full of NULLs: imported runs without limits, a foreign trace without
    turns, unpriced runs, a low-sample task type at 25 % (see ``null_heavy_batches``)."""
    path = tmp_path_factory.mktemp("nulls") / "nulls.duckdb"
    with write_connection(path) as conn:
        write_runs(conn, null_heavy_batches())
    return path


@pytest.fixture(scope="module")
def imported_store(tmp_path_factory, realdata) -> Path:
    """Real Claude Code and Codex logs imported as a user would (no limits, no reservations)."""
    path = tmp_path_factory.mktemp("imported") / "imported.duckdb"
    import_paths("claude-code", [realdata / "claude-code-jsonl"], path)
    import_paths("codex", [realdata / "codex-cli-rollouts"], path)
    return path


def _app(db: Path, monkeypatch, page: str | None = None, run: str | None = None, **params: str) -> AppTest:
    """The app on ``db`` at ``page``; ``params`` are URL query parameters (``window="all"``:
    stores fixed in the past), ``run`` opens that run on the Runs page."""
    at = run_app(db, monkeypatch, page, timeout=30, **params)
    if run:
        at.query_params["run"] = run
        at.run()
    return at


def _param(at: AppTest, name: str) -> list[str]:
    """A URL query parameter of the app as a list (AppTest keeps a single value as a str)."""
    value = at.query_params.get(name)
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _newest_run(db: Path) -> str:
    with read_connection(db) as conn:
        return conn.execute("SELECT run_id FROM runs ORDER BY start_utc DESC LIMIT 1").fetchone()[0]


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _shown(markdown: str) -> str:
    """What a reader sees of markdown that went through ``formatting.safe_text``: its backslash
    escapes resolved and its invisible word joiners dropped (issue 23)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


def _texts(at: AppTest) -> str:
    kinds = ("error", "warning", "info", "caption", "markdown")
    parts = [getattr(e, "value", "") for kind in kinds for e in at.get(kind)]
    return _shown("\n".join(str(p) for p in parts))


@pytest.mark.parametrize("page, charts_at_least", PAGES.items())
def test_every_page_renders_its_charts_without_an_exception(sample_store, monkeypatch, page, charts_at_least):
    at = _app(sample_store, monkeypatch, page, run=_newest_run(sample_store) if page == "runs" else None)
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= charts_at_least
    assert at.title[0].value


def _cli_window(conn) -> analysis.Filters:
    """The CLI's default window: the last 14 days up to now."""
    return analysis.window_filters(14)


def test_overview_tiles_show_the_analysis_numbers(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch)
    with read_connection(sample_store) as conn:
        expected = analysis.overview(conn, _cli_window(conn))
    tiles = _metrics(at)
    assert tiles["Runs"] == f"{expected.runs:,}"
    assert tiles["Cost"] == charts.format_usd(expected.cost_usd)
    assert tiles["Budget hit rate"] == charts.format_percent(expected.hit_rate)
    assert tiles["P95 tokens / run"] == charts.format_tokens(expected.p95_total_tokens)
    assert tiles["Unpriced calls"] == f"{expected.unpriced_calls:,}"


def test_banner_names_the_task_types_whose_hit_rate_is_above_20_percent(controlled_store, monkeypatch):
    for page, tile, value in (("overview", "Runs", "40"), ("hit_rate", "Budget stops", "8")):
        at = _app(controlled_store, monkeypatch, page)
        banners = [e.value for e in at.error]
        assert len(banners) == 1
        assert banners[0].startswith("**hot**: budget hit rate 30.0 %")
        assert _metrics(at)[tile] == value


def test_task_type_filter_narrows_the_tiles(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch)
    at.multiselect(key="app_task_types").set_value(["calm"]).run()
    tiles = _metrics(at)
    assert tiles["Runs"] == "20"
    assert tiles["Budget hit rate"] == "10.0 %"
    assert not at.error  # calm is under the alarm line


def test_time_zone_moves_the_day_buckets(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, "hit_rate")
    at.selectbox(key="app_tz").set_value("Pacific/Kiritimati").run()  # UTC+14: 09:00 -> 23:00
    assert not at.exception
    assert "days in Pacific/Kiritimati" in _texts(at)
    assert at.session_state[data.FILTERS_KEY].tz == "Pacific/Kiritimati"


def test_unpriced_usage_shows_as_unpriced_never_as_zero_dollars(tmp_path, monkeypatch):
    path = tmp_path / "unpriced.duckdb"
    calls, records, events = run_rows("local-0001", task_type="qa", model="local-llama", priced=False)
    with write_connection(path) as conn:
        write_batch(conn, calls, records, events)
    at = _app(path, monkeypatch)
    assert _metrics(at)["Cost"] == "unpriced"
    at = _app(path, monkeypatch, "cost")
    assert _metrics(at)["Total cost"] == "unpriced"
    assert "3 calls used a model with no known price" in _texts(at)
    assert "$0.00" not in _metrics(at).values()


def test_a_partly_priced_run_shows_its_cost_as_known_spend_plus_unpriced_usage(tmp_path, monkeypatch):
    path = tmp_path / "partial.duckdb"
    priced = run_rows("priced-0001", task_type="qa", start_utc=dt.datetime(2026, 11, 20, 9))
    calls, records, events = run_rows("partial-0001", task_type="qa", start_utc=dt.datetime(2026, 11, 20, 10))
    calls[-1]["cost_usd"] = None  # the last call's model has no known price
    with write_connection(path) as conn:
        write_batch(conn, *priced)
        write_batch(conn, calls, records, events)
    at = _app(path, monkeypatch, window="all")
    assert _metrics(at)["Cost"] == charts.format_usd(0.006 + 0.004)  # known spend only
    note = "\n".join(c.value for c in at.caption)
    assert "is the known spend only: the unpriced usage" in note
    assert "(1 call with no known price, 1 partly priced run) is not in it" in note
    at = _app(path, monkeypatch, "cost", window="all")
    assert "Partly priced runs: 1" in _texts(at) and "+ unpriced usage" in _texts(at)


def test_fully_priced_runs_show_no_unpriced_note(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch)
    assert "unpriced usage" not in _texts(at)
    at = _app(controlled_store, monkeypatch, "cost")
    assert not at.warning


def test_presets_follow_the_multiplier_control(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch, "presets")
    from budgetlens.analysis import whatif

    with read_connection(sample_store) as conn:  # Kaplan–Meier P95 where censoring is material
        evidence = whatif.evidence(conn, _cli_window(conn))
    table = at.dataframe[0].value
    expected = whatif.evidence_presets(evidence, 1.5)["max_total_tokens"]
    assert list(table["max_total_tokens"]) == list(expected)
    at.slider(key="presets_multiplier").set_value(2.0).run()
    table = at.dataframe[0].value
    expected = whatif.evidence_presets(evidence, 2.0)["max_total_tokens"]
    assert list(table["max_total_tokens"]) == list(expected)
    assert "multiplier: 2.0" in at.code[0].value  # the downloadable document follows too


def test_runs_page_searches_and_shows_one_runs_turns(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, "runs", window="all")
    at.text_input(key="runs_search").set_value("hot-0002").run()
    table = at.dataframe[0].value
    assert list(table["run_id"]) == ["runs?run=hot-0002"]  # a link to the run, showing its id
    assert len(at.get("plotly_chart")) == 0  # no run opened yet
    at.query_params["run"] = "hot-0002"  # what the link (or picking the row) does
    at.run()
    assert _shown(at.subheader[0].value) == "Run hot-0002"
    assert _metrics(at)["Total tokens"] == "6,000"
    assert _metrics(at)["Token limit"] == "20.0K"
    assert "budget_tokens" in _texts(at)
    assert len(at.get("plotly_chart")) == 1


def test_a_missing_store_says_there_is_no_data_yet(tmp_path, monkeypatch):
    at = _app(tmp_path / "none.duckdb", monkeypatch)
    assert not at.exception
    assert "No data yet" in at.info[0].value
    assert not at.metric  # no empty tiles


def _hold_write_lock(db: Path, *, commit_first: bool):
    """Start a process that (optionally commits one run and) holds the store's write lock."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from browser.live_writer import run_rows
        from budgetlens.store import write_batch, write_connection
        with write_connection({str(db)!r}) as conn:
            if {commit_first!r}:
                write_batch(conn, *run_rows("late-0001", task_type="calm"))
            print("locked", flush=True)
            time.sleep(60)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    return process


@pytest.mark.system
def test_a_store_held_by_the_writer_shows_data_unavailable_not_a_lock_error(tmp_path, monkeypatch):
    path = tmp_path / "busy.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *run_rows("calm-0001", task_type="calm"))
    monkeypatch.setattr(data, "READ_TIMEOUT_S", 0.3)
    holder = _hold_write_lock(path, commit_first=False)
    try:
        at = _app(path, monkeypatch)
    finally:
        holder.kill()
        holder.wait()
    assert not at.exception
    assert "Data unavailable, retrying" in at.warning[0].value
    # Not DuckDB's own lock error: the message names the file and the holder, and what to do (issue 22)
    shown = _texts(at)
    assert "Could not set lock" not in shown and "IO Error" not in shown
    assert f"{path} is locked by" in shown and str(holder.pid) in shown
    assert not at.metric


@pytest.mark.system
def test_a_busy_store_keeps_showing_the_last_good_results(tmp_path, monkeypatch):
    path = tmp_path / "stale.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *run_rows("calm-0001", task_type="calm"))
    monkeypatch.setattr(data, "READ_TIMEOUT_S", 0.3)
    at = _app(path, monkeypatch)
    assert _metrics(at)["Runs"] == "1"
    holder = _hold_write_lock(path, commit_first=True)  # the data changed, then stays locked
    try:
        at.run()
    finally:
        holder.kill()
        holder.wait()
    assert not at.exception
    assert _metrics(at)["Runs"] == "1"  # the earlier figure, not an empty tile
    assert "Store busy: showing results read at" in _texts(at)
    at.run()  # the writer is gone: the new run shows
    assert _metrics(at)["Runs"] == "2"


@pytest.mark.parametrize("query, choice", [(None, "Off"), ("5", "5 s"), ("30", "30 s"), ("7", "Off")])
def test_auto_refresh_is_off_unless_the_url_asks_for_5_or_30_seconds(
    controlled_store, monkeypatch, query, choice
):
    monkeypatch.setenv(ENV_DB, str(controlled_store))
    at = AppTest.from_file(str(APP), default_timeout=30)
    if query:
        at.query_params["refresh"] = query
    at.run()
    assert at.radio(key="app_refresh").value == choice


def test_cost_page_switches_between_daily_and_hourly_buckets(sample_store, monkeypatch):
    import json

    at = _app(sample_store, monkeypatch, "cost")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert titles[:2] == ["Cost per day by model", "Cost per day by task type"]
    at.radio(key="cost_period").set_value("hour").run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert [s["layout"]["title"]["text"] for s in specs[:2]] == [
        "Cost per hour by model",
        "Cost per hour by task type",
    ]
    assert specs[0]["layout"]["xaxis"]["title"]["text"] == "Hour"


def test_a_file_without_budgetlens_tables_reads_as_no_data_yet(tmp_path, monkeypatch):
    import duckdb

    path = tmp_path / "empty.duckdb"
    duckdb.connect(str(path)).close()  # a DuckDB file, not migrated yet
    at = _app(path, monkeypatch)
    assert not at.exception
    assert "has no budgetlens tables yet" in at.info[0].value


# --- stores full of NULLs: imports, foreign traces, unpriced models -----------------------------
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize(
    "store", ["null_heavy_store", pytest.param("imported_store", marks=pytest.mark.realdata)]
)
def test_every_page_renders_on_null_heavy_data_with_missing_values_as_a_dash(
    request, monkeypatch, store, page
):
    db = request.getfixturevalue(store)
    at = _app(db, monkeypatch, page, window="all", run=_newest_run(db) if page == "runs" else None)
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("plotly_chart") or "No model calls were recorded for this run" in _texts(at)
    assert at.dataframe and all(df.proto.placeholder == "—" for df in at.dataframe)
    assert "None" not in _texts(at) and "<NA>" not in _texts(at)


def test_baselines_draw_a_distribution_for_task_types_that_ran_without_a_limit(null_heavy_store, monkeypatch):
    import json

    at = _app(null_heavy_store, monkeypatch, "baselines")
    assert not at.exception
    specs = {
        json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
    }
    imported = specs["imported_history: total tokens per run"]
    names = [trace["name"].split(" ")[0] for trace in imported["data"]]
    assert names == ["runs", "P50", "P95", "Preset"]  # no current-limit line: there was none
    guarded = specs["tool_use: total tokens per run"]
    assert "current" in [trace["name"].split(" ")[0] for trace in guarded["data"]]


def test_a_low_sample_task_type_gets_a_note_not_the_red_banner(null_heavy_store, monkeypatch):
    for page in ("overview", "hit_rate"):
        at = _app(null_heavy_store, monkeypatch, page)
        assert not at.error  # rare_task: 1 stop in 4 finished runs is 25 %, but a low sample
        notes = [_shown(i.value) for i in at.info]
        assert any("low sample" in n and "**rare_task** 25.0 % of 4" in n for n in notes), notes


def _values(array) -> list:
    """A Plotly JSON array as a list (Plotly 6 sends numpy arrays as base64 ``bdata``)."""
    import base64

    import numpy as np

    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _figure(chart):
    """The Plotly figure of an AppTest chart element (arrays decoded)."""
    import plotly.io

    return plotly.io.from_json(chart.proto.spec, skip_invalid=True)


def test_a_foreign_runs_calls_are_numbered_in_start_order(null_heavy_store, monkeypatch):
    import json

    at = _app(null_heavy_store, monkeypatch, "runs", run="foreign-0001", window="all")
    assert "None" not in _texts(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    used = next(t for t in spec["data"] if t["name"] == "cumulative used")
    assert _values(used["x"]) == [1, 2, 3]
    assert _values(used["y"]) == [1200, 3400, 6600]
    assert spec["layout"]["xaxis"]["title"]["text"] == "Model call (in start order)"


def test_presets_say_no_current_limit_instead_of_new(null_heavy_store, monkeypatch):
    at = _app(null_heavy_store, monkeypatch, "presets")
    changes = at.dataframe[1].value.set_index("task_type")["change"]
    assert changes["imported_history"] == "no current limit"
    assert changes["tool_use"].endswith(" %")
    assert not changes.isin(["new", "new limit"]).any()
    at.selectbox(key="presets_key").set_value("max_cost_usd").run()
    changes = at.dataframe[1].value.set_index("task_type")["change"]
    assert changes["local_unpriced"] == "no data"  # no priced run, so no cost preset


def test_download_buttons_have_short_labels_that_fit(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch, "presets")
    buttons = at.get("download_button")
    assert [b.proto.label for b in buttons] == ["YAML", "TOML", "JSON"]


def test_charts_hide_the_plotly_toolbar_that_covered_their_titles(sample_store, monkeypatch):
    import json

    at = _app(sample_store, monkeypatch, "cost")
    configs = [json.loads(c.proto.config) for c in at.get("plotly_chart")]
    assert configs and all(c["displayModeBar"] is False for c in configs)


def test_a_task_type_has_the_same_color_on_every_chart_of_a_page(null_heavy_store, monkeypatch):
    at = _app(null_heavy_store, monkeypatch, "overview")
    colors: dict[str, set] = {}
    for chart in at.get("plotly_chart"):
        for trace in _figure(chart).data:
            if trace.type == "bar" and trace.name in null_heavy_tasks():
                colors.setdefault(trace.name, set()).add(trace.marker.color)
    assert all(len(c) == 1 for c in colors.values()), colors
    assert len({next(iter(c)) for c in colors.values()}) == len(colors)  # and all distinct


def null_heavy_tasks() -> tuple[str, ...]:
    from browser.live_writer import NULL_HEAVY_TASKS

    return NULL_HEAVY_TASKS


# --- review fixes: the default window, a file that is not a store, formats and labels -----------
def test_the_default_window_is_the_clis_last_14_days_so_both_show_the_same_numbers(
    tmp_path, monkeypatch, sample_store_copy
):
    path = sample_store_copy(
        tmp_path / "long.duckdb", days=30, seed=5, runs_per_day=6, end_utc=default_end_utc()
    )
    at = _app(path, monkeypatch)
    assert at.selectbox(key="app_window").value == "Last 14 days"
    with read_connection(path) as conn:
        windowed = analysis.overview(conn, _cli_window(conn))
        everything = analysis.overview(conn, analysis.Filters())
    assert windowed.runs < everything.runs  # the window really leaves older runs out
    assert _metrics(at)["Runs"] == f"{windowed.runs:,}"
    at.selectbox(key="app_window").set_value("All data").run()
    assert _metrics(at)["Runs"] == f"{everything.runs:,}"


@pytest.mark.parametrize("content", [b"run_id,task_type\nr1,qa\n", b"\x00" * 4096])
def test_a_file_that_is_not_a_duckdb_store_is_an_error_not_a_retry_loop(tmp_path, monkeypatch, content):
    path = tmp_path / "runs.csv"
    path.write_bytes(content)
    at = _app(path, monkeypatch)
    assert not at.exception
    assert at.error and at.error[0].value.startswith("**This file is not a budgetlens store:**")
    assert str(path) in _shown(at.error[0].value)
    assert not at.warning  # no "retrying…"
    assert at.session_state[data.UNAVAILABLE_KEY] == "invalid"
    assert not at.metric


def _column_configs(frame_element) -> dict:
    import json

    return json.loads(frame_element.proto.columns)


def test_preset_costs_use_the_clis_usd_format_never_zero_dollars(null_heavy_store, monkeypatch):
    at = _app(null_heavy_store, monkeypatch, "presets")
    with read_connection(null_heavy_store) as conn:
        baselines = analysis.baselines(conn, _cli_window(conn))
    expected = analysis.presets(baselines, 1.5).set_index("task_type")["max_cost_usd"]
    shown = at.dataframe[0].value.set_index("task_type")["max_cost_usd"]
    for task, value in expected.items():
        assert shown[task] == charts.format_usd(value, unpriced="—")
        assert shown[task] != "$0.00"


@pytest.mark.parametrize(
    "page, frame, wanted",
    [
        (
            "overview",
            0,
            {"task_type": "Task type", "p95_total_tokens": "P95 total tokens", "cost_usd": "Cost (USD)"},
        ),
        # the Cost page's first table is "Who spent it" (issue 19); the runs table is the second
        ("cost", 1, {"run_id": "Run ID", "cost_usd": "Cost (USD)", "total_tokens": "Total tokens"}),
        (
            "baselines",
            0,
            {
                "p50_total_tokens": "P50 total tokens",
                "low_sample": "Sample",
                "p95_cost_usd": "P95 cost (USD)",
            },
        ),
        ("presets", 0, {"max_total_tokens": "Max total tokens", "max_cost_usd": "Max cost (USD)"}),
        ("runs", 0, {"run_id": "Run ID", "start_utc": "Start (UTC)", "cost_usd": "Cost (USD)"}),
    ],
)
def test_tables_show_human_labels_with_the_key_columns_first(sample_store, monkeypatch, page, frame, wanted):
    at = _app(sample_store, monkeypatch, page)
    element = at.dataframe[frame]
    configs = _column_configs(element)
    labels = {name: config.get("label") for name, config in configs.items()}
    for column, label in wanted.items():
        assert labels.get(column) == label, labels
    order = list(element.proto.column_order)
    assert "cost_usd" not in order or order.index("cost_usd") <= 5  # never behind the long tail


def test_low_sample_is_a_text_badge_not_a_checkbox(null_heavy_store, monkeypatch):
    at = _app(null_heavy_store, monkeypatch, "baselines")
    table = at.dataframe[0].value.set_index("task_type")
    assert set(table["low_sample"]) <= {"low sample", ""}
    assert table.loc["rare_task", "low_sample"] == "low sample"
    config = _column_configs(at.dataframe[0])["low_sample"]
    assert config.get("type_config", {}).get("type") != "checkbox"


def test_rates_read_as_one_decimal_percent_in_tables(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, "hit_rate")
    daily = at.dataframe[0]
    configs = _column_configs(daily)
    assert configs["hit_rate"]["type_config"]["format"] == "%.1f %%"
    assert max(daily.value["hit_rate"]) == pytest.approx(30.0)  # 6 of 20 runs, shown as 30.0 %


def test_runs_without_any_limit_read_no_budget_not_a_zero_hit_rate(imported_store, monkeypatch):
    import json

    for page, tile in (("overview", "Budget hit rate"), ("hit_rate", "Hit rate")):
        at = _app(imported_store, monkeypatch, page, window="all")
        assert _metrics(at)[tile] == "no budget"
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)  # the daily hit-rate lines
    drawn = [
        v
        for trace in spec["data"]
        if trace.get("mode") == "lines+markers"
        for v in _values(trace["y"])
        if v is not None and v == v
    ]
    assert drawn == []  # gaps, never a line at 0 %


# --- issue 11: URL filters, empty and low-data states ----------------------------------------------
def test_a_shared_link_sets_the_filters_and_the_url_follows_the_sidebar(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, "hit_rate", window="7d", task_type="calm", tz="Asia/Tokyo")
    f = at.session_state[data.FILTERS_KEY]
    assert f.task_types == ("calm",) and f.tz == "Asia/Tokyo"
    assert f.end_utc - f.start_utc == dt.timedelta(days=7, microseconds=1)
    assert _metrics(at)["Budget stops"] == "2"
    at.multiselect(key="app_task_types").set_value(["hot"]).run()
    assert _param(at, "task_type") == ["hot"] and _param(at, "window") == ["7d"]
    assert _metrics(at)["Budget stops"] == "6"


def test_a_link_naming_an_unknown_task_type_filters_nothing_out(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, task_type="no-such-task")
    assert at.session_state[data.FILTERS_KEY].task_types == ()
    assert _metrics(at)["Runs"] == "40"


def test_an_empty_store_says_how_to_send_data_not_to_clear_a_filter(tmp_path, monkeypatch):
    path = tmp_path / "empty.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, [], [], [])
    for page in PAGES:
        at = _app(path, monkeypatch, page)
        assert not at.exception, page
        text = _texts(at)
        assert "No runs in this store yet" in text and "budgetlens sample" in text, page
        assert "clear" not in text.lower(), page


def test_an_empty_window_names_only_what_is_set(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, window="24h")  # the runs are 3 days old
    text = _texts(at)
    assert "No runs match these filters. Widen the time window." in text
    assert "This window keeps 0 of 40 runs** (40 before the window)" in text
    at.button(key="app_show_all").click().run()
    assert _metrics(at)["Runs"] == "40" and _param(at, "window") == ["all"]


def test_the_cost_page_shows_no_empty_warning_box(controlled_store, monkeypatch):
    at = _app(controlled_store, monkeypatch, "cost")
    assert all(w.value.strip() for w in at.warning)


def test_a_hit_rate_over_few_budgeted_runs_is_marked_low_sample(tmp_path, monkeypatch):
    path = tmp_path / "one.duckdb"
    with write_connection(path) as conn:
        write_batch(conn, *run_rows("only-0001", task_type="qa", stop_reason="budget_tokens"))
    at = _app(path, monkeypatch)
    assert _metrics(at)["Budget hit rate"] == "100.0 % (low sample)"
    at = _app(path, monkeypatch, "hit_rate")
    assert _metrics(at)["Hit rate"] == "100.0 % (low sample)"
    assert _metrics(at)["Budgeted runs (of 1)"] == "1"  # the count alone: it fits its tile


def _periods_store(path: Path, *, cover_previous: bool) -> Path:
    """4 runs 3 days ago, 2 runs 10 days ago (in the 7 days before a 7-day window); with
    ``cover_previous`` one more run 15 days ago, so the data covers that previous window fully."""
    now = analysis.utc_now()
    batches = [
        run_rows(f"new-{index}", start_utc=now - dt.timedelta(days=3, minutes=index)) for index in range(4)
    ]
    batches += [
        run_rows(f"old-{index}", start_utc=now - dt.timedelta(days=10, minutes=index)) for index in range(2)
    ]
    if cover_previous:
        batches.append(run_rows("oldest", start_utc=now - dt.timedelta(days=15)))
    with write_connection(path) as conn:
        write_runs(conn, batches)
    return path


def test_the_overview_compares_with_the_previous_period(tmp_path, monkeypatch):
    path = _periods_store(tmp_path / "periods.duckdb", cover_previous=True)
    at = _app(path, monkeypatch, window="7d")
    runs = next(m for m in at.metric if m.label == "Runs")
    assert runs.value == "4" and runs.delta == "+100 % vs previous period"  # 4 against 2
    cost = next(m for m in at.metric if m.label == "Cost")
    assert cost.delta == "+100 % vs previous period"  # each run costs the same


def test_a_previous_period_the_data_covers_in_part_shows_no_change(tmp_path, monkeypatch):
    path = _periods_store(tmp_path / "partial.duckdb", cover_previous=False)  # data starts 10 days ago
    at = _app(path, monkeypatch, window="7d")
    tiles = {m.label: m for m in at.metric}
    assert tiles["Runs"].value == "4"
    assert not tiles["Runs"].delta and not tiles["Cost"].delta  # never "+100 %" against 3 of 7 days
    assert "shown only when the data covers all of it" in tiles["Runs"].help
    assert not [m.label for m in at.metric if m.delta and "previous" in m.delta]


def _frame_with(at: AppTest, column: str):
    """The one table of the page that has ``column`` (its displayed values)."""
    frames = [e.value for e in at.dataframe if column in e.value.columns]
    assert len(frames) == 1, [list(e.value.columns) for e in at.dataframe]
    return frames[0]


def test_overview_shows_cache_and_reasoning_shares_of_the_tokens(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch)
    with read_connection(sample_store) as conn:
        expected = analysis.overview(conn, _cli_window(conn))
    assert (
        expected.cache_read_share is not None and expected.reasoning_share is not None
    )  # the sample reports them
    tiles = _metrics(at)
    assert tiles["Input tokens"] == charts.format_tokens(expected.input_tokens)
    assert tiles["Cache reads"] == charts.format_percent(expected.cache_read_share)
    assert tiles["Cache writes"] == charts.format_percent(expected.cache_write_share, none="not reported")
    assert tiles["Reasoning"] == charts.format_percent(expected.reasoning_share)
    shown = _frame_with(at, "cache_read_share").set_index("task_type")["cache_read_share"]
    for task, share in expected.per_task.set_index("task_type")["cache_read_share"].items():
        assert shown[task] == pytest.approx(share * 100)  # 0..100 for the "%.1f %%" column


def test_token_parts_nobody_reports_read_not_reported_never_zero(controlled_store, monkeypatch):
    with read_connection(controlled_store) as conn:
        ov = analysis.overview(conn, _cli_window(conn))
    assert ov.cache_read_tokens is None  # run_rows sends no cache figures
    tiles = _metrics(at := _app(controlled_store, monkeypatch))
    assert tiles["Cache reads"] == "not reported"
    assert not at.exception


def test_baselines_page_shows_p50_p95_of_cache_and_reasoning_tokens(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch, "baselines")
    assert not at.exception
    with read_connection(sample_store) as conn:
        expected = analysis.token_part_baselines(conn, _cli_window(conn)).set_index("task_type")
    shown = _frame_with(at, "p95_cache_read_tokens").set_index("task_type")
    assert sorted(shown.index) == sorted(expected.index)
    for column in ("p50_cache_read_tokens", "p95_cache_read_tokens", "p95_reasoning_tokens"):
        for task, value in expected[column].items():
            assert shown.loc[task, column] == pytest.approx(value, nan_ok=True)


def test_cost_page_shows_latency_per_model(sample_store, monkeypatch):
    at = _app(sample_store, monkeypatch, "cost")
    assert not at.exception
    assert not [e for e in at.dataframe if "p95_duration_s" in e.value.columns]  # on demand only
    at.toggle(key="cost_latency").set_value(True).run()
    assert not at.exception
    with read_connection(sample_store) as conn:
        expected = analysis.model_latency(conn, _cli_window(conn)).set_index("model")
    assert expected["timed_calls"].sum() > 0
    shown = _frame_with(at, "p95_duration_s").set_index("model")
    assert list(shown.index) == list(expected.index)
    for column in ("calls", "p50_duration_s", "p95_duration_s"):
        for model, value in expected[column].items():
            assert shown.loc[model, column] == pytest.approx(value, nan_ok=True)
