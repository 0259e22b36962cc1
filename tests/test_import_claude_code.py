"""claude-code importer against the real transcripts in ../shared/realdata/claude-code-jsonl."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from budgetlens.importers import ImportReport, import_paths, read_rows
from budgetlens.importers.claude_code import SKIP_REPEATED_BLOCK
from budgetlens.pricing import cost_usd
from budgetlens.store import read_connection
from budgetlens.usage import Usage


def _runs(db_path: Path) -> dict[str, dict]:
    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM runs")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


def _expected_from_source(files: list[Path]) -> dict[str, dict]:
    """Totals per session computed straight from the transcripts: the last line of each
    (message id, request id) group, Anthropic input = input + cache creation + cache read."""
    last: dict[tuple, dict] = {}
    for path in files:
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if obj.get("type") != "assistant" or obj["message"].get("model") == "<synthetic>":
                continue
            key = (obj["sessionId"], obj["message"]["id"], obj.get("requestId"))
            last[key] = obj["message"]["usage"]
    totals: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    for (session, _, _), usage in last.items():
        t = totals[f"claude-code:{session}"]
        t["calls"] += 1
        t["cache_read"] += usage.get("cache_read_input_tokens", 0)
        t["cache_write"] += usage.get("cache_creation_input_tokens", 0)
        t["input"] += (
            usage["input_tokens"]
            + usage.get("cache_read_input_tokens", 0)
            + usage.get("cache_creation_input_tokens", 0)
        )
        t["output"] += usage["output_tokens"]
    return totals


@pytest.fixture
def transcripts(realdata: Path) -> Path:
    return realdata / "claude-code-jsonl"


def test_session_totals_equal_the_last_line_of_each_api_response(transcripts, db_path):
    report = import_paths("claude-code", [transcripts], db_path)
    runs = _runs(db_path)
    files = [p for p in transcripts.rglob("*.jsonl") if "upstream" not in p.name]
    expected = _expected_from_source(files)
    assert set(runs) == set(expected)
    for run_id, totals in expected.items():
        run = runs[run_id]
        assert run["model_calls"] == totals["calls"], run_id
        assert run["input_tokens"] == totals["input"], run_id
        assert run["output_tokens"] == totals["output"], run_id
        assert run["cache_read_tokens"] == totals["cache_read"], run_id
        assert run["cache_write_tokens"] == totals["cache_write"], run_id
        assert run["usage_status"] == "reported"
        assert run["stop_reason"] == "completed"
        assert run["source"] == "import:claude-code"
    assert report.skipped[SKIP_REPEATED_BLOCK] > 0
    assert report.bad_line_count == 0


def test_content_block_lines_are_counted_once_not_summed(transcripts):
    # SOURCES.md §3: summing every line of spotter 4d5611e5 gives 20.5 M cache reads, the last
    # line per message id 11.6 M. The import must give the deduplicated figure.
    path = transcripts / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    all_lines = sum(
        json.loads(line)["message"]["usage"].get("cache_read_input_tokens", 0)
        for line in path.read_text().splitlines()
        if json.loads(line).get("type") == "assistant"
    )
    rows = [row for kind, row in read_rows("claude-code", [path]) if kind == "call"]
    imported = sum(row["cache_read_tokens"] for row in rows)
    expected = _expected_from_source([path])["claude-code:4d5611e5-241a-462a-8d15-5122611a9569"]
    assert imported == expected["cache_read"]
    assert all_lines > 1.5 * imported


def test_metrics_fixture_main_file_matches_the_documented_dedup_figures(transcripts):
    # SOURCES.md §3 states: the last line per id gives output 806, cache creation 37,172 and
    # cache read 214,627 for the main file; recomputed here from the file itself.
    main = transcripts / "codemie/metrics-fixture/-tmp-private/4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl"
    expected = _expected_from_source([main])["claude-code:4c2ddfdc-b619-4525-8d03-1950fb1b0257"]
    rows = [row for kind, row in read_rows("claude-code", [main]) if kind == "call"]
    assert sum(r["output_tokens"] for r in rows) == expected["output"] == 806
    assert sum(r["cache_write_tokens"] for r in rows) == expected["cache_write"] == 37_172
    assert sum(r["cache_read_tokens"] for r in rows) == expected["cache_read"] == 214_627


def test_subagent_calls_belong_to_the_session_run_and_are_marked(transcripts):
    session_dir = transcripts / "spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04"
    main = transcripts / "spotter" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"
    rows = list(read_rows("claude-code", [main, session_dir]))
    calls = [row for kind, row in rows if kind == "call"]
    records = [row for kind, row in rows if kind == "record"]
    assert [r["run_id"] for r in records] == ["claude-code:ae4a77f8-aedd-4bc1-888f-c94edc91af04"]
    assert {c["run_id"] for c in calls} == {records[0]["run_id"]}
    subagent_ids = {
        (json.loads(line)["message"]["id"])
        for path in session_dir.rglob("agent-*.jsonl")
        for line in path.read_text().splitlines()
        if json.loads(line).get("type") == "assistant"
    }
    # One session mixes opus and haiku; its subagent runs sonnet: each call keeps its model.
    assert {"claude-opus-4-6", "claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929"} <= {
        c["request_model"] for c in calls
    }
    marked = [c for c in calls if c["is_subagent"]]
    assert len(marked) == len(subagent_ids) > 0
    tool_uses = {
        block["id"]
        for path in [main, *session_dir.rglob("*.jsonl")]
        for line in path.read_text().splitlines()
        if json.loads(line).get("type") == "assistant"
        for block in json.loads(line)["message"].get("content", [])
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }
    assert records[0]["tool_calls"] == len(tool_uses)


def test_second_import_adds_nothing(transcripts, db_path):
    first = import_paths("claude-code", [transcripts], db_path)
    second = import_paths("claude-code", [transcripts], db_path)
    assert first.new_calls == first.calls > 0
    assert (second.new_calls, second.new_runs) == (0, 0)
    assert second.calls == first.calls
    with read_connection(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == first.calls


def test_a_bad_line_is_reported_with_file_and_line_and_nothing_else_is_lost(transcripts, tmp_path):
    original = transcripts / "spotter" / "tool_heavy.jsonl"
    broken = tmp_path / "proj" / "tool_heavy.jsonl"
    broken.parent.mkdir()
    lines = original.read_text().splitlines()
    lines.insert(3, '{"type": "assistant", "message": {"id": "x"')  # cut mid-write
    lines.insert(6, "[1, 2, 3]")
    broken.write_text("\n".join(lines) + "\n")
    report = ImportReport()
    calls = [r for k, r in read_rows("claude-code", [broken], report=report) if k == "call"]
    clean = [r for k, r in read_rows("claude-code", [original]) if k == "call"]
    assert report.bad_line_count == 2
    assert report.bad_lines[0].startswith(f"{broken}:4: invalid JSON")
    assert report.bad_lines[1] == f"{broken}:7: expected a JSON object, got list"
    assert sorted(c["span_id"] for c in calls) == sorted(c["span_id"] for c in clean)
    assert sum(c["total_tokens"] for c in calls) == sum(c["total_tokens"] for c in clean)


def test_task_type_is_the_project_folder_or_the_cwd_of_an_encoded_folder(transcripts, tmp_path):
    source = transcripts / "spotter" / "short.jsonl"
    cwd = json.loads(source.read_text().splitlines()[1])["cwd"]
    encoded = tmp_path / cwd.replace("/", "-")
    encoded.mkdir()
    shutil.copy(source, encoded / source.name)
    plain = tmp_path / "billing-service"
    plain.mkdir()
    shutil.copy(source, plain / source.name)

    def task_types(path, **kwargs):
        return {row["task_type"] for _, row in read_rows("claude-code", [path], **kwargs)}

    assert task_types(encoded) == {Path(cwd).name}
    assert task_types(plain) == {"billing-service"}
    assert task_types(plain, task_type="triage") == {"triage"}


def test_cost_usd_from_the_transcript_is_kept_per_call(realdata):
    fixture = realdata / "ccusage-format-fixtures" / "claude"
    expected: dict[str, float] = defaultdict(float)
    for path in fixture.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if "costUSD" in obj:
                expected[f"claude-code:{obj['sessionId']}"] += obj["costUSD"]
    calls = [row for kind, row in read_rows("claude-code", [fixture]) if kind == "call"]
    got: dict[str, float] = defaultdict(float)
    for call in calls:
        if call["run_id"] in expected:
            got[call["run_id"]] += call["cost_usd"]
    assert got == pytest.approx(expected)


def test_lines_without_usage_keep_unknown_usage_not_zero(tmp_path):
    path = tmp_path / "proj" / "s.jsonl"
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {
                "type": "assistant",
                "sessionId": "s1",
                "timestamp": "2026-02-10T21:11:59.186Z",
                "requestId": "req_1",
                "message": {"id": "msg_1", "model": "claude-opus-4-6", "role": "assistant", "content": []},
            }
        )
        + "\n"
    )
    (call,) = [row for kind, row in read_rows("claude-code", [path]) if kind == "call"]
    assert call["usage_status"] == "unknown"
    assert call["input_tokens"] is None and call["total_tokens"] is None
    assert call["cost_usd"] is None


def _assistant(
    session: str, message_id: str, ts: object = "2026-03-01T10:00:00Z", usage: object = None, **extra
) -> str:
    line = {
        "type": "assistant",
        "sessionId": session,
        "timestamp": ts,
        "requestId": "req_" + message_id,
        "message": {
            "id": message_id,
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        },
    }
    line.update(extra)
    return json.dumps(line)


@pytest.mark.system  # imports into a store: seconds
def test_malformed_values_reject_only_their_line_and_the_import_finishes(tmp_path, db_path):
    project = tmp_path / "-home-me-shop"
    project.mkdir()
    path = project / "s1.jsonl"
    path.write_text(
        "\n".join(
            [
                _assistant("s1", "msg_1"),
                _assistant("s1", "msg_2", usage={"input_tokens": 1e400, "output_tokens": 1}),
                _assistant(["a"], "msg_3"),
                _assistant("s1", "msg_4", costUSD=float("nan")),
                _assistant("s1", "msg_5", costUSD=-5),
                _assistant("s1", "msg_6", ts="not a time"),
                _assistant("s1", "msg_7", usage={"input_tokens": -3, "output_tokens": 1}),
                _assistant("s1", "msg_8", costUSD=0.25),
            ]
        )
        + "\n"
    )
    report = import_paths("claude-code", [tmp_path], db_path)
    reasons = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in report.bad_lines}
    assert set(reasons) == {f"{path}:{n}" for n in (2, 3, 4, 5, 6, 7)}
    assert "sessionId must be a string" in reasons[f"{path}:3"]
    assert reasons[f"{path}:4"] == "costUSD must be a finite number >= 0, got nan"
    assert reasons[f"{path}:5"] == "costUSD must be a finite number >= 0, got -5"
    assert "timestamp is not an ISO-8601 timestamp" in reasons[f"{path}:6"]
    assert "input_tokens" in reasons[f"{path}:7"]
    run = _runs(db_path)["claude-code:s1"]
    assert run["model_calls"] == 2 and run["input_tokens"] == 20
    priced = cost_usd("claude-sonnet-4-5", Usage(10, 5), provider="anthropic")
    assert run["cost_usd"] == pytest.approx(priced + 0.25)  # no NaN, no -$5


def test_timestamps_are_compared_as_datetimes_not_strings(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "s1.jsonl").write_text(
        "\n".join(
            [
                _assistant("s1", "msg_1", ts="2026-03-01T06:00:00Z"),
                _assistant("s1", "msg_2", ts="2026-03-01T10:00:00+05:00"),  # 05:00 UTC: the start
                _assistant("s1", "msg_3", ts="2026-03-01T07:30:00.5+00:00"),
            ]
        )
        + "\n"
    )
    rows = list(read_rows("claude-code", [tmp_path]))
    record = next(row for kind, row in rows if kind == "record")
    assert record["start_utc"].isoformat() == "2026-03-01T05:00:00+00:00"
    assert record["end_utc"].isoformat() == "2026-03-01T07:30:00.500000+00:00"
    assert record["duration_s"] == 9000.5


def test_a_file_without_claude_code_lines_holds_no_run(tmp_path):
    path = tmp_path / "rollout-x.jsonl"
    path.write_text(json.dumps({"type": "session_meta", "payload": {"id": "x"}}) + "\n")
    report = ImportReport()
    assert list(read_rows("claude-code", [path], report=report)) == []
    assert report.files_without_runs == [str(path)] and report.bad_line_count == 0


def test_each_run_carries_its_transcripts_session_id_as_attribution(transcripts, db_path):
    import_paths("claude-code", [transcripts], db_path)
    runs = _runs(db_path)
    session_ids = set()
    for path in transcripts.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            if '"sessionId"' in line:
                session_ids.add(json.loads(line)["sessionId"])
    assert runs and all(
        run["session_id"] == run_id.removeprefix("claude-code:") for run_id, run in runs.items()
    )
    assert {run["session_id"] for run in runs.values()} <= session_ids
