"""``budgetlens import``: help lists the formats, counts are printed, bad lines go to stderr,
progress and streaming behave, and imported history shows up in ``budgetlens baselines``."""

from __future__ import annotations

import json
import re
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from budgetlens.cli import main
from budgetlens.cli.import_cmd import FORMAT_HELP
from budgetlens.importers import FORMATS, ImportReport, get_format, import_paths, read_rows
from budgetlens.importers.base import expand_paths, iter_json_lines


def test_help_lists_every_format(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["import", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in FORMATS:
        assert name in out
    assert [name for name, _ in FORMAT_HELP] == list(FORMATS)


def test_unknown_format_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit):
        main(["import", "aider", "x.jsonl"])
    assert "claude-code" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown import format 'aider'"):
        get_format("aider")


def test_import_prints_counts_and_a_second_import_adds_nothing(realdata, db_path, capsys):
    folder = realdata / "codex-cli-rollouts"
    assert main(["import", "codex", str(folder), "--db", str(db_path), "--no-progress"]) == 0
    first = capsys.readouterr().out
    assert "8 runs (8 new)" in first
    assert "token_count repeating the previous cumulative total" in first
    assert main(["import", "codex", str(folder), "--db", str(db_path), "--no-progress"]) == 0
    second = capsys.readouterr().out
    assert "8 runs (0 new)" in second and "(0 new), 0 events" in second


def test_bad_lines_are_printed_to_stderr_as_file_and_line(realdata, db_path, tmp_path, capsys):
    path = tmp_path / "proj" / "s.jsonl"
    path.parent.mkdir()
    good = (realdata / "claude-code-jsonl" / "spotter" / "short.jsonl").read_text()
    path.write_text("not json\n" + good)
    assert main(["import", "claude-code", str(path), "--db", str(db_path), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"{path}:1: invalid JSON" in captured.err
    assert "1 runs (1 new)" in captured.out


def test_a_missing_path_fails_naming_it(db_path, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["import", "codex", str(missing), "--db", str(db_path)]) == 1
    assert f"{missing}: no such file or directory" in capsys.readouterr().err


def test_progress_receives_every_byte_read(realdata, db_path):
    folder = realdata / "claude-code-jsonl"
    files = expand_paths([folder], FORMATS["claude-code"].patterns)
    fed: list[int] = []
    announced: list[tuple[int, int]] = []

    def progress(total, n_files):
        announced.append((total, n_files))
        return fed.append

    report = import_paths("claude-code", [folder], db_path, progress=progress)
    total = sum(p.stat().st_size for p in files)
    assert announced == [(total, len(files))]
    assert sum(fed) == total == report.bytes_read


def _peaks(path: Path) -> tuple[int, int, int, int]:
    """(lines, calls, peak bytes reading the lines, peak bytes importing) of one file, traced."""
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_json_lines(path, ImportReport()))
        lines_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        calls = sum(1 for kind, _ in read_rows("claude-code", [path]) if kind == "call")
        import_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return count, calls, lines_peak, import_peak


def _peaks_of_files(small: str, big: str) -> str:
    """JSON ``[peaks of small, peaks of big]`` (see ``_peaks``), after a warm-up pass on
    ``small``: run in a fresh interpreter by the test below."""
    _peaks(Path(small))  # price tables, interned strings, allocator free lists: paid once
    return json.dumps([_peaks(Path(small)), _peaks(Path(big))])


@pytest.mark.system  # 4 MB and 16 MB streams under tracemalloc, in a subprocess
def test_jsonl_is_streamed_in_constant_memory(tmp_path, python):
    from benchmarks.import_throughput import generate

    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    generate(small, size_mb=4)
    generate(big, size_mb=16)
    # Measured in a fresh interpreter: in a long-lived (xdist) test process other threads and
    # caches left by earlier tests allocate under the same tracemalloc and blur a 240 kB bound.
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from test_import_cli import _peaks_of_files; "
        "print(_peaks_of_files(sys.argv[2], sys.argv[3]))"
    )
    tests_dir = str(Path(__file__).parent)
    done = subprocess.run(
        [python, "-c", script, tests_dir, str(small), str(big)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    (n_lines, n_calls, n_lines_peak, n_import_peak), (lines_4n, calls_4n, lines_peak_4n, import_peak_4n) = (
        json.loads(done.stdout.splitlines()[-1])
    )
    growth = big.stat().st_size - small.stat().st_size
    assert n_lines > 2_000 and lines_4n > 3 * n_lines and calls_4n > 3 * n_calls > 600
    # Four times the lines, (almost) the same peak: memory does not follow the file's size.
    assert lines_peak_4n - n_lines_peak < growth / 50
    # The import keeps small state per response (a 64-bit hash to tell a copied response in a
    # later session, genai-prices' cache, counters: ~180 B measured, dict tables grow in steps)
    # but never a line (~7.8 kB of them per response here).
    per_call = (import_peak_4n - n_import_peak) / (calls_4n - n_calls)
    assert per_call < 320 and per_call < growth / (calls_4n - n_calls) / 20
    assert import_peak_4n < big.stat().st_size / 20


def test_all_real_logs_import_and_show_in_baselines(realdata, db_path, capsys):
    imports = [
        ("claude-code", [realdata / "claude-code-jsonl"]),
        ("codex", [realdata / "codex-cli-rollouts"]),
        ("swe-agent", [realdata / "swe-agent-traj", realdata / "mini-swe-agent-deepseek" / "trajectories"]),
        ("openhands", [realdata / "openhands"]),
    ]
    task_types = set()
    for name, paths in imports:
        report = import_paths(name, paths, db_path)
        assert report.bad_line_count == 0, report.bad_lines
        task_types |= {row["task_type"] for kind, row in read_rows(name, paths) if kind == "record"}
    capsys.readouterr()
    assert main(["baselines", "--db", str(db_path), "--window-days", "0", "--format", "json"]) == 0
    baselines = json.loads(capsys.readouterr().out)
    assert {row["task_type"] for row in baselines} == task_types
    assert sum(row["n"] for row in baselines) == 10 + 8 + 14 + 9


def _claude_line(message_id: str, pad: str = "") -> str:
    return json.dumps(
        {
            "type": "assistant",
            "sessionId": "s1",
            "timestamp": "2026-03-01T10:00:00Z",
            "requestId": "r" + message_id,
            "pad": pad,
            "message": {
                "id": message_id,
                "role": "assistant",
                "model": "gpt-4o",
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        }
    )


def test_a_bad_price_file_fails_the_import_before_it_starts(tmp_path, db_path, monkeypatch, capsys):
    from budgetlens.pricing import clear_price_cache

    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  my-model:\n    input_eur_per_mtok: 1.0\n    output_usd_per_mtok: 2.0\n")
    monkeypatch.setenv("BUDGETLENS_PRICES_FILE", str(prices))
    clear_price_cache()
    path = tmp_path / "proj" / "s1.jsonl"
    path.parent.mkdir()
    path.write_text(_claude_line("m1") + "\n")
    try:
        assert main(["import", "claude-code", str(path), "--db", str(db_path), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert str(prices) in err and "input_eur_per_mtok" in err
        assert not Path(db_path).exists()  # nothing imported unpriced
        with pytest.raises(ValueError, match="input_eur_per_mtok"):
            import_paths("claude-code", [path], db_path)
        prices.write_text(
            "models:\n  my-model:\n    input_usd_per_mtok: .nan\n    output_usd_per_mtok: 2.0\n"
        )
        clear_price_cache()
        with pytest.raises(ValueError, match=str(prices)):
            import_paths("claude-code", [path], db_path)
    finally:
        clear_price_cache()


@pytest.mark.system  # writes and imports large files: seconds
def test_a_line_over_the_cap_is_reported_and_skipped_without_being_held(tmp_path, db_path):
    path = tmp_path / "proj" / "s1.jsonl"
    path.parent.mkdir()
    path.write_text(
        "\n".join([_claude_line("m1"), _claude_line("m2", pad="x" * 8_000_000), _claude_line("m3")]) + "\n"
    )
    # A warm-up import first: the modules it imports on first use (pyarrow, pandas: ~30 MB
    # under tracemalloc) and price tables are the process's, not this file's.
    warm = tmp_path / "warm" / "s0.jsonl"
    warm.parent.mkdir()
    warm.write_text(_claude_line("w1") + "\n")
    import_paths("claude-code", [warm], tmp_path / "warm.duckdb", max_line_bytes=100_000)
    tracemalloc.start()
    try:
        report = import_paths("claude-code", [path], db_path, max_line_bytes=100_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.bad_lines == [f"{path}:2: line too long (more than 100000 bytes); skipped"]
    assert (report.calls, report.bytes_read) == (2, path.stat().st_size)
    # the 8 MB line is skipped in 1 MiB pieces (a few of them alive at once), never held whole
    assert peak < 4_000_000


@pytest.mark.system  # imports a large file: seconds
def test_the_line_cap_is_a_cli_option(tmp_path, db_path, capsys):
    path = tmp_path / "proj" / "s1.jsonl"
    path.parent.mkdir()
    path.write_text(_claude_line("m1", pad="x" * 2_000_000) + "\n" + _claude_line("m2") + "\n")
    assert (
        main(
            ["import", "claude-code", str(path), "--db", str(db_path), "--no-progress", "--max-line-mb", "1"]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert f"{path}:1: line too long (more than 1048576 bytes)" in captured.err
    assert "1 calls (1 new)" in captured.out


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "2000000", "lots"])
def test_a_line_cap_that_is_not_a_positive_size_is_a_usage_error(tmp_path, db_path, capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        main(["import", "claude-code", str(tmp_path), "--db", str(db_path), "--max-line-mb", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --max-line-mb: must be a finite number > 0 and <= 1048576, got {value!r}" in err
    assert not db_path.exists()


def test_import_help_lines_fit_a_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps option help to the terminal width
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 80


def test_a_document_over_the_cap_is_reported_and_skipped(tmp_path):
    path = tmp_path / "big.traj.json"
    path.write_text(json.dumps({"messages": [], "pad": "x" * 5000}))
    report = ImportReport()
    assert list(read_rows("swe-agent", [path], report=report, max_line_bytes=1000)) == []
    assert report.bad_lines == [f"{path}: document too long (more than 1000 bytes); skipped"]


def test_a_foreign_jsonl_file_is_not_otlp_and_not_a_bad_line(tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text(_claude_line("m1") + "\n" + _claude_line("m2") + "\n")
    report = ImportReport()
    assert list(read_rows("otlp-json", [path], report=report)) == []
    assert report.files_without_runs == [str(path)] and report.bad_line_count == 0


def test_a_corrupt_gzip_is_reported_not_raised(tmp_path):
    import gzip

    path = tmp_path / "s1.jsonl.gz"
    data = gzip.compress(((_claude_line("m1") + "\n") * 2000).encode())
    path.write_bytes(data[: len(data) // 2])  # truncated
    report = ImportReport()
    list(iter_json_lines(path, report))
    assert report.bad_line_count == 1 and "cannot read further" in report.bad_lines[0]


@pytest.mark.parametrize(
    ("kind", "row", "reason"),
    [
        ("call", {"request_model": {"a": 1}}, "request_model must be a string"),
        ("call", {"request_model": "\ud800"}, "request_model must be a string (valid UTF-8)"),
        ("call", {"input_tokens": -1}, "input_tokens must be a whole number >= 0"),
        ("call", {"input_tokens": 2**63}, "input_tokens must be a whole number >= 0"),
        ("call", {"turn": 2**31}, "turn must be a whole number >= 0"),
        ("call", {"cost_usd": float("nan")}, "cost_usd must be a finite number >= 0"),
        ("record", {"cost_usd": float("inf")}, "cost_usd must be a finite number >= 0"),
        ("record", {"duration_s": -1.0}, "duration_s must be a finite number >= 0"),
        ("record", {"start_utc": "2026-01-01"}, "start_utc must be a timestamp"),
        ("record", {"retryable": "yes"}, "retryable must be true or false"),
        ("record", {"colour": "red"}, "'colour' is not a column"),
    ],
)
def test_rows_are_checked_against_the_store_types_before_they_are_queued(kind, row, reason):
    from budgetlens.importers.base import check_row

    with pytest.raises(ValueError, match=re.escape(reason)):
        check_row(kind, {"run_id": "r", "source": "import:x", **row})


def test_a_file_with_no_run_of_the_format_is_not_reported_as_imported(realdata, db_path, capsys):
    trace = realdata / "otlp-proto-examples" / "trace.json"
    assert main(["import", "otlp-json", str(trace), "--db", str(db_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "imported" not in captured.out
    assert "found no otlp-json run in 1 file(s)" in captured.err
    assert "gen_ai.usage" in captured.err


def test_a_document_over_the_line_limit_says_why_nothing_was_imported(tmp_path, db_path, capsys):
    # one OTLP/JSON document a little over --max-line-mb 1: the only file, so no run is read;
    # the message must name the skipped document, not only "found no run"
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"resourceSpans": []}) + " " * (2 * 1024 * 1024), encoding="utf-8")
    argv = ["import", "otlp-json", str(path), "--db", str(db_path), "--no-progress", "--max-line-mb", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "found no otlp-json run in 1 file(s)" in err
    assert "export.json:1: line too long (more than 1048576 bytes); skipped" in err


def test_a_directory_with_no_file_of_the_format_is_an_error_naming_the_patterns(tmp_path, capsys):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a session\n")
    db_path = tmp_path / "store.duckdb"
    assert main(["import", "claude-code", str(folder), "--db", str(db_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"found no claude-code file under {folder}" in err
    assert ", ".join(get_format("claude-code").patterns) in err
    assert not db_path.exists()
