"""openhands importer: evaluation output JSONL and runtime trajectories from ../shared/realdata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgetlens.importers import ImportReport, import_paths, read_rows
from budgetlens.importers.openhands import SKIP_REPEATED_RESPONSE, benchmark, stop_reason
from budgetlens.store import read_connection


def _runs(db_path: Path) -> list[dict]:
    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM runs ORDER BY start_utc NULLS LAST, run_id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


@pytest.fixture
def eval_output(realdata: Path) -> Path:
    return realdata / "openhands" / "multi_swe_bench_eval_output.jsonl"


@pytest.fixture
def resolver_output(realdata: Path) -> Path:
    return realdata / "openhands" / "resolver_mock_output.jsonl"


def _by_instance(db_path: Path) -> dict[str, dict]:
    return {run["run_id"].split(":")[1]: run for run in _runs(db_path)}


def test_eval_runs_equal_the_accumulated_token_usage(eval_output, db_path):
    import_paths("openhands", [eval_output], db_path)
    runs = _by_instance(db_path)
    lines = [json.loads(line) for line in eval_output.read_text().splitlines()]
    assert len(runs) == len(lines) == 3
    for line in lines:
        metrics = line["metrics"]
        run = runs[line["instance_id"]]
        accumulated = metrics["accumulated_token_usage"]
        assert run["input_tokens"] == accumulated["prompt_tokens"]
        assert run["output_tokens"] == accumulated["completion_tokens"]
        usage_ids = {u["response_id"] for u in metrics["token_usages"]}
        no_usage = [l for l in metrics["response_latencies"] if l["response_id"] not in usage_ids]
        assert run["model_calls"] == len(metrics["token_usages"]) + len(no_usage)
        assert run["unknown_usage_calls"] == len(no_usage)
        assert run["usage_status"] == ("unknown" if no_usage else "reported")
        assert run["task_type"] == "multi_swe_bench_c_changed_debug-train"


def test_unpriced_runs_have_null_cost_not_zero(eval_output, db_path):
    import_paths("openhands", [eval_output], db_path)
    for line in eval_output.read_text().splitlines():
        metrics = json.loads(line)["metrics"]
        assert metrics["accumulated_cost"] == 0 and metrics["costs"] == []
    runs = _runs(db_path)
    assert [run["cost_usd"] for run in runs] == [None, None, None]
    assert all(run["unpriced_calls"] > 0 for run in runs)


def test_resolver_runs_keep_the_accumulated_cost_with_unknown_usage(resolver_output, db_path):
    import_paths("openhands", [resolver_output], db_path)
    runs = {run["run_id"]: run for run in _runs(db_path)}
    lines = [json.loads(line) for line in resolver_output.read_text().splitlines()]
    assert len(runs) == len(lines) == 2
    for line in lines:
        issue = line["issue"]
        (run,) = [
            r for r in runs.values() if f"{issue['owner']}/{issue['repo']}#{issue['number']}" in r["run_id"]
        ]
        assert run["cost_usd"] == pytest.approx(line["metrics"]["accumulated_cost"])
        assert run["model_calls"] == len(line["metrics"]["costs"])
        assert run["usage_status"] == "unknown"
        assert run["input_tokens"] is None
        assert run["task_type"] == "openhands-resolver"


def test_maximum_iterations_is_a_turn_budget_stop(eval_output, db_path):
    import_paths("openhands", [eval_output], db_path)
    runs = _by_instance(db_path)
    for line in eval_output.read_text().splitlines():
        obj = json.loads(line)
        expected = "budget_turns" if obj["error"] else "completed"
        assert runs[obj["instance_id"]]["stop_reason"] == expected


def test_latencies_are_seconds_on_the_calls(eval_output):
    obj = json.loads(eval_output.read_text().splitlines()[0])
    latency = {l["response_id"]: l["latency"] for l in obj["metrics"]["response_latencies"]}
    calls = [r for k, r in read_rows("openhands", [eval_output]) if k == "call"][:3]
    for call, usage in zip(calls, obj["metrics"]["token_usages"]):
        assert call["duration_s"] == pytest.approx(latency[usage["response_id"]])


@pytest.mark.parametrize("name", ["basic", "basic_gui_mode", "basic_interactions", "wrong_initial_state"])
def test_runtime_trajectories_count_each_model_response_once(realdata, name):
    path = realdata / "openhands" / f"runtime_traj__{name}.json"
    events = json.loads(path.read_text())
    responses = {}
    copies = 0
    for event in events:
        response = (event.get("tool_call_metadata") or {}).get("model_response")
        if response:
            copies += 1
            responses[response["id"]] = response["usage"]
    report = ImportReport()
    calls = [r for k, r in read_rows("openhands", [path], report=report) if k == "call"]
    assert len(calls) == len(responses)
    assert report.skipped[SKIP_REPEATED_RESPONSE] == copies - len(responses)
    # LiteLLM usage for Claude: prompt_tokens already includes cache creation and reads.
    assert sum(c["input_tokens"] for c in calls) == sum(u["prompt_tokens"] for u in responses.values())
    assert sum(c["output_tokens"] for c in calls) == sum(u["completion_tokens"] for u in responses.values())


def test_basic_gui_mode_has_eight_copies_of_four_responses(realdata):
    path = realdata / "openhands" / "runtime_traj__basic_gui_mode.json"
    report = ImportReport()
    calls = [r for k, r in read_rows("openhands", [path], report=report) if k == "call"]
    assert len(calls) == 4
    assert report.skipped[SKIP_REPEATED_RESPONSE] == 4


def test_second_import_adds_nothing(realdata, db_path):
    folder = realdata / "openhands"
    first = import_paths("openhands", [folder], db_path)
    second = import_paths("openhands", [folder], db_path)
    assert first.new_runs == first.runs == 9
    assert (second.new_calls, second.new_runs) == (0, 0)


@pytest.mark.parametrize(
    "error, final_state, expected",
    [
        (None, None, "completed"),
        (None, "error", "failed"),
        (
            "RuntimeError: Agent reached maximum iteration in headless mode. Current iteration: 50, "
            "max iteration: 50",
            None,
            "budget_turns",
        ),
        ("RuntimeError: Agent reached maximum budget for conversation", None, "budget_cost"),
        ("AgentStuckInLoopError: Agent got stuck in a loop", None, "failed"),
    ],
)
def test_error_maps_to_a_stop_reason(error, final_state, expected):
    assert stop_reason(error, final_state) == expected


@pytest.mark.parametrize(
    "dataset, expected",
    [
        (
            "__home__USER__MopenHands__data__multi_swe_bench_c_changed_debug.jsonl-train",
            "multi_swe_bench_c_changed_debug-train",
        ),
        ("princeton-nlp__SWE-bench_Lite-test", "SWE-bench_Lite-test"),
        (None, None),
    ],
)
def test_benchmark_from_metadata_dataset(dataset, expected):
    assert benchmark({"dataset": dataset}) == expected


def _eval_line(instance: str, metrics: dict) -> str:
    return json.dumps(
        {
            "instance_id": instance,
            "metadata": {"llm_config": {"model": "gpt-4o"}},
            "history": [],
            "metrics": metrics,
            "error": None,
        }
    )


@pytest.mark.system  # imports into a store: seconds
def test_malformed_eval_lines_are_reported_and_the_other_runs_imported(tmp_path, db_path):
    usage = {"model": "gpt-4o", "prompt_tokens": 10, "completion_tokens": 5, "response_id": "r1"}
    path = tmp_path / "output.jsonl"
    path.write_text(
        "\n".join(
            [
                _eval_line("ok", {"accumulated_cost": 0.5, "token_usages": [usage], "costs": [0.5]}),
                _eval_line(
                    "dict-id", {"accumulated_cost": 0.5, "token_usages": [{**usage, "response_id": {"a": 1}}]}
                ),
                _eval_line("nan-cost", {"accumulated_cost": float("nan"), "token_usages": [usage]}),
                _eval_line(
                    "negative-cost", {"accumulated_cost": 0.5, "token_usages": [usage], "costs": [-0.5]}
                ),
                _eval_line(
                    "inf-tokens",
                    {"accumulated_cost": 0.5, "token_usages": [{**usage, "prompt_tokens": float("inf")}]},
                ),
                _eval_line("not-a-list", {"accumulated_cost": 0.5, "token_usages": "z"}),
            ]
        )
        + "\n"
    )
    report = import_paths("openhands", [path], db_path)
    bad = dict(line.split(": ", 1) for line in report.bad_lines)
    assert sorted(bad) == [f"{path}:{n}" for n in (2, 3, 4, 5, 6)]
    assert bad[f"{path}:2"] == "metrics.token_usages[0].response_id must be a string, got dict"
    assert bad[f"{path}:3"] == "metrics.accumulated_cost must be a finite number >= 0, got nan"
    assert bad[f"{path}:4"] == "metrics.costs[0] must be a finite number >= 0, got -0.5"
    assert bad[f"{path}:6"] == "metrics.token_usages must be a list, got str"
    assert [(r["run_id"].split(":")[1], r["cost_usd"]) for r in _runs(db_path)] == [("ok", 0.5)]


def test_a_trajectory_with_a_malformed_response_id_is_reported_not_raised(tmp_path):
    path = tmp_path / "trajectory.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": 1,
                    "tool_call_metadata": {
                        "model_response": {
                            "id": ["x"],
                            "model": "gpt-4o",
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                        }
                    },
                }
            ]
        )
    )
    report = ImportReport()
    assert list(read_rows("openhands", [path], report=report)) == []
    assert report.bad_lines == [
        f"{path}: events[0].tool_call_metadata.model_response.id must be a string, got list"
    ]


# Observations that are not the result of a tool run (state changes, errors, memory recalls).
_NOT_TOOL_RESULTS = {"agent_state_changed", "null", "error", "recall"}


def _tool_results(history: list) -> int:
    """Tool runs counted another way than the importer: every tool run ends in one observation."""
    return sum(
        1 for e in history if e.get("observation") is not None and e["observation"] not in _NOT_TOOL_RESULTS
    )


def _records(path: Path) -> list[dict]:
    return [r for k, r in read_rows("openhands", [path], report=ImportReport()) if k == "record"]


def test_resolver_runs_count_tool_actions_from_history(resolver_output, db_path):
    lines = [json.loads(line) for line in resolver_output.read_text().splitlines()]
    expected = sorted(_tool_results(line["history"]) for line in lines)
    assert all(n > 0 for n in expected)
    assert sorted(r["tool_calls"] for r in _records(resolver_output)) == expected
    import_paths("openhands", [resolver_output], db_path)
    assert sorted(run["tool_calls"] for run in _runs(db_path)) == expected


def test_eval_runs_count_each_tool_call_id_once(eval_output):
    lines = [json.loads(line) for line in eval_output.read_text().splitlines()]
    # Actions and their observations share the tool_call_id; `finish` has no observation.
    expected = sorted(
        len({e["tool_call_metadata"]["tool_call_id"] for e in line["history"] if e.get("tool_call_metadata")})
        for line in lines
    )
    assert all(n > 0 for n in expected)
    assert sorted(r["tool_calls"] for r in _records(eval_output)) == expected


@pytest.mark.parametrize(
    "history, expected",
    [
        (
            [
                {"action": "run", "source": "agent"},
                {"observation": "run", "source": "agent"},
                {"action": "run_ipython"},
                {"action": "message", "source": "agent"},
                {"action": "finish"},
            ],
            2,
        ),
        (
            [
                {"action": "str_replace_editor"},
                {"action": "browse_interactive"},
                {"action": "message", "source": "user"},
                {"action": "read", "source": "user"},
            ],
            2,
        ),
        (
            [
                {"action": "think", "tool_call_metadata": {"tool_call_id": "a"}},
                {"action": "edit", "tool_call_metadata": {"tool_call_id": "b"}},
                {"action": "edit", "tool_call_metadata": {"tool_call_id": "b"}},
                {"observation": "edit", "tool_call_metadata": {"tool_call_id": "b"}},
            ],
            2,
        ),
        ([], 0),
        (None, None),
    ],
)
def test_tool_calls_of_a_history_and_unknown_without_one(tmp_path, history, expected):
    usage = {"model": "gpt-4o", "prompt_tokens": 10, "completion_tokens": 5, "response_id": "r1"}
    line = {"instance_id": "t", "metadata": {}, "metrics": {"token_usages": [usage]}}
    if history is not None:
        line["history"] = history
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (record,) = _records(path)
    assert record["tool_calls"] == expected
