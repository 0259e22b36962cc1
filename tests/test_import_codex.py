"""codex importer against the real rollouts in ../shared/realdata/codex-cli-rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgetlens.importers import ImportReport, import_paths, read_rows
from budgetlens.importers.codex import SKIP_HEARTBEAT, SKIP_REPEATED_TOTAL
from budgetlens.store import read_connection


def _runs(db_path: Path) -> dict[str, dict]:
    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM runs")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


def _source_facts(path: Path) -> dict:
    """Session id, final cumulative total_token_usage, sum of last_token_usage, heartbeats and
    function calls, read straight from a rollout."""
    facts = {"session": path.stem, "final": None, "sum_last_input": 0, "heartbeats": 0, "tools": 0}
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        payload = obj.get("payload") or {}
        if obj["type"] == "session_meta":
            facts["session"] = payload["id"]
        if obj["type"] == "response_item" and payload.get("type") in (
            "function_call",
            "custom_tool_call",
            "web_search_call",
            "local_shell_call",
        ):
            facts["tools"] += 1
        if obj["type"] == "event_msg" and payload.get("type") == "token_count":
            if payload.get("info") is None:
                facts["heartbeats"] += 1
                continue
            facts["final"] = payload["info"]["total_token_usage"]
            facts["sum_last_input"] += payload["info"]["last_token_usage"]["input_tokens"]
    return facts


@pytest.fixture
def rollouts(realdata: Path) -> list[Path]:
    return sorted((realdata / "codex-cli-rollouts").rglob("rollout-*.jsonl"))


def test_run_totals_equal_the_final_cumulative_total_token_usage(rollouts, db_path):
    import_paths("codex", rollouts, db_path)
    runs = _runs(db_path)
    with_usage = 0
    for path in rollouts:
        facts = _source_facts(path)
        run = runs[f"codex:{facts['session']}"]
        assert run["tool_calls"] == facts["tools"]
        final = facts["final"]
        if final is None:
            continue
        with_usage += 1
        assert run["input_tokens"] == final["input_tokens"], path.name
        assert run["output_tokens"] == final["output_tokens"], path.name
        assert run["cache_read_tokens"] == final["cached_input_tokens"], path.name
        assert run["reasoning_tokens"] == final["reasoning_output_tokens"], path.name
        assert run["total_tokens"] == final["total_tokens"], path.name
        assert run["usage_status"] == "reported"
    assert with_usage == 7


def test_snapshots_written_twice_are_not_counted_twice(realdata):
    path = next((realdata / "codex-cli-rollouts" / "localpush").glob("rollout-2026-02-23T12-40-23-*"))
    facts = _source_facts(path)
    report = ImportReport()
    calls = [r for k, r in read_rows("codex", [path], report=report) if k == "call"]
    imported = sum(c["input_tokens"] for c in calls)
    assert imported == facts["final"]["input_tokens"]
    # Summing last_token_usage over every event roughly doubles the usage (SOURCES.md §4).
    assert facts["sum_last_input"] > 1.8 * imported
    assert report.skipped[SKIP_REPEATED_TOTAL] > 0
    assert report.skipped[SKIP_HEARTBEAT] == facts["heartbeats"] == 1


def test_rollout_without_token_count_has_unknown_usage_not_zero(realdata, db_path):
    path = next((realdata / "codex-cli-rollouts" / "codemie").glob("rollout-2026-05-11T13-28-45-*"))
    import_paths("codex", [path], db_path)
    (run,) = _runs(db_path).values()
    assert run["usage_status"] == "unknown"
    assert run["input_tokens"] is None and run["total_tokens"] is None
    assert run["cost_usd"] is None
    assert run["tool_calls"] == _source_facts(path)["tools"] == 38


def test_each_call_takes_the_model_of_the_latest_turn_context(realdata):
    path = realdata / "ccusage-format-fixtures" / "codex" / "project-alpha__session-alpha.jsonl"
    rows = list(read_rows("codex", [path]))
    calls = [r for k, r in rows if k == "call"]
    assert {c["request_model"] for c in calls} == {"gpt-5.2-codex"}
    assert {c["provider_name"] for c in calls} == {"openai"}
    (record,) = [r for k, r in rows if k == "record"]
    assert record["task_type"] == "codex"  # no cwd in this rollout


def test_task_type_is_the_cwd_basename(rollouts):
    path = rollouts[0]
    cwd = next(
        json.loads(l)["payload"]["cwd"]
        for l in path.read_text().splitlines()
        if json.loads(l)["type"] == "session_meta"
    )
    tasks = {row["task_type"] for _, row in read_rows("codex", [path])}
    assert tasks == {Path(cwd).name}
    assert {row["task_type"] for _, row in read_rows("codex", [path], task_type="ops")} == {"ops"}


def test_second_import_adds_nothing(rollouts, db_path):
    first = import_paths("codex", rollouts, db_path)
    second = import_paths("codex", rollouts, db_path)
    assert first.new_calls == first.calls > 0 and first.new_runs == first.runs == 8
    assert (second.new_calls, second.new_runs) == (0, 0)


def test_a_counter_reset_starts_a_new_baseline(tmp_path):
    def event(total, last):
        keys = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
        usage = lambda v: {**dict(zip(keys, v)), "total_tokens": v[0] + v[2]}
        return {
            "timestamp": "2026-05-11T08:27:22.767Z",
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {"total_token_usage": usage(total), "last_token_usage": usage(last)},
            },
        }

    path = tmp_path / "rollout-x.jsonl"
    lines = [
        {
            "timestamp": "2026-05-11T08:27:00.000Z",
            "type": "session_meta",
            "payload": {"id": "s-reset", "cwd": "/work/app"},
        },
        event((100, 0, 10, 0), (100, 0, 10, 0)),
        event((250, 50, 30, 5), (150, 50, 20, 5)),
        event((40, 0, 4, 0), (40, 0, 4, 0)),  # counter reset
    ]
    path.write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    calls = [r for k, r in read_rows("codex", [path]) if k == "call"]
    assert [c["input_tokens"] for c in calls] == [100, 150, 40]
    assert [c["cache_read_tokens"] for c in calls] == [0, 50, 0]
    assert [c["reasoning_tokens"] for c in calls] == [0, 5, 0]


def _rollout_line(line_type: str, payload: object, ts: object = "2026-03-01T10:00:00Z") -> str:
    return json.dumps({"timestamp": ts, "type": line_type, "payload": payload})


def _token_count(inp: object, out: object) -> dict:
    return {
        "type": "token_count",
        "info": {
            "total_token_usage": {
                "input_tokens": inp,
                "cached_input_tokens": 0,
                "output_tokens": out,
                "reasoning_output_tokens": 0,
            }
        },
    }


def test_a_claude_transcript_is_not_imported_as_a_codex_run(tmp_path, db_path):
    path = tmp_path / "session.jsonl"
    path.write_text(
        json.dumps(
            {
                "type": "assistant",
                "sessionId": "s1",
                "timestamp": "2026-03-01T10:00:00Z",
                "message": {"role": "assistant"},
            }
        )
        + "\n"
    )
    report = import_paths("codex", [tmp_path], db_path)
    assert (report.runs, report.calls, report.bad_line_count) == (0, 0, 0)
    assert report.files_without_runs == [str(path)]
    assert not Path(db_path).exists()  # nothing was written


@pytest.mark.system  # imports into a store: seconds
def test_malformed_rollout_lines_are_reported_and_the_rest_is_imported(tmp_path, db_path):
    path = tmp_path / "rollout-2026-03-01-abc.jsonl"
    path.write_text(
        "\n".join(
            [
                _rollout_line("session_meta", {"id": "abc", "cwd": "/work/shop"}),
                _rollout_line("turn_context", {"model": {"a": 1}}),
                _rollout_line("turn_context", {"model": "gpt-5"}),
                _rollout_line("event_msg", _token_count(100, 10)),
                _rollout_line("event_msg", _token_count(float("inf"), 20)),
                _rollout_line("event_msg", _token_count(150, -1)),
                _rollout_line("event_msg", _token_count(float("nan"), 30)),
                _rollout_line("event_msg", _token_count(300, 30), ts="yesterday"),
                _rollout_line("event_msg", _token_count(300, 30), ts="2026-03-01T10:05:00+01:00"),
            ]
        )
        + "\n"
    )
    report = import_paths("codex", [path], db_path)
    assert [line.split(": ", 1)[0] for line in report.bad_lines] == [f"{path}:{n}" for n in (2, 5, 6, 7, 8)]
    assert "turn_context.payload.model must be a string" in report.bad_lines[0]
    assert "token counts must be whole numbers >= 0" in report.bad_lines[1]
    run = _runs(db_path)["codex:abc"]
    assert (run["model_calls"], run["input_tokens"], run["output_tokens"]) == (2, 300, 30)
    assert run["models"] == "gpt-5" and run["task_type"] == "shop"
    assert run["duration_s"] == 3300.0  # 10:05+01:00 is 09:05Z: the start, not the end
