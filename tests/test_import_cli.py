"""``budgetlens import``: help lists the formats, counts are printed, bad lines go to stderr,
progress and streaming behave, and imported history shows up in ``budgetlens baselines``."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from collector.cli import main
from collector.cli.import_cmd import FORMAT_HELP
from collector.importers import FORMATS, ImportReport, get_format, import_paths, read_rows
from collector.importers.base import expand_paths, iter_json_lines


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


def test_jsonl_is_streamed_in_constant_memory(tmp_path):
    from benchmarks.import_throughput import generate

    path = tmp_path / "bench" / "big.jsonl"
    path.parent.mkdir()
    generate(path, size_mb=15)
    warm_up = tmp_path / "bench" / "small.jsonl"
    generate(warm_up, size_mb=0.5)
    sum(1 for _ in read_rows("claude-code", [warm_up]))  # loads the price tables once
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_json_lines(path, ImportReport()))
        lines_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        calls = sum(1 for kind, _ in read_rows("claude-code", [path]) if kind == "call")
        import_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert count > 10_000 and calls > 1_000
    assert lines_peak < size / 20
    assert import_peak < size / 20  # per-session state only, never the file


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
