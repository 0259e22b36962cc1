"""The wrap-up slice (issue 21 item 1): a share of the budget kept for one final call."""

from __future__ import annotations

import pytest

from budgetlens import Action, BudgetExceeded, RunBudget
from budgetlens import semconv as sc
from budgetlens.usage import Usage


def _call(run, tokens, usage, **kwargs):
    res = run.reserve(tokens, **kwargs)
    return run.record(usage, reservation=res)


def test_the_slice_is_kept_for_one_final_call_and_the_run_stops_after_it():
    events = []
    run = RunBudget(max_total_tokens=10_000, wrap_up_tokens=2_000, on_event=events.append)
    # ordinary room: 10,000 - 2,000 = 8,000 tokens
    assert _call(run, 3_000, Usage(2_500, 500)) == Action.CONTINUE  # used 3,000; next 3,000 fits
    assert run.output_budget() == 5_000 and run.output_budget(final=True) == 7_000
    # used 6,000: the next call (the largest so far, 3,000) would reach 9,000 > 8,000
    assert _call(run, 3_000, Usage(2_500, 500)) == Action.WRAP_UP
    assert run.before_turn() == Action.WRAP_UP and Action.WRAP_UP in run.last_actions
    assert run.wrap_up_due(3_000) and not run.wrap_up_due(1_500)  # 6,000 + 1,500 = 7,500 fits
    assert run.output_budget() == 2_000 and run.output_budget(final=True) == 4_000
    with pytest.raises(BudgetExceeded) as refused:
        run.reserve(3_000)  # an ordinary call may not use the slice
    assert refused.value.reason == sc.STOP_BUDGET_TOKENS and refused.value.limit == 8_000
    final = run.reserve(3_500, output_tokens=1_000, final=True)  # 6,000 + 3,500 = 9,500 <= 10,000
    assert [e.name for e in events][-1] == sc.EVENT_WRAP_UP
    assert run.record(Usage(2_600, 400), reservation=final) == Action.STOP
    with pytest.raises(BudgetExceeded) as after:
        run.before_turn()
    assert after.value.reason == sc.STOP_BUDGET_WRAP_UP
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_WRAP_UP and result.used_tokens == 9_000
    assert sc.STOP_BUDGET_WRAP_UP in sc.BUDGET_STOP_REASONS  # a budget stop for the hit rate


def test_finish_right_after_the_final_call_is_a_wrap_up_stop_and_a_failed_send_may_retry():
    run = RunBudget(max_total_tokens=1_000, wrap_up_tokens=300)
    final = run.reserve(200, final=True)
    run.release(final)  # the API refused it: nothing was generated, the slice is still there
    final = run.reserve(200, final=True)
    with pytest.raises(ValueError, match="unused wrap-up slice"):
        run.reserve(100, final=True)  # one final call per run
    run.record(Usage(150, 50), reservation=final)
    assert run.finish().stop_reason == sc.STOP_BUDGET_WRAP_UP


def test_the_cost_slice_counts_the_calls_cost():
    run = RunBudget(max_cost_usd=0.01, wrap_up_usd=0.002, model_chain=["gpt-4o-mini"], provider="openai")
    # gpt-4o-mini input: $0.15 per million tokens; 40,000 tokens cost $0.006 of the $0.008 ordinary room
    assert _call(run, 40_000, Usage(40_000, 0), output_tokens=0) == Action.WRAP_UP  # next: $0.012
    assert not run.wrap_up_due(10_000)  # $0.006 + $0.0015 = $0.0075 <= $0.008
    assert run.wrap_up_due(20_000)  # $0.006 + $0.003 = $0.009 > $0.008


def test_without_a_slice_nothing_changes_and_bad_slices_are_refused():
    run = RunBudget(max_total_tokens=1_000)
    assert not run.wrap_up_due(5_000)
    with pytest.raises(ValueError, match="unused wrap-up slice"):
        run.reserve(10, final=True)
    with pytest.raises(ValueError, match="wrap_up_tokens must be below max_total_tokens"):
        RunBudget(max_total_tokens=1_000, wrap_up_tokens=1_000)
    with pytest.raises(ValueError, match="wrap_up_usd must be a finite number >= 0"):
        RunBudget(max_cost_usd=1.0, wrap_up_usd=-1)


def test_a_preset_carries_its_wrap_up_slice(tmp_path):
    path = tmp_path / "presets.json"
    path.write_text(
        '{"budgetlens_presets": 1, "presets": {"qa": {"max_total_tokens": 10000, "wrap_up_tokens": 1500}}}'
    )
    run = RunBudget.from_preset("qa", str(path))
    assert run.options.wrap_up_tokens == 1_500 and run.output_budget() == 8_500


def test_final_request_removes_tools_and_adds_the_instruction_per_request_shape():
    from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION, final_request

    tools = [{"type": "function", "function": {"name": "read"}}]
    chat = {"messages": [{"role": "user", "content": "Fix it"}], "tools": tools, "tool_choice": "auto"}
    final_request(chat, "max_completion_tokens")
    assert "tools" not in chat and "tool_choice" not in chat
    assert chat["messages"][-1] == {"role": "user", "content": WRAP_UP_INSTRUCTION}
    responses = {"input": "Fix it", "instructions": "Be brief.", "tools": tools}
    final_request(responses, "max_output_tokens")
    assert "tools" not in responses and responses["instructions"] == "Be brief.\n\n" + WRAP_UP_INSTRUCTION
    # Anthropic: a history with tool blocks keeps the definitions (the API needs them), choice none;
    # the instruction joins the last user turn (turns alternate)
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    history = [
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
        {"role": "user", "content": [result]},
    ]
    anthropic = {"messages": history, "tools": [{"name": "read"}]}
    final_request(anthropic, "max_tokens")
    assert anthropic["tool_choice"] == {"type": "none"} and anthropic["tools"] == [{"name": "read"}]
    assert anthropic["messages"][-1]["content"] == [result, {"type": "text", "text": WRAP_UP_INSTRUCTION}]
    assert history[-1]["content"] == [result]  # the caller's messages are not changed
    plain = {"messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "read"}]}
    final_request(plain, "max_tokens")
    assert "tools" not in plain
    assert plain["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": WRAP_UP_INSTRUCTION}],
        }
    ]


@pytest.mark.system  # guard runs through the SDK into a store: seconds
def test_hit_rate_counts_wrap_up_stops_and_the_share_that_answered(db_path):
    from _collector_helpers import SpanRecorder
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from budgetlens import DuckDBSpanExporter
    from budgetlens.analysis.views import Filters, hit_rate_by_task, hit_rate_daily
    from budgetlens.store import read_connection

    recorder = SpanRecorder()
    recorder.provider.add_span_processor(SimpleSpanProcessor(DuckDBSpanExporter(db_path)))
    stops = [sc.STOP_COMPLETED, sc.STOP_BUDGET_TOKENS, sc.STOP_BUDGET_WRAP_UP, sc.STOP_BUDGET_WRAP_UP]
    for index, stop in enumerate(stops):
        recorder.guard_run(f"r{index}", "qa", [("gpt-4o-mini", 100, 10)], stop_reason=stop)
    recorder.provider.shutdown()
    with read_connection(db_path) as conn:
        row = hit_rate_by_task(conn, Filters()).iloc[0]
        daily = hit_rate_daily(conn, Filters())
    # 3 budget stops of 4 budgeted runs; 2 of the 3 still answered
    assert (row["budget_stops"], row["answered_stops"]) == (3, 2)
    assert row["hit_rate"] == pytest.approx(3 / 4) and row["answered_share"] == pytest.approx(2 / 3)
    assert int(daily["answered_stops"].sum()) == 2
