"""RunBudget seed behaviours (design §1): limits, checks, thresholds, concurrency, unknown usage."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import tomli_w
import yaml

from collector import Action, BudgetExceeded, RunBudget, Usage
from collector.semconv import (
    EVENT_DOWNGRADE,
    EVENT_STOP,
    EVENT_SUMMARIZE,
    EVENT_TOOL_CALL,
    EVENT_WARNING,
    STOP_BUDGET_COST,
    STOP_BUDGET_TIME,
    STOP_BUDGET_TOKENS,
    STOP_BUDGET_TOOLS,
    STOP_BUDGET_TURNS,
    STOP_COMPLETED,
    STOP_FAILED,
    USAGE_REPORTED,
    USAGE_UNKNOWN,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def call(run: RunBudget, input_tokens: int, output_tokens: int = 0, reserve: int = 0, model=None):
    run.before_turn()
    res = run.reserve(reserve)
    return run.record(Usage(input_tokens, output_tokens), model=model, reservation=res)


def test_bare_guard_defaults_to_64000_total_tokens():
    assert RunBudget().limits["max_total_tokens"] == 64_000
    assert RunBudget(max_turns=3).limits["max_total_tokens"] is None


def test_reservation_that_does_not_fit_raises_with_reason_limit_used_requested():
    run = RunBudget(max_total_tokens=10_000)
    call(run, 9_000)
    with pytest.raises(BudgetExceeded) as info:
        run.reserve(2_000)
    exc = info.value
    assert (exc.reason, exc.limit, exc.used, exc.requested) == (STOP_BUDGET_TOKENS, 10_000, 9_000, 2_000)
    assert run.finish().stop_reason == STOP_BUDGET_TOKENS


def test_turn_limit_of_n_allows_exactly_n_model_calls():
    run = RunBudget(max_turns=3)
    for _ in range(3):
        call(run, 10)
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn()
    assert info.value.reason == STOP_BUDGET_TURNS
    with pytest.raises(BudgetExceeded):
        run.reserve(1)
    assert run.stats().turns == 3


def test_tool_call_limit_stops_the_next_tool_call():
    run = RunBudget(max_tool_calls=2)
    run.before_tool_call("bash")
    run.before_tool_call("bash")
    with pytest.raises(BudgetExceeded) as info:
        run.before_tool_call("bash")
    assert (info.value.reason, info.value.limit, info.value.used) == (STOP_BUDGET_TOOLS, 2, 2)
    assert run.finish().stop_reason == STOP_BUDGET_TOOLS


def test_wall_time_limit_uses_the_injected_clock():
    clock = FakeClock()
    run = RunBudget(max_duration_s=30, clock=clock)
    run.before_turn()
    clock.now += 30
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn()
    assert info.value.reason == STOP_BUDGET_TIME
    assert run.finish().duration_s == 30


def test_cost_limit_stops_after_priced_spend_reaches_it():
    run = RunBudget(max_cost_usd=0.01)
    call(run, 3_000, 500, model="gpt-4o")  # 3000*2.5e-6 + 500*1e-5 = 0.0125 USD
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn()
    assert info.value.reason == STOP_BUDGET_COST
    assert run.finish().cost_usd == pytest.approx(0.0125)


@pytest.mark.parametrize("limit, usage", [("max_input_tokens", Usage(500, 1)),
                                          ("max_output_tokens", Usage(1, 500))])
def test_input_and_output_limits_stop_the_next_call(limit, usage):
    run = RunBudget(**{limit: 500})
    run.reserve(0)
    run.record(usage)
    with pytest.raises(BudgetExceeded) as info:
        run.reserve(0)
    assert info.value.reason == STOP_BUDGET_TOKENS


def test_warning_fires_once_at_80_percent_and_again_only_after_reset():
    events = []
    run = RunBudget(max_total_tokens=1_000, on_event=events.append, summarize_at=1.0)
    assert call(run, 790) == Action.CONTINUE
    assert call(run, 20) == Action.WARN
    call(run, 10)
    assert [e.name for e in events].count(EVENT_WARNING) == 1
    run.reset()
    assert run.used_tokens == 0
    call(run, 850)
    assert [e.name for e in events].count(EVENT_WARNING) == 2


def test_warn_threshold_is_configurable():
    run = RunBudget(max_total_tokens=1_000, warn_at=0.5, downgrade_at=0.9)
    assert call(run, 500) == Action.WARN


def test_downgrade_happens_once_along_the_model_chain_at_60_percent():
    events = []
    run = RunBudget(max_total_tokens=1_000, model_chain=("big", "medium", "small"),
                    on_event=events.append)
    assert run.model == "big"
    assert call(run, 599) == Action.CONTINUE
    assert call(run, 1) == Action.DOWNGRADE
    assert run.model == "medium"
    call(run, 50)
    assert run.model == "medium"
    downgrades = [e for e in events if e.name == EVENT_DOWNGRADE]
    assert [(e.from_model, e.to_model) for e in downgrades] == [("big", "medium")]


def test_summarize_is_advised_while_above_85_percent_and_stop_at_100():
    events = []
    run = RunBudget(max_total_tokens=1_000, warn_at=0.99, on_event=events.append)
    assert call(run, 860) == Action.SUMMARIZE
    assert run.before_turn() == Action.SUMMARIZE
    assert call(run, 100) == Action.SUMMARIZE
    assert call(run, 40) == Action.STOP
    with pytest.raises(BudgetExceeded):
        run.before_turn()
    names = [e.name for e in events]
    assert names.count(EVENT_SUMMARIZE) == 1 and names.count(EVENT_STOP) == 1


def test_set_max_below_current_use_stops_the_next_call():
    run = RunBudget(max_total_tokens=10_000)
    call(run, 3_000)
    run.set_max(max_total_tokens=2_000)
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn()
    assert (info.value.limit, info.value.used) == (2_000, 3_000)


def test_set_max_rejects_an_unknown_limit_by_name():
    with pytest.raises(ValueError, match="max_tokens"):
        RunBudget().set_max(max_tokens=5)


@pytest.mark.parametrize("kwargs, named", [({"max_total_tokens": -1}, "max_total_tokens"),
                                           ({"max_turns": 2.5}, "max_turns"),
                                           ({"warn_at": 1.5}, "warn_at"),
                                           ({"unknown_usage": "ignore"}, "unknown_usage")])
def test_bad_constructor_argument_is_rejected_naming_it(kwargs, named):
    with pytest.raises(ValueError, match=named):
        RunBudget(**kwargs)


def test_five_concurrent_thread_reservations_of_800_with_1000_left_admit_exactly_one():
    run = RunBudget(max_total_tokens=2_000)
    call(run, 1_000)
    barrier = threading.Barrier(5)
    admitted, refused = [], []

    def worker():
        barrier.wait()
        try:
            admitted.append(run.reserve(800))
        except BudgetExceeded:
            refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(admitted), len(refused)) == (1, 4)


def test_five_concurrent_asyncio_reservations_of_800_with_1000_left_admit_exactly_one():
    run = RunBudget(max_total_tokens=1_000)

    async def agent_call():
        await asyncio.sleep(0)
        res = run.reserve(800)
        await asyncio.sleep(0.001)
        run.record(Usage(700, 50), reservation=res)
        return res

    async def main():
        return await asyncio.gather(*(agent_call() for _ in range(5)), return_exceptions=True)

    results = asyncio.run(main())
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, BudgetExceeded) for r in results if isinstance(r, BaseException))


def test_failed_call_releases_its_reservation():
    run = RunBudget(max_total_tokens=1_000)
    res = run.reserve(900)
    with pytest.raises(BudgetExceeded):
        run.reserve(200)
    run.release(res)
    assert run.stats().reserved_tokens == 0
    run.reset()  # the refused reservation above marked a stop; start clean
    assert run.reserve(900).tokens == 900


def test_recorded_usage_replaces_the_reservation_it_settles():
    run = RunBudget(max_total_tokens=10_000)
    res = run.reserve(5_000)
    assert run.stats().remaining_tokens == 5_000
    run.record(Usage(1_000, 200), reservation=res)
    stats = run.stats()
    assert (stats.used_tokens, stats.reserved_tokens, stats.remaining_tokens) == (1_200, 0, 8_800)


def test_unknown_usage_keeps_the_reservation_as_charge_never_zero():
    run = RunBudget(max_total_tokens=10_000)
    res = run.reserve(3_000)
    run.record(None, model="gpt-4o", reservation=res, error_type="TimeoutError")
    assert run.used_tokens == 3_000
    result = run.finish()
    assert result.usage_status == USAGE_UNKNOWN and result.used_tokens == 3_000


def test_unknown_usage_default_policy_blocks_further_reservations():
    run = RunBudget(max_total_tokens=10_000)
    run.record(None, reservation=run.reserve(1_000))
    with pytest.raises(BudgetExceeded, match="unknown"):
        run.reserve(10)
    result = run.finish()
    assert result.stop_reason == STOP_BUDGET_TOKENS and result.retryable is True


def test_unknown_usage_residual_policy_allows_calls_within_the_residual():
    run = RunBudget(max_total_tokens=10_000, unknown_usage="residual",
                    unknown_usage_residual_tokens=2_000)
    run.record(None, reservation=run.reserve(1_000))
    run.record(Usage(1_400, 100), reservation=run.reserve(1_500))
    with pytest.raises(BudgetExceeded, match="residual"):
        run.reserve(600)


def test_record_accepts_a_raw_provider_payload():
    run = RunBudget()
    run.record({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100},
               reservation=run.reserve(200))
    assert run.stats().usage == Usage(110, 5, 100, 0, 0)


def test_stats_give_percent_with_one_decimal_and_a_status_line():
    run = RunBudget()
    call(run, 33_000, 472)
    stats = run.stats()
    assert (stats.used_tokens, stats.max_tokens, stats.remaining_tokens) == (33_472, 64_000, 30_528)
    assert stats.percent == 52.3
    assert stats.status == "budget 52.3 % (33,472 / 64,000 tokens)"


def test_finish_returns_completed_result_with_usage_snapshot():
    run = RunBudget(task_type="qa")
    call(run, 100, 20)
    run.before_tool_call("search")
    result = run.finish()
    assert (result.stop_reason, result.turns, result.tool_calls, result.retryable) == (
        STOP_COMPLETED, 1, 1, False)
    assert result.usage == Usage(100, 20) and result.usage_status == USAGE_REPORTED
    assert run.finish() is result


def test_context_manager_records_failed_on_exception():
    with pytest.raises(RuntimeError):
        with RunBudget() as run:
            raise RuntimeError("boom")
    assert run.result.stop_reason == STOP_FAILED and run.result.retryable is True
    assert run.result.error_type == "RuntimeError"


def test_context_manager_records_budget_stop_reason():
    with pytest.raises(BudgetExceeded):
        with RunBudget(max_turns=1) as run:
            call(run, 10)
            call(run, 10)
    assert run.result.stop_reason == STOP_BUDGET_TURNS


def test_async_context_manager_records_completed():
    async def main():
        async with RunBudget() as run:
            call(run, 10)
        return run

    assert asyncio.run(main()).result.stop_reason == STOP_COMPLETED


def test_tool_calls_are_events_with_the_tool_name_only():
    events = []
    run = RunBudget(on_event=events.append)
    run.before_tool_call("bash")
    assert [(e.name, e.tool_name) for e in events] == [(EVENT_TOOL_CALL, "bash")]


def test_failing_callback_does_not_break_the_loop():
    def bad(event):
        raise RuntimeError("callback bug")

    run = RunBudget(max_total_tokens=100, on_event=bad)
    assert call(run, 90) == Action.SUMMARIZE


PRESET = {
    "budgetlens_presets": 1,
    "generated_utc": "2026-11-29T10:00:00Z",
    "multiplier": 1.5,
    "window_days": 14,
    "presets": {"code_generation": {
        "max_total_tokens": 91000, "max_input_tokens": 80000, "max_output_tokens": 12000,
        "max_turns": 31, "max_tool_calls": 45, "max_duration_s": 305, "max_cost_usd": 1.62,
        "basis": {"n_runs": 212, "low_sample": False, "p50_total_tokens": 38211.5}}},
}


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_from_preset_loads_limits_from_each_format(tmp_path, suffix):
    path = tmp_path / f"presets{suffix}"
    dump = {".yaml": yaml.safe_dump, ".toml": tomli_w.dumps, ".json": json.dumps}[suffix]
    path.write_text(dump(PRESET))
    run = RunBudget.from_preset("code_generation", str(path))
    assert run.task_type == "code_generation"
    assert run.limits == {"max_total_tokens": 91000, "max_input_tokens": 80000,
                          "max_output_tokens": 12000, "max_turns": 31, "max_tool_calls": 45,
                          "max_duration_s": 305, "max_cost_usd": 1.62}


@pytest.mark.parametrize("bad_key", ["max_duration_ms", "max_cost_eur", "max_tokens"])
def test_from_preset_rejects_unknown_keys_or_units_naming_them(tmp_path, bad_key):
    doc = json.loads(json.dumps(PRESET))
    doc["presets"]["code_generation"][bad_key] = 1
    path = tmp_path / "presets.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=bad_key):
        RunBudget.from_preset("code_generation", str(path))


def test_from_preset_names_a_missing_task_type(tmp_path):
    path = tmp_path / "presets.json"
    path.write_text(json.dumps(PRESET))
    with pytest.raises(KeyError, match="code_generation"):
        RunBudget.from_preset("qa", str(path))
