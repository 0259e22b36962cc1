"""The analysis commands: ``sample``, ``baselines``, ``presets``, ``runs`` — their outputs, the
same numbers as the analysis layer, and clear errors for a missing or empty store."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import subprocess

import duckdb
import numpy as np
import pytest

from collector import sample
from collector.cli import main
from collector.presets_loader import load_preset
from collector.store import read_connection, write_connection
from dashboard import analysis

#: Preset key -> (runs column, rounding step) as the issue states them, written out again here.
RULES = {
    "max_total_tokens": ("total_tokens", 1000), "max_input_tokens": ("input_tokens", 1000),
    "max_output_tokens": ("output_tokens", 1000), "max_turns": ("turns", 1),
    "max_tool_calls": ("tool_calls", 1), "max_duration_s": ("duration_s", 5),
    "max_cost_usd": ("cost_usd", 0.01),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "sample.duckdb"
    sample.load_sample_file(sample.SAMPLE_FILE, path)
    return path


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_presets_json_on_the_sample_is_p95_times_1_5_of_an_independent_quantile(store, python):
    result = subprocess.run(
        [python, "-m", "collector.cli", "presets", "--db", str(store), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=True)
    presets = json.loads(result.stdout)["presets"]
    # independently: the runs of the 14 days ending at the newest run, numpy's linear quantile
    con = duckdb.connect(str(store), read_only=True)
    newest = con.execute("SELECT max(start_utc) FROM runs").fetchone()[0]
    start = newest - dt.timedelta(days=14)
    columns = ", ".join(column for column, _ in RULES.values())
    rows = con.execute(f"SELECT task_type, {columns} FROM runs WHERE start_utc >= ?",
                       [start]).fetchall()
    con.close()
    assert set(presets) == {r[0] for r in rows} == set(sample.TASK_TYPES)
    for task_type, preset in presets.items():
        mine = [r[1:] for r in rows if r[0] == task_type]
        assert preset["basis"]["n_runs"] == len(mine)
        for index, (key, (_, step)) in enumerate(RULES.items()):
            values = np.array([r[index] for r in mine if r[index] is not None], dtype=float)
            p95 = np.percentile(values, 95, method="linear")
            expected = math.ceil(round(p95 * 1.5 / step, 6)) * step
            assert preset[key] == pytest.approx(expected), (task_type, key)


def test_baselines_json_prints_the_numbers_of_the_analysis_layer(store, capsys):
    code, out, _ = _cli(capsys, "baselines", "--db", str(store), "--format", "json")
    printed = {row["task_type"]: row for row in json.loads(out)}
    with read_connection(store) as conn:
        _, newest, _ = analysis.data_extent(conn)
        frame = analysis.baselines(conn, analysis.window_filters(14, now_utc=newest))
    assert code == 0
    for row in frame.to_dict("records"):
        mine = printed[row["task_type"]]
        assert mine["n"] == row["n"]
        for column in ("p50_total_tokens", "p95_total_tokens", "p95_cost_usd", "max_duration_s"):
            assert mine[column] == pytest.approx(row[column]), column


def test_baselines_table_and_csv_list_every_task_type(store, capsys):
    code, table, _ = _cli(capsys, "baselines", "--db", str(store))
    assert code == 0 and "p95_total_tokens" in table.splitlines()[0]
    assert all(task in table for task in sample.TASK_TYPES)
    code, text, _ = _cli(capsys, "baselines", "--db", str(store), "--format", "csv", "--by-model",
                         "--task-type", "research")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["task_type"] for r in rows} == {"research"}
    assert {r["model"] for r in rows} >= {"gemini-2.5-flash", "claude-sonnet-4-5"}


def test_runs_csv_has_one_line_per_run_with_the_documented_columns(store, capsys):
    code, text, _ = _cli(capsys, "runs", "--db", str(store), "--format", "csv", "--limit", "7",
                         "--task-type", "simple_qa")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert code == 0 and len(rows) == 7
    assert list(rows[0]) == ([
        "run_id", "task_type", "service_name", "models", "start_utc", "turns", "tool_calls",
        "input_tokens", "output_tokens", "total_tokens", "cost_usd", "stop_reason",
        "usage_status"])
    assert {r["task_type"] for r in rows} == {"simple_qa"}
    starts = [r["start_utc"] for r in rows]
    assert starts == sorted(starts, reverse=True)


def test_runs_json_and_table(store, capsys):
    code, text, _ = _cli(capsys, "runs", "--db", str(store), "--format", "json", "--limit", "3",
                         "--search", "budget_tokens")
    runs = json.loads(text)
    assert code == 0 and len(runs) == 3
    assert {r["stop_reason"] for r in runs} == {"budget_tokens"}
    code, table, _ = _cli(capsys, "runs", "--db", str(store), "--limit", "2")
    assert code == 0 and len(table.strip().splitlines()) == 3
    code, text, _ = _cli(capsys, "runs", "--db", str(store), "--format", "csv", "--limit", "0",
                         "--window-days", "0")
    with read_connection(store) as conn:
        assert len(text.strip().splitlines()) - 1 == analysis.data_extent(conn)[2]


def test_presets_output_file_loads_into_the_guard(store, capsys, tmp_path):
    target = tmp_path / "presets.toml"
    code, _, err = _cli(capsys, "presets", "--db", str(store), "--format", "toml",
                        "--multiplier", "2", "-o", str(target))
    assert code == 0 and "wrote 5 presets" in err
    limits = load_preset("research", target)
    assert limits["max_total_tokens"] % 1000 == 0 and limits["max_total_tokens"] > 0


def test_sample_command_generates_a_reproducible_store(tmp_path, capsys):
    db = tmp_path / "gen.duckdb"
    argv = ["sample", "--db", str(db), "--days", "3", "--seed", "5", "--runs-per-day", "20",
            "--end-date", "2026-01-10"]
    code, out, _ = _cli(capsys, *argv)
    runs = int(out.split()[1])
    assert code == 0 and "3 days ending 2026-01-10, seed 5" in out
    _cli(capsys, *argv)                      # the same seed again adds nothing
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == runs


def test_sample_export_and_load_round_trip(tmp_path, capsys):
    path, db = tmp_path / "s.jsonl.gz", tmp_path / "l.duckdb"
    code, out, _ = _cli(capsys, "sample", "--export", str(path), "--days", "1",
                        "--runs-per-day", "15", "--end-date", "2026-01-10")
    assert code == 0 and path.exists()
    code, out2, _ = _cli(capsys, "sample", "--db", str(db), "--load", str(path))
    assert code == 0 and out2.split()[1] == out.split()[1]


def test_missing_store_is_a_clear_error(tmp_path, python):
    result = subprocess.run([python, "-m", "collector.cli", "baselines", "--db",
                             str(tmp_path / "none.duckdb")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert "no budgetlens store" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["baselines", "presets", "runs"])
def test_empty_store_is_a_clear_error(tmp_path, capsys, command):
    db = tmp_path / "empty.duckdb"
    with write_connection(db):
        pass
    code, _, err = _cli(capsys, command, "--db", str(db))
    assert code == 1 and "no runs yet" in err


@pytest.mark.parametrize("argv, message", [
    (["presets", "--multiplier", "-1"], "--multiplier"),
    (["baselines", "--window-days", "-3"], "--window-days"),
    (["runs", "--limit", "-1"], "--limit"),
])
def test_bad_arguments_name_the_option(store, capsys, argv, message):
    code, _, err = _cli(capsys, *argv, "--db", str(store))
    assert code == 1 and message in err


@pytest.mark.parametrize("command", ["sample", "baselines", "presets", "runs"])
def test_every_analysis_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--db" in out
    if command != "sample":
        assert "newest run" in out
