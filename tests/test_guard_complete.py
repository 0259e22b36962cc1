"""The guard's remaining behaviours (issue 13): findings 1-8, each as users of a guard expect."""

from __future__ import annotations

import contextlib
import threading

import pytest
import yaml

from budgetlens import Action, BudgetExceeded, RunBudget, TokenPool, Usage
from budgetlens.guard.compress import SUMMARY_PREFIX, compress_messages, split_for_summary
from budgetlens.limits import LIMIT_KEYS, LIMITS, WHOLE_NUMBER_LIMITS
from budgetlens.semconv import (
    EVENT_ALERT,
    EVENT_LIMIT_CHANGED,
    STOP_BUDGET_TOKENS,
    STOP_BUDGET_TURNS,
    STOP_COMPLETED,
    STOP_FAILED,
)


def call(run: RunBudget, input_tokens: int, output_tokens: int = 0) -> Action:
    run.before_turn()
    res = run.reserve(0)
    return run.record(Usage(input_tokens, output_tokens), reservation=res)


# --- 1. a warning is never hidden -------------------------------------------------------------
def test_one_call_from_0_to_90_percent_shows_the_warning():
    run = RunBudget(max_total_tokens=10_000)
    action = call(run, 9_000)
    assert action is Action.SUMMARIZE
    assert action >= Action.WARN  # severity order, not the strings' order
    assert Action.WARN in run.last_actions
    assert run.last_actions == (Action.WARN, Action.SUMMARIZE)  # no chain: no downgrade


def test_actions_order_by_severity():
    assert sorted([Action.STOP, Action.CONTINUE, Action.SUMMARIZE, Action.WARN, Action.DOWNGRADE]) == [
        Action.CONTINUE,
        Action.WARN,
        Action.DOWNGRADE,
        Action.SUMMARIZE,
        Action.STOP,
    ]


# --- 2. before_turn returns DOWNGRADE -----------------------------------------------------------
def test_before_turn_reports_the_downgrade_once_after_the_model_moved():
    run = RunBudget(max_total_tokens=10_000, model_chain=["big", "small"])
    assert call(run, 6_500) is Action.DOWNGRADE
    assert run.model == "small"
    assert run.before_turn() is Action.DOWNGRADE
    assert run.before_turn() is Action.CONTINUE


def test_lowering_a_limit_crosses_thresholds_at_the_next_turn():
    run = RunBudget(max_total_tokens=100_000, model_chain=["big", "small"])
    call(run, 6_500)
    run.set_max(max_total_tokens=10_000)
    assert run.before_turn() is Action.DOWNGRADE
    assert run.last_actions == (Action.DOWNGRADE,) and run.model == "small"


# --- 3. retryable: by cause, and settable ------------------------------------------------------
def test_turn_stop_after_unknown_usage_is_not_retryable():
    run = RunBudget(max_turns=2, unknown_usage="residual", unknown_usage_residual_tokens=50_000)
    res = run.reserve(1_000)
    run.record(None, reservation=res)  # usage unknown
    call(run, 100)
    with pytest.raises(BudgetExceeded):
        run.before_turn()
    result = run.finish()
    assert (result.stop_reason, result.usage_status, result.retryable) == (
        STOP_BUDGET_TURNS,
        "unknown",
        False,
    )


def test_stop_by_the_unknown_usage_policy_is_retryable():
    run = RunBudget(max_total_tokens=10_000)
    run.record(None, reservation=run.reserve(1_000))
    with pytest.raises(BudgetExceeded):
        run.reserve(100)
    result = run.finish()
    assert (result.stop_reason, result.retryable) == (STOP_BUDGET_TOKENS, True)


def test_caller_sets_retryable_by_argument_or_policy():
    assert RunBudget().finish(STOP_FAILED, retryable=False).retryable is False
    policy = RunBudget(retry_policy=lambda result: result.stop_reason == STOP_COMPLETED)
    assert policy.finish().retryable is True
    with pytest.raises(ValueError, match="retryable"):
        RunBudget().finish(retryable="yes")


# --- 4. external effects -----------------------------------------------------------------------
def test_run_interrupted_during_an_unconfirmed_write_names_it_and_is_not_retryable():
    run = RunBudget()
    with pytest.raises(RuntimeError), run, run.external_effect("send_mail"):
        raise RuntimeError("connection reset")  # did the mail go out? unknown
    result = run.result
    assert result.stop_reason == STOP_FAILED
    assert result.unconfirmed_effects == ("send_mail",) and result.retryable is False


def test_confirmed_effects_leave_the_failure_retryable():
    run = RunBudget()
    effect = run.before_tool_call("git_push", external_effect=True)
    run.confirm_effect(effect)
    with run.external_effect("send_mail"):
        pass
    result = run.finish(error=TimeoutError())
    assert result.unconfirmed_effects == () and result.retryable is True
    with pytest.raises(ValueError, match="not open"):
        run.confirm_effect(effect)


# --- 5. raising a limit leaves a trace ---------------------------------------------------------
def test_set_max_records_who_changed_what_from_what_to_what_and_when():
    events = []
    run = RunBudget(max_total_tokens=10_000, on_event=events.append)
    run.set_max(max_total_tokens=20_000, max_turns=5, changed_by="alice")
    changes = run.limit_changes
    assert [(c.limit, c.previous, c.new, c.changed_by) for c in changes] == [
        ("max_total_tokens", 10_000, 20_000, "alice"),
        ("max_turns", None, 5, "alice"),
    ]
    assert changes[0].ts_utc.tzinfo is not None
    changed = [e for e in events if e.name == EVENT_LIMIT_CHANGED]
    assert [(e.reason, e.previous_limit, e.new_limit, e.changed_by) for e in changed] == [
        ("max_total_tokens", 10_000, 20_000, "alice"),
        ("max_turns", None, 5, "alice"),
    ]
    run.set_max(max_total_tokens=20_000)  # no change, no trace
    assert len(run.limit_changes) == 2


# --- 6. helpers --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "limits, used_in, used_out, reserved, ceiling, expected",
    [
        ({"max_output_tokens": 4_000, "max_total_tokens": 100_000}, 1_000, 1_500, 0, None, 2_500),
        ({"max_output_tokens": 4_000, "max_total_tokens": 10_000}, 8_000, 500, 0, None, 1_500),
        ({"max_output_tokens": 4_000, "max_total_tokens": 10_000}, 1_000, 0, 2_000, 1_024, 1_024),
        ({"max_total_tokens": 10_000}, 9_000, 1_500, 0, None, 0),  # overshoot: never negative
        ({"max_turns": 3}, 0, 0, 0, None, None),
        ({"max_turns": 3}, 0, 0, 0, 8_192, 8_192),
    ],
)
def test_output_budget_is_the_least_of_output_left_total_left_and_ceiling(
    limits, used_in, used_out, reserved, ceiling, expected
):
    run = RunBudget(**limits)
    if used_in or used_out:
        run.record(Usage(used_in, used_out))
    if reserved:
        run.reserve(reserved)
    assert run.output_budget(ceiling) == expected


def test_result_carries_limits_utilization_and_downgrades():
    run = RunBudget(max_total_tokens=10_000, max_turns=9, model_chain=["a", "b", "c"])
    call(run, 7_000)
    result = run.finish()
    assert result.limits["max_total_tokens"] == 10_000 and result.limits["max_turns"] == 9
    assert result.utilization == pytest.approx(0.7)
    assert result.downgrades == 1


CONVERSATION = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "Reading the file."},
    {"role": "user", "content": "ok"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "1", "function": {"name": "read", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "1", "content": "def f(): ..."},
    {"role": "assistant", "content": "Found it."},
]


def test_compress_keeps_system_prompt_task_and_latest_turns_and_never_splits_a_tool_result():
    head, middle, tail = split_for_summary(CONVERSATION, keep_last=2)
    assert head == CONVERSATION[:2]  # the system prompt and the task ("Fix the failing test.")
    assert tail == CONVERSATION[4:]  # the tool result stays with its call
    assert middle == CONVERSATION[2:4]
    seen = {}

    def summarize(model, messages):
        seen["model"], seen["n"] = model, len(messages)
        return "The user wants the failing test fixed."

    out = compress_messages(CONVERSATION, summarize, keep_last=2, model="small")
    assert out[:2] == CONVERSATION[:2] and out[3:] == CONVERSATION[4:]
    assert out[2] == {"role": "user", "content": SUMMARY_PREFIX + "The user wants the failing test fixed."}
    assert seen == {"model": "small", "n": 2}


def test_compress_keeps_the_first_user_message_without_a_system_prompt():
    plain = [m for m in CONVERSATION if m["role"] != "system"]
    head, middle, tail = split_for_summary(plain, keep_last=2)
    assert head == [{"role": "user", "content": "Fix the failing test."}]
    assert middle == plain[1:3] and tail == plain[3:]
    # a conversation that opens with a tool result has no task message to keep
    opened = [{"role": "tool", "tool_call_id": "1", "content": "x"}, *plain[1:]]
    assert split_for_summary(opened, keep_last=2)[0] == []


def test_run_compress_summarizes_with_the_cheapest_model_of_the_chain():
    run = RunBudget(
        model_chain=["claude-opus-4-1", "claude-haiku-4-5", "claude-sonnet-4-5"], provider="anthropic"
    )
    models = []
    out = run.compress(CONVERSATION, summarize=lambda m, msgs: models.append(m) or "summary", keep_last=2)
    assert models == ["claude-haiku-4-5"] and len(out) == 6  # system, task, summary, 3 kept
    with pytest.raises(ValueError, match="exactly one"):
        run.compress(CONVERSATION)


# --- 7. presets: thresholds per task type, alert-only limits --------------------------------------
def test_preset_carries_thresholds_and_an_alert_only_limit(tmp_path):
    path = tmp_path / "presets.yaml"
    doc = {
        "budgetlens_presets": 1,
        "presets": {
            "research": {
                "max_turns": 200,
                "warn_at": 0.5,
                "downgrade_at": 0.4,
                "summarize_at": 0.95,
                "alert_limits": {"max_total_tokens": 10_000},
            }
        },
    }
    path.write_text(yaml.safe_dump(doc))
    events = []
    run = RunBudget.from_preset("research", str(path), on_event=events.append)
    assert (run.warn_at, run.downgrade_at, run.summarize_at) == (0.5, 0.4, 0.95)
    assert run.limits["max_total_tokens"] is None  # alert-only: no default hard limit
    for _ in range(3):
        call(run, 6_000)  # 18,000 tokens: past the alert line, never stopped
    alerts = [e for e in events if e.name == EVENT_ALERT]
    assert [(e.reason, e.new_limit) for e in alerts] == [("max_total_tokens", 10_000)]
    assert run.finish().stop_reason == STOP_COMPLETED


def test_preset_rejects_bad_threshold_and_unknown_alert_limit(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump({"budgetlens_presets": 1, "presets": {"qa": {"max_turns": 3, "warn_at": 1.5}}})
    )
    with pytest.raises(ValueError, match=r"presets.qa.warn_at must be a fraction"):
        RunBudget.from_preset("qa", str(path))
    path.write_text(
        yaml.safe_dump({"budgetlens_presets": 1, "presets": {"qa": {"alert_limits": {"max_tokens": 3}}}})
    )
    with pytest.raises(ValueError, match="unknown limit 'max_tokens'"):
        RunBudget.from_preset("qa", str(path))


# --- 8. a shared token pool --------------------------------------------------------------------
def test_token_pool_is_shared_by_runs_and_refuses_before_the_call():
    pool = TokenPool(10_000, name="batch")
    a, b = RunBudget(max_total_tokens=8_000, pool=pool), RunBudget(max_total_tokens=8_000, pool=pool)
    a.record(Usage(5_000, 1_000), reservation=a.reserve(6_500))
    assert pool.used_tokens == 6_000 and pool.reserved_tokens == 0
    with pytest.raises(BudgetExceeded) as info:
        b.reserve(4_500)
    assert (info.value.reason, info.value.limit, info.value.used, info.value.requested) == (
        STOP_BUDGET_TOKENS,
        10_000,
        6_000,
        4_500,
    )
    assert "token pool batch" in str(info.value)
    b.release(b.reserve(3_000))
    assert pool.remaining_tokens == 4_000


def test_token_pool_admits_only_reservations_that_fit_under_threads():
    pool = TokenPool(10_000)
    runs = [RunBudget(max_total_tokens=100_000, pool=pool) for _ in range(5)]
    admitted, barrier = [], threading.Barrier(5)

    def worker(run):
        barrier.wait()
        with contextlib.suppress(BudgetExceeded):
            admitted.append(run.reserve(3_000))

    threads = [threading.Thread(target=worker, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 3 and pool.reserved_tokens == 9_000


def test_token_pool_charges_unknown_usage_and_alerts_once():
    alerts = []
    pool = TokenPool(10_000, on_alert=alerts.append)
    run = RunBudget(pool=pool, unknown_usage="residual", unknown_usage_residual_tokens=50_000)
    run.record(None, reservation=run.reserve(8_500))  # charged its reservation, never 0
    run.record(Usage(100, 0))
    assert pool.used_tokens == 8_600
    assert [(a.pool, a.used_tokens) for a in alerts] == [("default", 8_500)]


# --- issue 8's part: one limit table -------------------------------------------------------------
def test_every_limit_vocabulary_derives_from_the_one_table():
    from budgetlens.analysis.presets import LIMIT_COLUMNS, PRESET_RULES
    from budgetlens.guard.telemetry import _LIMIT_ATTRIBUTES
    from budgetlens.otlp.attributes import LIMITS as SPAN_LIMITS
    from budgetlens.store.schema import RUN_COLUMNS, RUN_RECORD_COLUMNS

    assert tuple(s.name for s in LIMITS) == LIMIT_KEYS
    assert set(WHOLE_NUMBER_LIMITS) == {s.name for s in LIMITS if s.unit in ("tokens", "count")}
    assert dict(_LIMIT_ATTRIBUTES) == {s.name: s.span_attribute for s in LIMITS}
    assert [c for c, _, _ in SPAN_LIMITS] == [s.store_column for s in LIMITS]
    assert set(PRESET_RULES) == set(LIMIT_KEYS) and set(LIMIT_COLUMNS.values()) <= set(RUN_COLUMNS)
    assert all(s.store_column in RUN_RECORD_COLUMNS for s in LIMITS)


# --- telemetry of the new behaviours -----------------------------------------------------------
def test_run_span_carries_limit_changes_alerts_effects_utilization_and_downgrades():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from budgetlens import semconv as sc

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run = RunBudget(
        max_total_tokens=10_000,
        model_chain=["a", "b"],
        alert_limits={"max_turns": 1},
        tracer=provider.get_tracer("test"),
    )
    call(run, 6_500)
    run.set_max(max_total_tokens=20_000, changed_by="bob")
    run.begin_effect("send_mail")
    run.finish()
    span = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    events = {e.name: dict(e.attributes) for e in span.events}
    changed = events[EVENT_LIMIT_CHANGED]
    assert (changed[sc.BUDGET_REASON], changed[sc.BUDGET_PREVIOUS_LIMIT], changed[sc.BUDGET_NEW_LIMIT]) == (
        "max_total_tokens",
        10_000,
        20_000,
    )
    assert changed[sc.BUDGET_CHANGED_BY] == "bob"
    assert events[EVENT_ALERT][sc.BUDGET_REASON] == "max_turns"
    assert span.attributes[sc.BUDGET_UNCONFIRMED_EFFECTS] == ("send_mail",)
    assert span.attributes[sc.BUDGET_UTILIZATION] == pytest.approx(0.325)
    assert span.attributes[sc.BUDGET_DOWNGRADES] == 1
    assert span.attributes[sc.BUDGET_RETRYABLE] is False


def test_open_reservations_stop_being_held_in_the_shared_pool_and_windows_at_finish():
    # A run that reserved and then died (no record, no release) must not keep the shared pool or
    # spend window reserved forever: at finish its unknown usage is charged as reserved, once.
    from budgetlens import SpendTracker, TokenPool

    pool = TokenPool(10_000, name="nightly")
    spend = SpendTracker({"daily": 10.0})
    for _ in range(2):
        run = RunBudget(
            pool=pool, spend=spend, max_total_tokens=None, max_cost_usd=1.0, model_chain=("gpt-4o",)
        )
        run.reserve(4_000)
        run.finish(error=TimeoutError())
        run.reset()  # after finish: nothing is given back twice
    assert pool._reserved == 0 and pool._used == 8_000
    window = spend._windows[0]
    assert window.reserved == 0.0
    from budgetlens.pricing import estimate_cost_usd

    per_run = estimate_cost_usd("gpt-4o", 4_000)  # what reserve(4_000) held in the window
    assert per_run and window.spent == pytest.approx(2 * per_run)
    fresh = RunBudget(pool=pool, max_total_tokens=None)
    fresh.reserve(2_000)  # what is left of the pool (10,000 - 8,000 charged) still admits a call
