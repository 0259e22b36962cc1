"""One rule for a run id, in the guard and the collector (breaker round of 2026-12-03: a run id
of 300 characters or an int was accepted by ``RunBudget`` and the collector then refused every
span of the run with 400, so the agent's run was lost without a word to the caller)."""

from __future__ import annotations

import pytest
from _collector_helpers import SpanRecorder
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import SpanKind

from budgetlens import RunBudget
from budgetlens import semconv as sc
from budgetlens.limits import MAX_RUN_ID_CHARS, run_id_problem
from budgetlens.otlp.mapping import map_request

BAD = [
    ("r" * (MAX_RUN_ID_CHARS + 1), "at most 256 characters"),
    ("", "non-empty string"),
    ("   ", "not whitespace"),
    ("a\nb", "control characters"),
    ("a\x00b", "control characters"),
    ("tab\there", "control characters"),
]
GOOD = ["r" * MAX_RUN_ID_CHARS, "run-1", "ü-ß-日本", " padded ", "a b"]


def _mapped(run_id: str):
    recorder = SpanRecorder(service="svc")
    with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as span:
        span.set_attributes({"gen_ai.operation.name": "chat", sc.BUDGET_RUN_ID: run_id})
    return map_request(encode_spans(recorder.spans()), price=False)


@pytest.mark.parametrize(("run_id", "rule"), BAD)
def test_a_run_id_the_collector_refuses_is_refused_by_the_guard_naming_the_rule(run_id, rule):
    with pytest.raises(ValueError, match=f"run_id must be .*{rule}"):
        RunBudget(run_id=run_id, max_total_tokens=100)
    mapped = _mapped(run_id)
    assert mapped.rejected == 1 and f"{sc.BUDGET_RUN_ID} must be" in mapped.errors[0]
    assert rule in mapped.errors[0]


def test_a_run_id_that_is_not_a_string_is_refused_by_the_guard():
    with pytest.raises(ValueError, match="run_id must be a non-empty string"):
        RunBudget(run_id=12345, max_total_tokens=100)  # type: ignore[arg-type]
    assert run_id_problem(12345) and run_id_problem(b"run") and run_id_problem(None)


@pytest.mark.parametrize("run_id", GOOD)
def test_a_run_id_the_guard_accepts_is_stored_by_the_collector(run_id):
    assert RunBudget(run_id=run_id, max_total_tokens=100).run_id == run_id
    mapped = _mapped(run_id)
    assert mapped.rejected == 0 and [c["run_id"] for c in mapped.calls] == [run_id]
