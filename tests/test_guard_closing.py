"""What a run's end settles that no adapter did (issue 20): reservations never recorded are
charged as unknown usage in the result, the spans and the store; a budget stop wrapped by a
framework's own exception is still the run's stop; a call named only by its response model is
priced."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetlens import BudgetExceeded, RunBudget, TokenPool, Usage
from budgetlens import semconv as sc
from budgetlens.guard.closing import budget_cause


def test_reserve_then_finish_without_record_is_unknown_and_charged_the_reservation():
    pool = TokenPool(100_000)
    run = RunBudget(max_total_tokens=50_000, pool=pool)
    run.reserve(4_000)
    result = run.finish()
    assert (result.used_tokens, result.usage_status, result.turns) == (4_000, sc.USAGE_UNKNOWN, 1)
    assert result.usage == Usage() and result.cost_usd is None
    assert pool.used_tokens == 4_000 and pool.reserved_tokens == 0


def test_unrecorded_reservation_is_a_model_call_span_and_on_the_run_span():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run = RunBudget(max_total_tokens=50_000, tracer=provider.get_tracer("t"))
    run.reserve(4_000, "gpt-4o-mini")
    run.finish(error=TimeoutError("lost"))
    call, run_span = exporter.get_finished_spans()
    assert call.attributes[sc.BUDGET_USAGE_STATUS] == sc.USAGE_UNKNOWN
    assert (
        call.attributes[sc.BUDGET_USED_TOKENS] == 4_000 and call.attributes[sc.ERROR_TYPE] == "TimeoutError"
    )
    assert run_span.attributes[sc.BUDGET_USED_TOKENS] == 4_000
    assert run_span.attributes[sc.BUDGET_USAGE_STATUS] == sc.USAGE_UNKNOWN
    provider.shutdown()


@pytest.mark.system  # guard spans into a store: seconds
def test_unrecorded_reservation_is_stored_as_unknown_with_its_charge(db_path):
    from budgetlens.ingest.exporter import DuckDBSpanExporter
    from budgetlens.store import read_connection

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(db_path)))
    run = RunBudget(max_total_tokens=50_000, tracer=provider.get_tracer("t"))
    run.record(Usage(1_000, 100), "gpt-4o-mini", reservation=run.reserve(2_000, "gpt-4o-mini"))
    run.reserve(4_000, "gpt-4o-mini")
    run.finish()
    provider.shutdown()
    with read_connection(db_path) as conn:
        runs = conn.execute(
            "SELECT total_tokens, usage_status, turns, unknown_usage_calls FROM runs WHERE run_id = $r",
            {"r": run.run_id},
        ).fetchone()
        calls = conn.execute(
            "SELECT usage_status, reserved_tokens, used_tokens FROM model_calls WHERE run_id = $r"
            " ORDER BY used_tokens",
            {"r": run.run_id},
        ).fetchall()
    assert runs == (5_100, sc.USAGE_UNKNOWN, 2, 1)
    assert calls == [(sc.USAGE_REPORTED, 2_000, 1_100), (sc.USAGE_UNKNOWN, 4_000, 5_100)]


def test_a_refusal_after_an_open_reservation_stays_the_runs_stop():
    run = RunBudget(max_total_tokens=5_000)
    run.reserve(4_000)
    with pytest.raises(BudgetExceeded):
        run.reserve(2_000)
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_TOKENS and result.used_tokens == 4_000


class FrameworkError(Exception):
    """A framework's own error around a hook's refusal (Agents SDK UserError and the like)."""


def _wrapped(exc: BaseException, how: str) -> BaseException:
    try:
        try:
            raise exc
        except BudgetExceeded as inner:
            if how == "cause":
                raise FrameworkError("Error running tool") from inner
            if how == "context":
                raise FrameworkError("Error running tool")  # noqa: B904 - the implicit chain
            raise ExceptionGroup("tasks", [ValueError("other"), FrameworkError("x")]) from inner
    except BaseException as outer:
        return outer


@pytest.mark.parametrize("how", ["cause", "context", "group"])
def test_stop_reason_follows_the_cause_chain_out_of_a_with_block(how):
    refusal = BudgetExceeded(sc.STOP_BUDGET_TOOLS, 2, 2)
    error = _wrapped(refusal, how)
    assert budget_cause(error) is refusal
    with pytest.raises(type(error)), RunBudget(max_tool_calls=2) as run:
        raise error
    assert run.result.stop_reason == sc.STOP_BUDGET_TOOLS and run.result.retryable is False
    assert run.result.error_type is None


def test_an_exception_group_member_that_is_a_refusal_is_the_stop():
    group = ExceptionGroup("tasks", [ValueError("x"), BudgetExceeded(sc.STOP_BUDGET_TURNS, 3, 3)])
    assert budget_cause(group).reason == sc.STOP_BUDGET_TURNS
    assert RunBudget().finish(error=group).stop_reason == sc.STOP_BUDGET_TURNS


def test_other_errors_still_fail_and_cycles_end():
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert budget_cause(a) is None
    assert RunBudget().finish(error=a).stop_reason == sc.STOP_FAILED


def test_record_without_model_is_priced_by_the_response_model():
    run = RunBudget(max_total_tokens=50_000)
    run.record(Usage(1_000, 100), None, response_model="gpt-4o-mini")
    res = run.reserve(2_000)  # a reservation without a model either
    run.record(Usage(1_000, 100), reservation=res, response_model="gpt-4o-mini-2024-07-18")
    result = run.finish()
    assert result.cost_usd is not None and result.cost_usd > 0
    priced = RunBudget()
    priced.record(Usage(1_000, 100), "gpt-4o-mini")
    assert result.cost_usd == pytest.approx(2 * priced.finish().cost_usd)
