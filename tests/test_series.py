"""Bounded series: a cap on label combinations per metric family; quiet combinations give their
place to new ones; a junk flood never folds a task type that keeps sending into ``other``."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.series import SeriesCap

#: The run metrics' attribution labels of a run without team or service (issue 19).
_RUN_LABELS = {"team": "unknown", "service": "unknown"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _call(task: str, model: str) -> dict:
    return {
        "task_type": task,
        "response_model": model,
        "usage_status": "reported",
        "input_tokens": 100,
        "output_tokens": 20,
        "cost_usd": 0.001,
    }


def _run(task: str) -> dict:
    return {"task_type": task, "stop_reason": "completed", "total_tokens": 120}


def test_past_the_cap_new_combinations_fold_into_other_until_one_goes_quiet():
    clock = Clock()
    cap = SeriesCap(max_series=2, quiet_s=60, clock=clock)
    family = Counter("calls", "", ["task_type", "usage_status"], registry=CollectorRegistry())
    for values in (("a", "reported"), ("b", "reported")):
        family.labels(*cap.admit(family, values)).inc()
    assert cap.admit(family, ("c", "unknown")) == ("other", "unknown")  # fixed labels are kept
    clock.now += 30
    assert cap.admit(family, ("b", "reported")) == ("b", "reported")  # still sending
    clock.now += 40  # a: quiet for 70 s, b for 40 s
    assert cap.admit(family, ("c", "reported")) == ("c", "reported")
    assert [m.labels for m in family.collect()[0].samples if m.name == "calls_total"] == [
        {"task_type": "b", "usage_status": "reported"}
    ]  # a's series was removed; it comes back when a sends again
    assert cap.series(family) == 2


def test_a_bad_cap_is_refused():
    with pytest.raises(ValueError, match="max_series"):
        SeriesCap(0)
    with pytest.raises(ValueError, match="quiet_s"):
        SeriesCap(10, -1)


@pytest.mark.system  # a 2,500-series label flood scraped: seconds
def test_a_50_by_50_label_flood_leaves_real_task_types_visible_and_the_scrape_under_1_mb():
    clock = Clock()
    metrics = CollectorMetrics(CollectorRegistry(), series=SeriesCap(clock=clock))
    real = [("code_generation", "gpt-4o"), ("triage", "claude-sonnet-4")]
    metrics.observe_commit([_call(*pair) for pair in real], [], [_run(t) for t, _ in real])
    for task in range(50):
        for model in range(50):
            clock.now += 0.1
            junk = (f"junk-task-{task}", f"junk-model-{model}")
            metrics.observe_commit([_call(*junk)], [], [_run(junk[0])])
            if model % 10 == 0:  # the busy service keeps sending through the flood
                metrics.observe_commit([_call(*pair) for pair in real], [], [_run(t) for t, _ in real])
    scrape = generate_latest(metrics.registry)
    assert len(scrape) < 1_000_000, len(scrape)
    registry = metrics.registry
    for task, model in real:
        labels = {"task_type": task, "model": model, "usage_status": "reported"}
        assert registry.get_sample_value("budgetlens_model_calls_total", labels) == 1 + 250
        assert registry.get_sample_value(
            "budgetlens_runs_total", {"task_type": task, "stop_reason": "completed", **_RUN_LABELS}
        )
    assert registry.get_sample_value(
        "budgetlens_model_calls_total", {"task_type": "other", "model": "other", "usage_status": "reported"}
    )
    # the flood stops; an hour later a new task type gets a series of its own (not "other" for life)
    clock.now += 3601
    metrics.observe_commit([_call("summarize", "gpt-4o-mini")], [], [_run("summarize")])
    assert (
        registry.get_sample_value(
            "budgetlens_model_calls_total",
            {"task_type": "summarize", "model": "gpt-4o-mini", "usage_status": "reported"},
        )
        == 1
    )
    assert registry.get_sample_value(
        "budgetlens_runs_total", {"task_type": "summarize", "stop_reason": "completed", **_RUN_LABELS}
    )
