"""Prometheus metrics: counted from committed rows, bounded labels, clean exposition."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from _collector_helpers import SpanRecorder
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry, generate_latest

from budgetlens import semconv as sc
from budgetlens.ingest.metrics import TOKEN_BUCKETS, CollectorMetrics, LabelCap
from budgetlens.ingest.queue import IngestQueue
from budgetlens.otlp.mapping import map_request

#: The run metrics' attribution labels of a run without a team, from the recorder's service.
_NO_TEAM = {"team": "unknown", "service": "agent-service"}


def _commit(db_path, metrics, spans):
    queue = IngestQueue(db_path, metrics=metrics).start()
    queue.submit(map_request(encode_spans(spans))).result(30)
    queue.close()


@pytest.mark.system  # store writes: seconds
def test_budget_metrics_count_committed_runs_calls_tokens_and_hits(db_path):
    metrics = CollectorMetrics(CollectorRegistry())
    recorder = SpanRecorder()
    recorder.guard_run("r1", "triage", [("gpt-4o", 100, 20)], warnings=1)
    recorder.guard_run("r2", "triage", [("gpt-4o", 300, 80)], stop_reason=sc.STOP_BUDGET_TOKENS)
    _commit(db_path, metrics, recorder.spans())
    value = metrics.registry.get_sample_value
    assert (
        value("budgetlens_runs_total", {"task_type": "triage", "stop_reason": "completed", **_NO_TEAM}) == 1
    )
    assert (
        value(
            "budgetlens_budget_hits_total",
            {"task_type": "triage", "stop_reason": "budget_tokens", **_NO_TEAM},
        )
        == 1
    )
    assert (
        value("budgetlens_tokens_total", {"task_type": "triage", "model": "gpt-4o", "token_type": "input"})
        == 400
    )
    assert value("budgetlens_cost_usd_total", {"task_type": "triage", "model": "gpt-4o"}) == pytest.approx(
        500e-6
    )
    assert value("budgetlens_interventions_total", {"task_type": "triage", "kind": "warning"}) == 1
    assert value("budgetlens_run_tokens_count", {"task_type": "triage", **_NO_TEAM}) == 2
    assert value("budgetlens_run_tokens_bucket", {"task_type": "triage", "le": "200.0", **_NO_TEAM}) == 1
    assert value("budgetlens_commit_duration_seconds_count") == 1


@pytest.mark.system  # many runs into a store: seconds
def test_budgeted_runs_count_only_runs_under_a_budget_by_a_capped_service(db_path):
    # three combinations per family (issue 23's cap on label combinations, not on values per label)
    metrics = CollectorMetrics(CollectorRegistry(), max_series=3)
    recorder = SpanRecorder(service="triage-bot")
    recorder.guard_run("r1", "triage", [("gpt-4o", 100, 20)])
    recorder.guard_run("r2", "triage", [("gpt-4o", 300, 80)], stop_reason=sc.STOP_BUDGET_TOKENS)
    recorder.guard_run("r3", "triage", [("gpt-4o", 30, 8)], limit_total_tokens=None)  # no budget
    second = SpanRecorder(service="second-service")
    second.guard_run("r4", "triage", [("gpt-4o", 10, 2)])
    third = SpanRecorder(service="third-service")  # a fourth combination: folds into other
    third.guard_run("r5", "triage", [("gpt-4o", 10, 2)])
    _commit(db_path, metrics, recorder.spans())
    _commit(db_path, metrics, second.spans())
    _commit(db_path, metrics, third.spans())
    value = metrics.registry.get_sample_value
    budgeted = "budgetlens_budgeted_runs_total"
    assert (
        value(
            budgeted,
            {"task_type": "triage", "service": "triage-bot", "stop_reason": "completed", "team": "unknown"},
        )
        == 1
    )
    assert (
        value(
            budgeted,
            {
                "task_type": "triage",
                "service": "triage-bot",
                "stop_reason": "budget_tokens",
                "team": "unknown",
            },
        )
        == 1
    )
    assert (
        value(
            budgeted, {"task_type": "other", "service": "other", "stop_reason": "completed", "team": "other"}
        )
        == 1
    )
    assert (
        value(
            budgeted,
            {
                "task_type": "triage",
                "service": "second-service",
                "stop_reason": "completed",
                "team": "unknown",
            },
        )
        == 1
    )
    runs = [
        sample.value
        for family in metrics.registry.collect()
        if family.name == "budgetlens_runs"
        for sample in family.samples
        if sample.name == "budgetlens_runs_total" and sample.labels["stop_reason"] == "completed"
    ]
    assert sum(runs) == 4  # every finished run, whatever series the cap put it in


def test_budgeted_runs_carry_the_team_so_promql_gets_a_hit_rate_per_team():
    metrics = CollectorMetrics(CollectorRegistry())
    limit = {"limit_total_tokens": 1000}
    runs = [
        {"task_type": "qa", "stop_reason": "completed", "team": "infra", "service_name": "s", **limit},
        {"task_type": "qa", "stop_reason": "budget_tokens", "team": "infra", "service_name": "s", **limit},
        {"task_type": "qa", "stop_reason": "completed", "team": "search", "service_name": "s", **limit},
        {"task_type": "qa", "stop_reason": "completed", "team": "search", "service_name": "s"},  # no budget
    ]
    metrics.observe_commit([], [], runs)

    def per_team(name: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for family in metrics.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    out[sample.labels["team"]] = out.get(sample.labels["team"], 0) + sample.value
        return out

    hits, budgeted = per_team("budgetlens_budget_hits_total"), per_team("budgetlens_budgeted_runs_total")
    assert budgeted == {"infra": 2, "search": 1}
    assert {team: hits.get(team, 0) / n for team, n in budgeted.items()} == {"infra": 0.5, "search": 0.0}


@pytest.mark.system  # store writes: seconds
def test_a_resent_batch_does_not_count_twice(db_path):
    metrics = CollectorMetrics(CollectorRegistry())
    recorder = SpanRecorder()
    recorder.guard_run("r1", "triage", [("gpt-4o", 100, 20)])
    _commit(db_path, metrics, recorder.spans())
    _commit(db_path, metrics, recorder.spans())
    assert (
        metrics.registry.get_sample_value(
            "budgetlens_runs_total", {"task_type": "triage", "stop_reason": "completed", **_NO_TEAM}
        )
        == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "budgetlens_model_calls_total",
            {"task_type": "triage", "model": "gpt-4o", "usage_status": "reported"},
        )
        == 1
    )


@pytest.mark.system  # store writes past the cap: seconds
def test_label_values_past_the_cap_fold_into_other_and_run_ids_are_never_labels(db_path):
    metrics = CollectorMetrics(CollectorRegistry(), max_series=2)
    recorder = SpanRecorder()
    for index in range(4):
        recorder.guard_run(f"run-{index}", f"task-{index}", [("gpt-4o", 10, 1)])
    _commit(db_path, metrics, recorder.spans())
    text = generate_latest(metrics.registry).decode()
    assert 'task_type="task-0"' in text and 'task_type="task-1"' in text
    assert 'task_type="task-2"' not in text and 'task_type="other"' in text
    assert "run-0" not in text and "run_id" not in text
    assert (
        metrics.registry.get_sample_value(
            # past the cap every label from the wire folds (task type, team, service)
            "budgetlens_runs_total",
            {"task_type": "other", "stop_reason": "completed", "team": "other", "service": "other"},
        )
        == 2
    )


def test_label_cap_maps_empty_to_unknown_and_long_values_to_other():
    cap = LabelCap()
    assert cap("model", None) == "unknown" and cap("model", "a") == "a" and cap("model", "b") == "b"
    assert cap("model", "x" * 101) == "other"
    with pytest.raises(ValueError, match="max_series must be >= 1"):
        CollectorMetrics(CollectorRegistry(), max_series=0)


def test_token_buckets_are_one_two_five_per_decade_and_bounded():
    assert TOKEN_BUCKETS[:4] == (100.0, 200.0, 500.0, 1000.0) and TOKEN_BUCKETS[-1] == 5e7
    assert len(TOKEN_BUCKETS) == 18
    assert all(b / a <= 2.5 for a, b in zip(TOKEN_BUCKETS, TOKEN_BUCKETS[1:], strict=False))


@pytest.mark.prometheus
def test_promtool_finds_the_exposition_clean(db_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by .ci/test (Debian package prometheus)"
    metrics = CollectorMetrics(CollectorRegistry())
    recorder = SpanRecorder()
    recorder.guard_run("r1", "triage", [("gpt-4o", 100, 20)], warnings=1)
    _commit(db_path, metrics, recorder.spans())
    metrics.observe_received(3, 1)
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=generate_latest(metrics.registry),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == ""
