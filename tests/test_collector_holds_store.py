"""``budgetlens sample`` and ``budgetlens import`` on a store a running collector holds fail at
once, naming the collector and what to do, instead of retrying the lock for a minute."""

from __future__ import annotations

import subprocess

import pytest
from _collector_helpers import collector_process

pytestmark = pytest.mark.system


def _cli(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "budgetlens.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("command", ["sample", "import"])
def test_writing_into_a_store_a_collector_holds_fails_at_once_naming_it(tmp_path, python, realdata, command):
    db_path = tmp_path / "store.duckdb"
    args = (
        ["sample", "--days", "1"]
        if command == "sample"
        else [
            "import",
            "claude-code",
            str(realdata / "claude-code-jsonl" / "spotter" / "tool_heavy.jsonl"),
        ]
    )
    with collector_process(python, db_path) as (process, _):
        done = _cli(python, *args, "--db", str(db_path))
    assert done.returncode != 0
    assert f"is held by a running collector, PID {process.pid}" in done.stderr, done.stderr
    assert "Stop the collector first, or write into another store" in done.stderr
    assert "still locked after" not in done.stderr  # not the minute-long retry
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr  # a message, no traceback
