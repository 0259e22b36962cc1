"""The guard's spans and span events (design §4) through the real OpenTelemetry SDK."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import budgetlens
from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens import semconv as sc

SEMCONV_NAMES = {v for k, v in vars(sc).items() if k.isupper() and isinstance(v, str)}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def test_run_and_model_call_spans_follow_the_contract(spans):
    tracer, exporter = spans
    run = RunBudget(
        max_total_tokens=10_000,
        max_turns=5,
        task_type="qa",
        agent_name="helper",
        provider="openai",
        tracer=tracer,
    )
    res = run.reserve(2_000)
    run.record(
        {
            "prompt_tokens": 1_500,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1_000},
            "completion_tokens_details": {"reasoning_tokens": 100},
        },
        model="gpt-4o",
        reservation=res,
        response_model="gpt-4o-2024-08-06",
    )
    run.before_tool_call("search")
    run.finish()
    call_span, run_span = exporter.get_finished_spans()

    assert run_span.name == "invoke_agent qa" and run_span.kind == SpanKind.INTERNAL
    attrs = run_span.attributes
    assert attrs[sc.GEN_AI_OPERATION_NAME] == sc.OPERATION_INVOKE_AGENT
    assert attrs[sc.BUDGET_RUN_ID] == run.run_id and attrs[sc.GEN_AI_AGENT_NAME] == "helper"
    assert attrs[sc.BUDGET_LIMIT_TOTAL_TOKENS] == 10_000 and attrs[sc.BUDGET_LIMIT_TURNS] == 5
    assert (attrs[sc.BUDGET_TURNS], attrs[sc.BUDGET_TOOL_CALLS], attrs[sc.BUDGET_USED_TOKENS]) == (
        1,
        1,
        1_800,
    )
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 1_000
    assert attrs[sc.BUDGET_STOP_REASON] == sc.STOP_COMPLETED
    assert attrs[sc.BUDGET_USAGE_STATUS] == sc.USAGE_REPORTED and attrs[sc.BUDGET_RETRYABLE] is False
    assert attrs[sc.BUDGET_COST_USD] > 0

    assert call_span.name == "chat gpt-4o" and call_span.kind == SpanKind.CLIENT
    assert call_span.parent.span_id == run_span.context.span_id
    c = call_span.attributes
    assert c[sc.GEN_AI_PROVIDER_NAME] == "openai" and c[sc.GEN_AI_RESPONSE_MODEL] == "gpt-4o-2024-08-06"
    assert (c[sc.GEN_AI_USAGE_INPUT_TOKENS], c[sc.GEN_AI_USAGE_OUTPUT_TOKENS]) == (1_500, 300)
    assert c[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 100
    assert (c[sc.BUDGET_TURN], c[sc.BUDGET_RESERVED_TOKENS], c[sc.BUDGET_USED_TOKENS]) == (1, 2_000, 1_800)
    assert c[sc.BUDGET_REMAINING_TOKENS] == 8_200

    assert [e.name for e in run_span.events] == [sc.EVENT_TOOL_CALL]
    assert run_span.events[0].attributes[sc.GEN_AI_TOOL_NAME] == "search"
    for span in (run_span, call_span):
        assert set(span.attributes) <= SEMCONV_NAMES
        for event in span.events:
            assert set(event.attributes) <= SEMCONV_NAMES


def test_unpriced_and_unknown_calls_omit_cost_and_mark_usage_unknown(spans):
    tracer, exporter = spans
    run = RunBudget(tracer=tracer)
    run.record(Usage(10, 1), model="no-such-model", reservation=run.reserve(100))
    run.record(None, model="gpt-4o", reservation=run.reserve(500), error_type="TimeoutError")
    result = run.finish()
    unpriced, unknown, run_span = exporter.get_finished_spans()
    assert sc.BUDGET_COST_USD not in unpriced.attributes
    assert unknown.attributes[sc.BUDGET_USAGE_STATUS] == sc.USAGE_UNKNOWN
    assert unknown.attributes[sc.ERROR_TYPE] == "TimeoutError"
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in unknown.attributes
    assert sc.BUDGET_COST_USD not in run_span.attributes and result.cost_usd is None
    assert run_span.attributes[sc.BUDGET_USAGE_STATUS] == sc.USAGE_UNKNOWN


def test_failed_run_span_has_error_status(spans):
    tracer, exporter = spans
    with pytest.raises(ValueError), RunBudget(tracer=tracer):
        raise ValueError("tool crashed")
    (run_span,) = exporter.get_finished_spans()
    assert run_span.status.status_code == StatusCode.ERROR
    assert run_span.attributes[sc.BUDGET_STOP_REASON] == sc.STOP_FAILED


def test_threshold_events_carry_used_remaining_percent_and_models(spans):
    tracer, exporter = spans
    run = RunBudget(max_total_tokens=1_000, model_chain=("big", "small"), tracer=tracer)
    run.record(Usage(900, 0), reservation=run.reserve(0))
    with pytest.raises(BudgetExceeded):
        run.reserve(200)
    run.finish()
    run_span = exporter.get_finished_spans()[-1]
    names = [e.name for e in run_span.events]
    assert names == [sc.EVENT_WARNING, sc.EVENT_DOWNGRADE, sc.EVENT_SUMMARIZE, sc.EVENT_STOP]
    downgrade = run_span.events[1].attributes
    assert (downgrade[sc.BUDGET_FROM_MODEL], downgrade[sc.BUDGET_TO_MODEL]) == ("big", "small")
    stop = run_span.events[3].attributes
    assert (stop[sc.BUDGET_REASON], stop[sc.BUDGET_USED_TOKENS], stop[sc.BUDGET_PERCENT]) == (
        sc.STOP_BUDGET_TOKENS,
        900,
        90.0,
    )
    assert stop[sc.BUDGET_REMAINING_TOKENS] == 100
    assert run_span.attributes[sc.BUDGET_STOP_REASON] == sc.STOP_BUDGET_TOKENS


def test_no_prompt_or_completion_content_reaches_spans(spans):
    tracer, exporter = spans
    run = RunBudget(tracer=tracer)
    response = {
        "id": "chatcmpl-1",
        "choices": [{"message": {"content": "SECRET-COMPLETION"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    run.record(response, model="gpt-4o", reservation=run.reserve(10))
    run.before_tool_call("bash")
    run.finish()
    for span in exporter.get_finished_spans():
        values = list(span.attributes.values()) + [v for e in span.events for v in e.attributes.values()]
        assert not any("SECRET" in str(v) for v in values)


def test_without_sdk_the_guard_emits_nothing_and_still_works():
    run = RunBudget()
    assert not run.span.is_recording()
    run.record(Usage(5, 5), reservation=run.reserve(10))
    assert run.finish().used_tokens == 10


def test_every_public_name_imports_from_budgetlens():
    for name in budgetlens.__all__:
        assert getattr(budgetlens, name) is not None


# --- never $0, never 0 tokens in place of unknown: through the real exporter into DuckDB ------------
GPT_4O_1000_100 = 1_000 * 2.5e-6 + 100 * 1e-5  # gpt-4o: 2.5 / 10 USD per Mtok


def _unknown_private(run):
    run.record(None, model="my-private-llm", reservation=run.reserve(3_000, model="my-private-llm"))


def _unknown_priced(run):
    run.record(None, model="gpt-4o", reservation=run.reserve(3_000, model="gpt-4o"))


def _unpriced_model(run):
    run.record(Usage(1_000, 100), model="my-private-llm", reservation=run.reserve(2_000))


def _priced_then_unpriced(run):
    run.record(Usage(1_000, 100), model="gpt-4o", reservation=run.reserve(2_000))
    _unpriced_model(run)


def _priced_then_unknown(run):
    run.record(Usage(1_000, 100), model="gpt-4o", reservation=run.reserve(2_000))
    run.record(None, model="gpt-4o", reservation=run.reserve(3_000))


# steps, then the runs row: cost_usd, input, output, total tokens, usage_status, unpriced_calls
STORED_RUNS = [
    (_unknown_private, None, None, None, 3_000, sc.USAGE_UNKNOWN, 0),
    (_unknown_priced, None, None, None, 3_000, sc.USAGE_UNKNOWN, 0),
    (_unpriced_model, None, 1_000, 100, 1_100, sc.USAGE_REPORTED, 1),
    (_priced_then_unpriced, GPT_4O_1000_100, 2_000, 200, 2_200, sc.USAGE_REPORTED, 1),
    (_priced_then_unknown, GPT_4O_1000_100, 1_000, 100, 4_100, sc.USAGE_UNKNOWN, 0),
]


@pytest.mark.parametrize(
    "steps, cost, inp, out, total, status, unpriced",
    STORED_RUNS,
    ids=[row[0].__name__.strip("_") for row in STORED_RUNS],
)
@pytest.mark.system  # guard spans through the mapping into a store: seconds
def test_stored_run_is_never_zero_where_cost_or_usage_is_unknown(
    db_path, steps, cost, inp, out, total, status, unpriced
):
    from budgetlens.ingest.exporter import DuckDBSpanExporter
    from budgetlens.store import read_connection

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(db_path)))
    run = RunBudget(tracer=provider.get_tracer("test"))
    steps(run)
    result = run.finish()
    provider.shutdown()
    with read_connection(db_path) as conn:
        row = conn.execute(
            "SELECT cost_usd, input_tokens, output_tokens, total_tokens, usage_status, "
            "unpriced_calls FROM runs WHERE run_id = $run_id",
            {"run_id": run.run_id},
        ).fetchone()
    assert row[1:] == (inp, out, total, status, unpriced)
    assert row[0] == (None if cost is None else pytest.approx(cost))
    assert result.cost_usd == row[0] and result.usage_status == status


def test_run_span_omits_usage_totals_and_cost_when_no_call_reported_usage(spans):
    tracer, exporter = spans
    run = RunBudget(tracer=tracer)
    _unknown_private(run)
    result = run.finish()
    run_span = exporter.get_finished_spans()[-1].attributes
    assert result.cost_usd is None and sc.BUDGET_COST_USD not in run_span
    assert not {
        sc.GEN_AI_USAGE_INPUT_TOKENS,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    } & set(run_span)
    assert run_span[sc.BUDGET_USED_TOKENS] == 3_000
    assert run_span[sc.BUDGET_USAGE_STATUS] == sc.USAGE_UNKNOWN


def test_run_without_model_calls_reports_zero_tokens_and_cost(spans):
    tracer, exporter = spans
    result = RunBudget(tracer=tracer).finish()
    (run_span,) = exporter.get_finished_spans()
    assert result.cost_usd == 0.0 and run_span.attributes[sc.BUDGET_COST_USD] == 0.0
    assert run_span.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] == 0


def test_cost_limit_on_unpriced_model_emits_one_cost_unenforced_warning_per_model(spans):
    tracer, exporter = spans
    run = RunBudget(max_cost_usd=0.01, tracer=tracer)
    for model in ("my-model", "my-model", "other-private-model"):
        run.record(Usage(1_000, 1_000), model=model, reservation=run.reserve(2_000))
    run.finish()
    events = [e for e in exporter.get_finished_spans()[-1].events if e.name == sc.EVENT_WARNING]
    assert [(e.attributes[sc.BUDGET_REASON], e.attributes[sc.GEN_AI_REQUEST_MODEL]) for e in events] == [
        (sc.REASON_COST_UNENFORCED, "my-model"),
        (sc.REASON_COST_UNENFORCED, "other-private-model"),
    ]
    for event in events:
        assert set(event.attributes) <= SEMCONV_NAMES


def test_recovered_refusal_keeps_its_stop_event_but_the_run_completes(spans):
    tracer, exporter = spans
    run = RunBudget(max_total_tokens=5_000, tracer=tracer)
    with pytest.raises(BudgetExceeded):
        run.reserve(6_000)
    run.record(Usage(1_000, 200), reservation=run.reserve(2_000))
    run.finish()
    run_span = exporter.get_finished_spans()[-1]
    assert [e.name for e in run_span.events] == [sc.EVENT_STOP]
    assert run_span.attributes[sc.BUDGET_STOP_REASON] == sc.STOP_COMPLETED
