"""Issue 15: copied history in importers never counts a call twice; the run that made it keeps it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _transcripts import claude_assistant

from budgetlens.importers import import_paths
from budgetlens.importers.claude_code import SKIP_COPIED
from budgetlens.importers.codex import SKIP_FORK_COPY
from budgetlens.store import read_connection

PARENT = "0199a000-0000-7000-8000-00000000aaaa"
FORK = "0199a000-0000-7000-8000-00000000bbbb"


def _token_count(ts: str, inp: int, out: int) -> dict:
    total = {
        "input_tokens": inp,
        "cached_input_tokens": 0,
        "output_tokens": out,
        "reasoning_output_tokens": 0,
    }
    return {
        "timestamp": ts,
        "type": "event_msg",
        "payload": {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": total}},
    }


def _meta(ts: str, session: str, forked_from: str | None = None) -> dict:
    payload = {"id": session, "cwd": "/work/shop", "model_provider": "openai"}
    if forked_from:
        payload["forked_from_id"] = forked_from
    return {"timestamp": ts, "type": "session_meta", "payload": payload}


def _context(ts: str) -> dict:
    return {"timestamp": ts, "type": "turn_context", "payload": {"model": "gpt-5-codex", "cwd": "/work/shop"}}


def _write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# parent: two calls, cumulative 1,200 then 2,500 tokens
PARENT_CALLS = [("2026-03-02T10:00:10Z", 1000, 200), ("2026-03-02T10:01:10Z", 2100, 400)]


def _parent(folder: Path) -> Path:
    lines = [_meta("2026-03-02T10:00:00Z", PARENT), _context("2026-03-02T10:00:01Z")]
    lines += [_token_count(*call) for call in PARENT_CALLS]
    return _write(folder / "rollout-2026-03-02T10-00-00-aaaa.jsonl", lines)


def _fork(folder: Path) -> Path:
    start = "2026-03-02T11:00:00Z"
    lines = [_meta(start, FORK, forked_from=PARENT)]
    # the copy of the parent's history, written when the fork starts
    lines += [_context("2026-03-02T11:00:00.100Z")]
    lines += [_token_count("2026-03-02T11:00:00.200Z", inp, out) for _, inp, out in PARENT_CALLS]
    # the fork's own call: cumulative 2,800 in / 500 out = +700 / +100
    lines += [_context("2026-03-02T11:01:00Z"), _token_count("2026-03-02T11:02:00Z", 2800, 500)]
    return _write(folder / "rollout-2026-03-02T11-00-00-bbbb.jsonl", lines)


def _run_totals(db_path: Path) -> dict[str, int]:
    with read_connection(db_path) as conn:
        return dict(conn.execute("SELECT run_id, total_tokens FROM runs").fetchall())


@pytest.mark.parametrize("fork_first", [False, True])
@pytest.mark.system  # imports into a store twice: seconds
def test_a_forked_codex_rollout_does_not_count_the_parents_calls_again(tmp_path, fork_first):
    parent, fork = _parent(tmp_path / "a"), _fork(tmp_path / "b")
    db_path = tmp_path / "store.duckdb"
    report = import_paths("codex", [fork, parent] if fork_first else [parent, fork], db_path)
    totals = _run_totals(db_path)
    assert totals == {f"codex:{PARENT}": 2500, f"codex:{FORK}": 800}
    assert sum(totals.values()) == 3300
    assert report.skipped[SKIP_FORK_COPY] == 2


@pytest.mark.system  # imports into a store twice: seconds
def test_a_fork_imported_without_its_parent_keeps_only_its_own_call(tmp_path):
    db_path = tmp_path / "store.duckdb"
    import_paths("codex", [_fork(tmp_path)], db_path)
    assert _run_totals(db_path) == {f"codex:{FORK}": 800}


# --- Claude Code: a resumed session's transcript carries copies of the earlier responses --------

ORIGINAL = [
    ("2026-03-02T09:00:05Z", "msg_01", "req_01", 1000, 100),
    ("2026-03-02T09:01:05Z", "msg_02", "req_02", 2000, 200),
]


@pytest.mark.parametrize("resumed_first", [False, True])
@pytest.mark.system  # imports into a store twice: seconds
def test_a_resumed_claude_code_session_does_not_count_the_copied_responses(tmp_path, resumed_first):
    project = tmp_path / "-work-shop"
    original = _write(project / "s-one.jsonl", [claude_assistant("s-one", *call) for call in ORIGINAL])
    copies = [claude_assistant("s-two", *call) for call in ORIGINAL]  # copied under the new session id
    own = claude_assistant("s-two", "2026-03-02T10:00:05Z", "msg_03", "req_03", 500, 50)
    resumed = _write(project / "s-two.jsonl", [*copies, own])
    os.utime(original, (1_772_442_000, 1_772_442_000))  # the original was last written earlier
    os.utime(resumed, (1_772_445_600, 1_772_445_600))
    db_path = tmp_path / "store.duckdb"
    report = import_paths(
        "claude-code", [resumed, original] if resumed_first else [original, resumed], db_path
    )
    with read_connection(db_path) as conn:
        runs = dict(conn.execute("SELECT run_id, total_tokens FROM runs").fetchall())
    # 1,100 + 2,200 made by the original session; 550 by the resumed one
    assert runs == {"claude-code:s-one": 3300, "claude-code:s-two": 550}
    assert report.skipped[SKIP_COPIED] == 2
