"""The analysis commands: ``sample``, ``baselines``, ``presets``, ``runs`` — their outputs, the
same numbers as the analysis layer, and clear errors for a missing or empty store."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import math
import subprocess

import duckdb
import numpy as np
import pytest

from budgetlens import sample
from budgetlens.analysis import views as analysis
from budgetlens.analysis.run_queries import RUN_TABLE_COLUMNS
from budgetlens.cli import main
from budgetlens.guard.preset_file import load_preset
from budgetlens.store import read_connection, write_connection
from budgetlens.store.schema import RUN_COLUMNS

#: Preset key -> (runs column, rounding step) as the issue states them, written out again here;
#: None: USD round up to 2 significant figures.
RULES = {
    "max_total_tokens": ("total_tokens", 1000),
    "max_input_tokens": ("input_tokens", 1000),
    "max_output_tokens": ("output_tokens", 1000),
    "max_turns": ("turns", 1),
    "max_tool_calls": ("tool_calls", 1),
    "max_duration_s": ("duration_s", 5),
    "max_cost_usd": ("cost_usd", None),
}


@pytest.fixture
def store(committed_sample_store):
    """The committed sample, loaded once per session (see conftest); these tests only read it."""
    return committed_sample_store


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.system
def test_presets_json_on_the_sample_is_p95_times_1_5_of_an_independent_quantile(store, python):
    result = subprocess.run(
        [
            python,
            "-m",
            "budgetlens.cli",
            "presets",
            "--db",
            str(store),
            "--format",
            "json",
            "--window-days",
            "0",
            "--method",
            "plain",  # the plain P95 x 1.5 rule (auto uses Kaplan-Meier where censoring is material)
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    presets = json.loads(result.stdout)["presets"]
    # independently: every run (--window-days 0: the committed sample is fixed in time, so a
    # window up to now would keep less of it every day), numpy's linear quantile
    con = duckdb.connect(str(store), read_only=True)
    columns = ", ".join(column for column, _ in RULES.values())
    # cost counts only runs whose cost is fully known: no unpriced call, usage reported
    rows = con.execute(
        f"SELECT task_type, {columns}, unpriced_calls = 0 AND usage_status = 'reported' FROM runs"
    ).fetchall()
    con.close()
    assert set(presets) == {r[0] for r in rows} == set(sample.TASK_TYPES)
    for task_type, preset in presets.items():
        mine = [r[1:] for r in rows if r[0] == task_type]
        assert preset["basis"]["n_runs"] == len(mine)
        known = sum(1 for r in mine if r[-2] is not None and r[-1])
        assert preset["basis"].get("n_cost_runs", len(mine)) == known
        for index, (key, (_, step)) in enumerate(RULES.items()):
            values = np.array(
                [r[index] for r in mine if r[index] is not None and (key != "max_cost_usd" or r[-1])],
                dtype=float,
            )
            p95 = np.percentile(values, 95, method="linear")
            if step is None:  # the unit of the second significant figure
                step = 10.0 ** (math.floor(math.log10(p95 * 1.5)) - 1)
            expected = math.ceil(round(p95 * 1.5 / step, 6)) * step
            assert preset[key] == pytest.approx(expected), (task_type, key)


def test_baselines_json_prints_the_numbers_of_the_analysis_layer(store, capsys):
    code, out, _ = _cli(capsys, "baselines", "--db", str(store), "--format", "json", "--window-days", "0")
    printed = {row["task_type"]: row for row in json.loads(out)}
    with read_connection(store) as conn:
        frame = analysis.baselines(conn, analysis.Filters())
    assert code == 0
    for row in frame.to_dict("records"):
        mine = printed[row["task_type"]]
        assert mine["n"] == row["n"]
        for column in ("p50_total_tokens", "p95_total_tokens", "p95_cost_usd", "max_duration_s"):
            # JSON floats carry 6 significant digits
            assert mine[column] == pytest.approx(row[column], rel=5e-6), column


def test_baselines_table_and_csv_list_every_task_type(store, capsys):
    code, table, _ = _cli(capsys, "baselines", "--db", str(store))
    assert code == 0 and "p95_total_tokens" in table.splitlines()[0]
    assert all(task in table for task in sample.TASK_TYPES)
    code, text, _ = _cli(
        capsys, "baselines", "--db", str(store), "--format", "csv", "--by-model", "--task-type", "research"
    )
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["task_type"] for r in rows} == {"research"}
    assert {r["model"] for r in rows} >= {"gemini-2.5-flash", "claude-sonnet-4-5"}


def test_runs_csv_has_one_line_per_run_with_the_documented_columns(store, capsys):
    code, text, _ = _cli(
        capsys, "runs", "--db", str(store), "--format", "csv", "--limit", "7", "--task-type", "simple_qa"
    )
    rows = list(csv.DictReader(io.StringIO(text)))
    assert code == 0 and len(rows) == 7
    assert set(rows[0]) == set(RUN_COLUMNS) | {
        "trace_url"
    }  # + the trace link (issue 24); every column (limits, duration, cache, reasoning)
    assert list(rows[0])[:16] == list(RUN_TABLE_COLUMNS)
    assert {r["task_type"] for r in rows} == {"simple_qa"}
    starts = [r["start_utc"] for r in rows]
    assert starts == sorted(starts, reverse=True)


def test_runs_json_and_table(store, capsys):
    code, text, _ = _cli(
        capsys, "runs", "--db", str(store), "--format", "json", "--limit", "3", "--search", "budget_tokens"
    )
    runs = json.loads(text)
    assert code == 0 and len(runs) == 3
    assert {r["stop_reason"] for r in runs} == {"budget_tokens"}
    code, table, _ = _cli(capsys, "runs", "--db", str(store), "--limit", "2")
    assert code == 0 and len(table.strip().splitlines()) == 3
    code, text, _ = _cli(
        capsys, "runs", "--db", str(store), "--format", "csv", "--limit", "0", "--window-days", "0"
    )
    with read_connection(store) as conn:
        assert len(text.strip().splitlines()) - 1 == analysis.data_extent(conn)[2]


def test_presets_output_file_loads_into_the_guard(store, capsys, tmp_path):
    target = tmp_path / "presets.toml"
    code, _, err = _cli(
        capsys, "presets", "--db", str(store), "--format", "toml", "--multiplier", "2", "-o", str(target)
    )
    assert code == 0 and "wrote 5 presets" in err
    limits = load_preset("research", target)
    assert limits["max_total_tokens"] % 1000 == 0 and limits["max_total_tokens"] > 0


@pytest.mark.system  # generates two sample stores; test_sample covers the seed
def test_sample_command_generates_a_reproducible_store(tmp_path, capsys):
    db = tmp_path / "gen.duckdb"
    argv = [
        "sample",
        "--db",
        str(db),
        "--days",
        "3",
        "--seed",
        "5",
        "--runs-per-day",
        "20",
        "--end-date",
        "2026-01-10",
    ]
    code, out, _ = _cli(capsys, *argv)
    runs = int(out.split()[1])
    assert code == 0 and "3 days ending 2026-01-10, seed 5" in out
    _cli(capsys, *argv)  # the same seed again adds nothing
    with read_connection(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == runs


def _export_sample(capsys, path, runs_per_day: int):
    """``budgetlens sample --export path``: one day of ``runs_per_day`` runs ending 2026-01-10."""
    return _cli(
        capsys,
        "sample",
        "--export",
        str(path),
        "--days",
        "1",
        "--runs-per-day",
        str(runs_per_day),
        "--end-date",
        "2026-01-10",
    )


@pytest.mark.system  # a sample generated, exported or loaded: seconds
def test_sample_export_and_load_round_trip(tmp_path, capsys):
    path, db = tmp_path / "s.jsonl.gz", tmp_path / "l.duckdb"
    code, out, _ = _export_sample(capsys, path, runs_per_day=15)
    assert code == 0 and path.exists()
    code, out2, _ = _cli(capsys, "sample", "--db", str(db), "--load", str(path))
    assert code == 0 and out2.split()[1] == out.split()[1]
    runs = out.split()[1]
    assert f"loaded {runs} runs ({runs} new)" in out2


@pytest.mark.system  # a sample generated, exported or loaded: seconds
def test_loading_the_same_sample_twice_says_nothing_was_new(tmp_path, capsys):
    path, db = tmp_path / "s.jsonl.gz", tmp_path / "l.duckdb"
    _export_sample(capsys, path, runs_per_day=10)
    first = _cli(capsys, "sample", "--db", str(db), "--load", str(path))[1]
    runs = first.split()[1]
    code, again, _ = _cli(capsys, "sample", "--db", str(db), "--load", str(path))
    assert code == 0
    assert f"loaded {runs} runs (0 new)" in again


@pytest.mark.system
def test_missing_store_is_a_clear_error(tmp_path, python):
    result = subprocess.run(
        [python, "-m", "budgetlens.cli", "baselines", "--db", str(tmp_path / "none.duckdb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "no budgetlens store" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["baselines", "presets", "runs"])
def test_empty_store_is_a_clear_error(tmp_path, capsys, command):
    db = tmp_path / "empty.duckdb"
    with write_connection(db):
        pass
    code, _, err = _cli(capsys, command, "--db", str(db))
    assert code == 1 and "no runs yet" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["presets", "--multiplier", "-1"], "--multiplier: must be a finite number > 0"),
        (["presets", "--multiplier", "0"], "--multiplier: must be a finite number > 0"),
        (["presets", "--multiplier", "inf"], "--multiplier: must be a finite number > 0"),
        (["presets", "--multiplier", "nan"], "--multiplier: must be a finite number > 0"),
        (["baselines", "--window-days", "-3"], "--window-days: must be a finite number >= 0"),
        (["baselines", "--window-days", "inf"], "--window-days: must be a finite number >= 0"),
        (["baselines", "--window-days", "nan"], "--window-days: must be a finite number >= 0"),
        (["runs", "--limit", "-1"], "--limit: must be an integer >= 0"),
        (["runs", "--offset", "1.5"], "--offset: must be an integer >= 0"),
        (["sample", "--days", "0"], "--days: must be an integer >= 1"),
        (["sample", "--runs-per-day", "-2"], "--runs-per-day: must be an integer >= 1"),
        (["sample", "--end-date", "28.11.2026"], "--end-date: must be a date YYYY-MM-DD"),
    ],
)
def test_bad_arguments_are_usage_errors_naming_the_option_and_rule(store, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--db", str(store)])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_multiplier_whose_preset_overflows_is_a_clear_error(store, capsys):
    code, out, err = _cli(capsys, "presets", "--multiplier", "1e308", "--db", str(store))
    assert code == 1 and out == ""
    assert "max_total_tokens" in err and "use a smaller multiplier" in err


def test_a_window_longer_than_the_calendar_takes_every_run(store, capsys):
    _, every, _ = _cli(
        capsys, "runs", "--window-days", "0", "--limit", "0", "--format", "csv", "--db", str(store)
    )
    code, longest, err = _cli(
        capsys, "runs", "--window-days", "1e300", "--limit", "0", "--format", "csv", "--db", str(store)
    )
    assert code == 0 and err == "" and longest == every


def _not_a_store(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    return {"a directory": (tmp_path, "not a directory"), "a text file": (text, "a DuckDB database file")}


@pytest.mark.parametrize("what", ["a directory", "a text file"])
@pytest.mark.parametrize("command", ["baselines", "runs", "presets"])
def test_a_db_that_is_not_a_duckdb_file_is_a_clear_error(tmp_path, capsys, what, command):
    path, expected = _not_a_store(tmp_path)[what]
    code, _, err = _cli(capsys, command, "--db", str(path))
    assert code == 1
    assert f"budgetlens {command}: error: {path}: cannot open the store" in err
    assert expected in err and "Traceback" not in err


def test_writing_to_a_db_that_is_not_a_duckdb_file_is_a_clear_error(tmp_path, capsys):
    path, _ = _not_a_store(tmp_path)["a text file"]
    code, _, err = _cli(capsys, "sample", "--days", "1", "--runs-per-day", "1", "--db", str(path))
    assert code == 1 and f"{path}: cannot open the store" in err
    assert path.read_text() == "not a database\n"  # left untouched


def test_a_db_under_a_regular_file_is_a_clear_error(tmp_path, capsys):
    path, _ = _not_a_store(tmp_path)["a text file"]
    code, _, err = _cli(capsys, "sample", "--days", "1", "--db", str(path / "x.duckdb"))
    assert code == 1 and str(path) in err and "Traceback" not in err


def test_verbose_keeps_the_traceback_of_a_user_error(tmp_path):
    from budgetlens.store import StoreError

    with pytest.raises(StoreError, match="cannot open the store"):
        main(["-v", "baselines", "--db", str(tmp_path)])


def test_presets_output_to_a_directory_is_a_clear_error(store, capsys, tmp_path):
    code, out, err = _cli(capsys, "presets", "--db", str(store), "-o", str(tmp_path))
    assert code == 1 and out == ""
    assert f"budgetlens presets: error: {tmp_path}: Is a directory" in err


def test_cheap_cost_presets_stay_near_p95_times_multiplier(store, capsys):
    # the cent rule made simple_qa's $0.0091 P95 a $0.02 limit (2.2x instead of 1.5x); the plain
    # P95 (basis.p95_cost_usd) is the one the preset rests on with --method plain
    code, out, _ = _cli(capsys, "presets", "--db", str(store), "--format", "json", "--method", "plain")
    presets = json.loads(out)["presets"]
    assert code == 0
    for task_type, preset in presets.items():
        p95 = preset["basis"]["p95_cost_usd"]
        assert 1.5 <= preset["max_cost_usd"] / p95 <= 1.5 * 1.1, task_type
        assert len(f"{preset['max_cost_usd']:.10g}".strip("0.").replace(".", "")) <= 2


def test_baselines_table_shows_small_costs_and_token_thousands(store, capsys):
    code, table, _ = _cli(capsys, "baselines", "--db", str(store), "--window-days", "0")
    header, *lines = table.splitlines()
    columns = header.split()
    rows = {line.split()[0]: dict(zip(columns, line.split())) for line in lines}
    with read_connection(store) as conn:
        frame = analysis.baselines(conn, analysis.Filters())
    assert code == 0
    for row in frame.to_dict("records"):
        shown = rows[row["task_type"]]
        cost = float(shown["p95_cost_usd"])
        assert cost > 0 and cost == pytest.approx(row["p95_cost_usd"], rel=1e-3)  # 4 figures
        assert shown["max_total_tokens"] == f"{row['max_total_tokens']:,}"
        assert float(shown["p95_total_tokens"].replace(",", "")) == pytest.approx(
            row["p95_total_tokens"], abs=0.05
        )


@pytest.mark.parametrize("command", ["baselines", "runs"])
def test_csv_and_json_floats_carry_no_float_noise(store, capsys, command):
    # 35.84999999999999 is noise: floats carry 6 significant digits, token percentiles 1 decimal
    extra = ["--limit", "0"] if command == "runs" else []
    for fmt in ("csv", "json"):
        code, text, _ = _cli(capsys, command, "--db", str(store), "--format", fmt, *extra)
        rows = list(csv.DictReader(io.StringIO(text))) if fmt == "csv" else json.loads(text)
        assert code == 0 and rows
        checked = 0
        for row in rows:
            for key, value in row.items():
                if fmt == "csv" and (
                    not value or "." not in value or not value.replace(".", "", 1).isdigit()
                ):
                    continue
                if fmt == "json" and not isinstance(value, float):
                    continue
                number = float(value)
                if key.endswith("_tokens"):
                    assert number == round(number, 1), (key, value)
                else:
                    assert number == float(f"{number:.6g}"), (key, value)
                checked += 1
        assert checked >= len(rows) // 2, fmt


def test_runs_json_times_are_full_iso_8601_utc_with_z(store, capsys):
    code, text, _ = _cli(capsys, "runs", "--db", str(store), "--format", "json", "--limit", "5")
    runs = json.loads(text)
    with read_connection(store) as conn:
        stored = dict(
            conn.execute(
                "SELECT run_id, start_utc FROM runs WHERE run_id IN (SELECT unnest($ids))",
                {"ids": [r["run_id"] for r in runs]},
            ).fetchall()
        )
    assert code == 0 and len(runs) == 5
    for run in runs:
        assert run["start_utc"].endswith("Z")
        parsed = dt.datetime.fromisoformat(run["start_utc"])
        assert parsed == stored[run["run_id"]].replace(tzinfo=dt.UTC)  # to the µs
    _, text, _ = _cli(capsys, "runs", "--db", str(store), "--format", "csv", "--limit", "5")
    assert [r["start_utc"] for r in csv.DictReader(io.StringIO(text))] == [r["start_utc"] for r in runs]


@pytest.mark.parametrize("command", ["baselines", "presets", "runs"])
def test_format_option_has_help_on_every_analysis_command(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--format" in out and "output format (default:" in out


@pytest.mark.parametrize("command", ["presets", "baselines", "runs"])
def test_an_unknown_task_type_is_named_with_the_task_types_that_exist(store, capsys, command):
    code, out, err = _cli(capsys, command, "--db", str(store), "--task-type", "nosuch")
    assert "note: no runs of task type nosuch" in err
    assert all(task in err for task in sample.TASK_TYPES)
    if command == "presets":
        assert code == 1 and out == "" and "nothing written" in err
    else:
        assert code == 0


def test_presets_with_one_known_task_type_among_unknown_ones_write_it(store, capsys):
    code, out, err = _cli(
        capsys,
        "presets",
        "--db",
        str(store),
        "--format",
        "json",
        "--task-type",
        "nosuch",
        "--task-type",
        "research",
    )
    assert code == 0 and list(json.loads(out)["presets"]) == ["research"]
    assert "no runs of task type nosuch" in err


def test_runs_search_matches_the_usage_status(store, capsys):
    code, text, _ = _cli(
        capsys,
        "runs",
        "--db",
        str(store),
        "--format",
        "csv",
        "--limit",
        "0",
        "--search",
        "UNKNOWN",
        "--window-days",
        "0",
    )
    rows = list(csv.DictReader(io.StringIO(text)))
    with read_connection(store) as conn:
        unknown = conn.execute("SELECT count(*) FROM runs WHERE usage_status = 'unknown'").fetchone()[0]
    assert code == 0 and len(rows) == unknown > 0
    assert {r["usage_status"] for r in rows} == {"unknown"}


@pytest.mark.parametrize("command", ["baselines", "presets", "runs"])
@pytest.mark.system  # a sample generated, exported or loaded: seconds
def test_a_window_that_leaves_runs_out_says_so_on_stderr(tmp_path, capsys, command):
    # imported history: a few runs spread over months up to 3 days ago; the default window (the
    # last 14 days up to now, not up to the newest run) keeps the newest two
    db = tmp_path / "spread.duckdb"
    newest = analysis.utc_now().replace(microsecond=0) - dt.timedelta(days=3)
    starts = [newest - dt.timedelta(days=9 * i) for i in reversed(range(12))]
    records = [
        dict(
            run_id=f"old-{i}",
            source="test",
            task_type="qa",
            start_utc=start,
            end_utc=start + dt.timedelta(seconds=5),
            turns=1,
            total_tokens=1000 + i,
            stop_reason="completed",
            usage_status="reported",
        )
        for i, start in enumerate(starts)
    ]
    from budgetlens.store import write_batch

    with write_connection(db) as conn:
        write_batch(conn, [], records, [])
    code, _, err = _cli(capsys, command, "--db", str(db))
    assert code == 0
    assert (
        f"note: window: last 14 days up to now keeps 2 of 12 runs (newest run {newest:%Y-%m-%d %H:%M} "
        "UTC); use --window-days 0 for all"
    ) in err
    _, _, err = _cli(capsys, command, "--db", str(db), "--window-days", "0")
    assert "window:" not in err


@pytest.mark.parametrize(
    "content, message",
    [
        (b"plain text, not gzip\n", "not a gzip-compressed budgetlens sample file"),
        (
            gzip.compress(b'{"budgetlens_sample": 1}\n{"record": {"run_id": "x"')[:-12],
            "not a gzip-compressed budgetlens sample file",
        ),  # truncated
        (gzip.compress(b"\xff\xfe not utf-8\n"), "line 1 is not a budgetlens sample header"),
        (gzip.compress(b'["a list"]\n'), "line 1 is not a budgetlens sample header"),
        (gzip.compress(b'{"budgetlens_sample": 1}\n{"record": ["x"]}\n'), "line 2: not a sample run"),
    ],
)
def test_sample_load_of_a_file_that_is_not_a_sample_names_the_file(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(content)
    code, _, err = _cli(capsys, "sample", "--load", str(bad), "--db", str(tmp_path / "s.duckdb"))
    assert code == 1 and "Traceback" not in err
    assert f"budgetlens sample: error: {bad}: " in err and message in err


def test_sample_load_of_a_directory_is_a_clear_error(tmp_path, capsys):
    code, _, err = _cli(capsys, "sample", "--load", str(tmp_path), "--db", str(tmp_path / "s.duckdb"))
    assert code == 1 and f"{tmp_path}: Is a directory" in err


@pytest.mark.parametrize("command", ["sample", "baselines", "presets", "runs"])
def test_every_analysis_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--db" in out
    if command != "sample":
        assert "newest run" in out


def test_presets_help_describes_the_preset_document_not_records(capsys):
    with pytest.raises(SystemExit):
        main(["presets", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "every column" not in out and "JSON records" not in out
    assert "preset document" in out and "max_* limits" in out


@pytest.mark.parametrize("flag", ["--limit", "--offset"])
def test_a_row_count_beyond_what_sql_takes_is_a_clear_error(store, capsys, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "--db", str(store), flag, "99999999999999999999"])
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err
