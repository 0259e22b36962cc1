"""swe-agent importer: SWE-agent .traj and mini-swe-agent .traj.json from ../shared/realdata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgetlens.importers import ImportReport, import_paths, read_rows
from budgetlens.importers.swe_agent import stop_reason
from budgetlens.store import read_connection


def _runs(db_path: Path) -> dict[str, dict]:
    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM runs")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}


def _run_id(prefix: str, path: Path) -> str:
    stem = path.name.removesuffix(".traj.json").removesuffix(".traj")
    return f"{prefix}:{path.parent.name}/{stem}"


@pytest.fixture
def swe_trajs(realdata: Path) -> list[Path]:
    return sorted((realdata / "swe-agent-traj").glob("*.traj"))


@pytest.fixture
def mini_trajs(realdata: Path) -> list[Path]:
    return sorted((realdata / "mini-swe-agent-deepseek" / "trajectories").glob("*.traj.json"))


def test_swe_agent_runs_equal_model_stats(swe_trajs, db_path):
    import_paths("swe-agent", swe_trajs, db_path)
    runs = _runs(db_path)
    assert len(runs) == len(swe_trajs) == 5
    for path in swe_trajs:
        doc = json.loads(path.read_text())
        stats = doc["info"]["model_stats"]
        run = runs[_run_id("swe-agent", path)]
        assert run["turns"] == stats["api_calls"]
        assert run["tool_calls"] == len(doc["trajectory"])
        if stats["tokens_sent"] or stats["tokens_received"]:
            assert run["input_tokens"] == stats["tokens_sent"]
            assert run["output_tokens"] == stats["tokens_received"]
            assert run["total_tokens"] == stats["tokens_sent"] + stats["tokens_received"]
            assert run["cost_usd"] == pytest.approx(stats["instance_cost"])
            assert run["usage_status"] == "reported"
        else:  # replayed demonstrations: calls recorded, no usage -> unknown, never 0
            assert run["input_tokens"] is None and run["total_tokens"] is None
            assert run["cost_usd"] is None
            assert run["usage_status"] == "unknown"
        assert run["stop_reason"] == "completed"  # every file says exit_status "submitted"


def test_mini_swe_agent_runs_equal_instance_cost_and_api_calls(mini_trajs, db_path):
    import_paths("swe-agent", mini_trajs, db_path)
    runs = _runs(db_path)
    assert len(runs) == len(mini_trajs) == 9
    for path in mini_trajs:
        doc = json.loads(path.read_text())
        stats = doc["info"]["model_stats"]
        usages = [m["extra"]["response"]["usage"] for m in doc["messages"] if m["role"] == "assistant"]
        run = runs[_run_id("mini-swe-agent", path)]
        assert run["cost_usd"] == pytest.approx(stats["instance_cost"]), path.name
        assert run["model_calls"] == run["turns"] == stats["api_calls"], path.name
        # prompt_tokens includes the cached tokens (DeepSeek/LiteLLM): never added twice.
        assert (run["input_tokens"] or 0) == sum(u["prompt_tokens"] for u in usages), path.name
        assert (run["output_tokens"] or 0) == sum(u["completion_tokens"] for u in usages)
        assert (run["cache_read_tokens"] or 0) == sum(
            (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) for u in usages
        )
        # completion_tokens_details is null for deepseek-chat, {reasoning_tokens} for the reasoner.
        assert (run["reasoning_tokens"] or 0) == sum(
            (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0) for u in usages
        )
        failed = stats["api_calls"] - len(usages)
        assert run["unknown_usage_calls"] == failed
        assert run["usage_status"] == ("unknown" if failed else "reported")
        assert run["tool_calls"] == sum(
            len(m.get("tool_calls") or []) for m in doc["messages"] if m["role"] == "assistant"
        )
        assert run["task_type"] == "swebench"


def test_mini_per_call_cost_is_the_source_cost(mini_trajs):
    path = mini_trajs[0]
    doc = json.loads(path.read_text())
    costs = [m["extra"]["cost"] for m in doc["messages"] if m["role"] == "assistant"]
    calls = [r for k, r in read_rows("swe-agent", [path]) if k == "call"]
    assert [c["cost_usd"] for c in calls] == costs


@pytest.mark.parametrize(
    "name, stop, retryable",
    [
        ("deepseek_reasoner_dev__marshmallow-code__marshmallow-1343", "completed", None),
        ("deepseek_reasoner_dev__pvlib__pvlib-python-1072", "failed", True),  # InternalServerError
        ("deepseek_reasoner_dev__pvlib__pvlib-python-1154", "failed", True),  # Timeout
    ],
)
def test_mini_exit_status_maps_to_a_stop_reason(realdata, name, stop, retryable):
    path = realdata / "mini-swe-agent-deepseek" / "trajectories" / f"{name}.traj.json"
    (record,) = [r for k, r in read_rows("swe-agent", [path]) if k == "record"]
    assert record["stop_reason"] == stop
    assert record["retryable"] is retryable


def test_a_timeout_with_no_assistant_message_is_one_unknown_call(realdata):
    path = (
        realdata
        / "mini-swe-agent-deepseek"
        / "trajectories"
        / "deepseek_reasoner_dev__pvlib__pvlib-python-1154.traj.json"
    )
    doc = json.loads(path.read_text())
    assert doc["info"]["model_stats"]["api_calls"] == 1
    (call,) = [r for k, r in read_rows("swe-agent", [path]) if k == "call"]
    assert call["usage_status"] == "unknown"
    assert call["input_tokens"] is None
    assert call["error_type"] == doc["info"]["exit_status"] == "Timeout"


@pytest.mark.parametrize(
    "status, expected",
    [
        ("submitted", ("completed", None)),
        ("Submitted", ("completed", None)),
        ("submitted (exit_cost)", ("budget_cost", False)),
        ("exit_cost", ("budget_cost", False)),
        ("exit_context", ("budget_tokens", False)),
        ("exit_total_execution_time", ("budget_time", False)),
        ("InternalServerError", ("failed", True)),
        ("Timeout", ("failed", True)),
        ("exit_format", ("failed", False)),
    ],
)
def test_exit_status_table(status, expected):
    assert stop_reason(status) == expected


def test_limits_exceeded_names_the_limit_that_was_hit():
    assert stop_reason("LimitsExceeded", cost=3.1, cost_limit=3.0) == ("budget_cost", False)
    assert stop_reason("LimitsExceeded", steps=250, step_limit=250, cost=0.4, cost_limit=3.0) == (
        "budget_turns",
        False,
    )


def test_task_type_comes_from_the_swe_agent_output_folder(realdata, tmp_path):
    source = realdata / "swe-agent-traj" / "test_data__pydicom__pydicom-1458.traj"
    folder = tmp_path / "gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__c-3.00__install-1"
    folder.mkdir()
    target = folder / "pydicom__pydicom-1458.traj"
    target.write_bytes(source.read_bytes())
    (record,) = [r for k, r in read_rows("swe-agent", [target]) if k == "record"]
    assert record["task_type"] == "swe-bench-dev-easy_first_only"
    assert record["model"] == "gpt4"
    (plain,) = [r for k, r in read_rows("swe-agent", [source]) if k == "record"]
    assert plain["task_type"] == "swe-agent"


def test_second_import_adds_nothing(swe_trajs, mini_trajs, db_path):
    first = import_paths("swe-agent", [*swe_trajs, *mini_trajs], db_path)
    second = import_paths("swe-agent", [*swe_trajs, *mini_trajs], db_path)
    assert first.new_runs == 14 and first.new_calls == first.calls > 0
    assert (second.new_calls, second.new_runs) == (0, 0)


def test_a_file_that_is_not_json_is_reported_and_the_rest_imported(realdata, tmp_path):
    broken = tmp_path / "broken.traj"
    broken.write_text('{"trajectory": [')
    good = realdata / "swe-agent-traj" / "test_data__pydicom__pydicom-1458.traj"
    from budgetlens.importers import ImportReport

    report = ImportReport()
    records = [r for k, r in read_rows("swe-agent", [broken, good], report=report) if k == "record"]
    assert len(records) == 1
    assert report.bad_lines[0].startswith(f"{broken}:1: invalid JSON")


def _mini_doc(
    usage: object,
    model: object = "gpt-4o",
    cost: object = 0.01,
    api_calls: object = 1,
    instance_cost: object = 0.01,
) -> dict:
    return {
        "info": {
            "exit_status": "Submitted",
            "model_stats": {"api_calls": api_calls, "instance_cost": instance_cost},
            "config": {"model": {"model_name": "gpt-4o"}},
        },
        "messages": [
            {
                "role": "assistant",
                "content": "ls",
                "extra": {"cost": cost, "response": {"id": "r1", "model": model, "usage": usage}},
            }
        ],
        "trajectory_format": "mini-swe-agent-1",
    }


@pytest.mark.parametrize(
    ("name", "doc", "reason"),
    [
        (
            "inf",
            _mini_doc({"prompt_tokens": 1e400, "completion_tokens": 1}),
            "messages[0].extra.response.usage",
        ),
        (
            "model-dict",
            _mini_doc({"prompt_tokens": 1, "completion_tokens": 1}, model={"x": 1}),
            "messages[0].extra.response.model must be a string, got dict",
        ),
        (
            "nan-cost",
            _mini_doc({"prompt_tokens": 1, "completion_tokens": 1}, cost=float("nan")),
            "messages[0].extra.cost must be a finite number >= 0, got nan",
        ),
        (
            "negative-instance-cost",
            _mini_doc({"prompt_tokens": 1, "completion_tokens": 1}, instance_cost=-1),
            "info.model_stats.instance_cost must be a finite number >= 0, got -1",
        ),
        (
            "huge-api-calls",
            _mini_doc({"prompt_tokens": 1, "completion_tokens": 1}, api_calls=10**30),
            "api_calls is not a plausible run",
        ),
    ],
)
@pytest.mark.system  # imports into a store: seconds
def test_a_malformed_trajectory_is_reported_and_the_next_file_imported(tmp_path, db_path, name, doc, reason):
    bad = tmp_path / f"{name}.traj.json"
    bad.write_text(json.dumps(doc))
    good = tmp_path / "good.traj.json"
    good.write_text(json.dumps(_mini_doc({"prompt_tokens": 10, "completion_tokens": 5})))
    report = import_paths("swe-agent", [bad, good], db_path)
    assert report.bad_line_count == 1 and report.bad_lines[0].startswith(f"{bad}: ")
    assert reason in report.bad_lines[0]
    runs = _runs(db_path)
    assert list(runs) == [_run_id("mini-swe-agent", good)]
    assert runs[_run_id("mini-swe-agent", good)]["input_tokens"] == 10


def test_swe_agent_nan_cost_or_infinite_tokens_reject_the_file(tmp_path):
    path = tmp_path / "run.traj"
    path.write_text(
        json.dumps(
            {
                "trajectory": [],
                "info": {
                    "model_stats": {"instance_cost": float("nan"), "tokens_sent": 10, "tokens_received": 5}
                },
            }
        )
    )
    other = tmp_path / "other.traj"
    other.write_text(
        json.dumps(
            {
                "trajectory": [],
                "info": {
                    "model_stats": {"instance_cost": 0.1, "tokens_sent": float("inf"), "tokens_received": 5}
                },
            }
        )
    )
    report = ImportReport()
    assert list(read_rows("swe-agent", [path, other], report=report)) == []
    assert report.bad_lines == [
        f"{path}: info.model_stats.instance_cost must be a finite number >= 0, got nan",
        f"{other}: info.model_stats.tokens_sent must be a finite number >= 0, got inf",
    ]
