"""Stored strings reach the terminal escaped (new-user finding 10): a run id, task type or team
holding ESC, NUL, BEL or U+202E prints as ``\\x1b``, ``\\x00``, ``\\x07``, ``\\u202e`` in every CLI
table, CSV and note; JSON keeps the value (its encoder escapes it)."""

from __future__ import annotations

import io
import json

import duckdb
import pandas as pd
import pytest

from budgetlens.cli import main
from budgetlens.cli._analysis import write_frame
from budgetlens.cli._terminal import terminal_safe

pytestmark = pytest.mark.system  # every CLI command on a generated sample store: seconds

EVIL_RUN = "run\x1b[2J\x00"
EVIL_TASK = "task\x07\u202egpj.exe"
EVIL_TEAM = "team\x1b]0;pwned\x07\u2066"
RAW = ("\x1b", "\x00", "\x07", "\u202e", "\u2066")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("nul\x00", "nul\\x00"),
        ("bell\x07", "bell\\x07"),
        ("\u202eabc", "\\u202eabc"),
        ("line\nbreak\ttab\r", "line\\x0abreak\\x09tab\\x0d"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        ("iso\u2066x\u2069 ltr\u200e sep\u2028", "iso\\u2066x\\u2069 ltr\\u200e sep\\u2028"),
        ("plain-ascii run_42", "plain-ascii run_42"),
        ("Zürich 東京 emoji 🙂", "Zürich 東京 emoji 🙂"),
    ],
)
def test_terminal_safe_escapes_control_and_bidi_characters_only(text, shown):
    assert terminal_safe(text) == shown


def test_write_frame_escapes_text_cells_in_table_and_csv_but_json_keeps_the_value():
    frame = pd.DataFrame({"run_id": [EVIL_RUN, None], "total_tokens": [10, 20]})
    for fmt in ("table", "csv"):
        out = io.StringIO()
        write_frame(frame, fmt, out=out)
        assert not any(ch in out.getvalue() for ch in RAW), fmt
        assert "run\\x1b[2J\\x00" in out.getvalue(), fmt
    out = io.StringIO()
    write_frame(frame, "json", out=out)
    assert "\x1b" not in out.getvalue()  # the JSON encoder escapes it as \u001b
    assert json.loads(out.getvalue())[0]["run_id"] == EVIL_RUN


@pytest.fixture(scope="module")
def evil_store(tmp_path_factory):
    """A sample store in which one run's id, task type and team hold control characters and bidi
    overrides, in every table that stores them."""
    from budgetlens.sample import write_sample

    path = tmp_path_factory.mktemp("evil") / "evil.duckdb"
    write_sample(path, days=2, seed=7, runs_per_day=4)
    with duckdb.connect(str(path)) as conn:
        row = conn.execute("SELECT run_id FROM runs ORDER BY start_utc DESC LIMIT 1").fetchone()
        assert row is not None
        victim = row[0]
        tables = conn.execute(
            "SELECT table_name, list(column_name) FROM information_schema.columns "
            "WHERE column_name IN ('run_id', 'task_type', 'team') GROUP BY table_name"
        ).fetchall()
        for table, columns in tables:
            for column, value in (("task_type", EVIL_TASK), ("team", EVIL_TEAM), ("run_id", EVIL_RUN)):
                if column in columns:
                    conn.execute(f'UPDATE "{table}" SET {column} = ? WHERE run_id = ?', [value, victim])
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["runs", "--format", "csv"],
        ["runs", "--search", "run"],
        ["baselines"],
        ["baselines", "--format", "csv"],
        ["baselines", "--by-model"],
        ["hit-rate"],
        ["hit-rate", "--daily", "--format", "csv"],
        ["spend"],
        ["spend", "--format", "csv"],
        ["runaways"],
        ["whatif", "--view", "summary"],
        ["runs", "--team", "nobody"],  # the stderr note lists the stored teams
    ],
    ids=lambda argv: " ".join(argv),
)
def test_every_cli_table_and_csv_prints_stored_strings_escaped(evil_store, capsys, argv):
    code = main([*argv, "--db", str(evil_store), "--window-days", "0"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert not any(ch in out or ch in err for ch in RAW), (out, err)
    if argv[0] in ("runs", "baselines", "hit-rate") and "--team" not in argv:
        assert "\\u202e" in out  # the evil task type is there, escaped
    if argv == ["runs", "--team", "nobody"]:
        assert "team\\x1b]0;pwned\\x07\\u2066" in err


def test_store_sql_csv_prints_stored_strings_escaped(evil_store, capsys):
    assert main(["store", "sql", "--db", str(evil_store), "SELECT run_id, task_type, team FROM runs"]) == 0
    out, _ = capsys.readouterr()
    assert not any(ch in out for ch in RAW)
    assert "run\\x1b[2J\\x00,task\\x07\\u202egpj.exe,team\\x1b]0;pwned\\x07\\u2066" in out


def test_runs_json_keeps_the_stored_value(evil_store, capsys):
    assert main(["runs", "--db", str(evil_store), "--window-days", "0", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert EVIL_RUN in {r["run_id"] for r in records}
    assert EVIL_TASK in {r["task_type"] for r in records}


def test_an_error_line_escapes_the_stored_or_typed_value(evil_store, capsys):
    assert main(["runs", "--db", str(evil_store), "--tree", "x\x1b[2J"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "x\\x1b[2J" in err
