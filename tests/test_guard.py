"""RunBudget seed behaviours (design §1): limits, checks, thresholds, concurrency, unknown usage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest
import tomli_w
import yaml

from budgetlens import Action, BudgetExceeded, RunBudget, Usage
from budgetlens.semconv import (
    EVENT_DOWNGRADE,
    EVENT_STOP,
    EVENT_SUMMARIZE,
    EVENT_TOOL_CALL,
    EVENT_WARNING,
    REASON_COST_UNENFORCED,
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


@pytest.mark.parametrize(
    "limit, usage", [("max_input_tokens", Usage(500, 1)), ("max_output_tokens", Usage(1, 500))]
)
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
    run = RunBudget(max_total_tokens=1_000, model_chain=("big", "medium", "small"), on_event=events.append)
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


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"max_total_tokens": -1}, "max_total_tokens"),
        ({"max_turns": 2.5}, "max_turns"),
        ({"warn_at": 1.5}, "warn_at"),
        ({"unknown_usage": "ignore"}, "unknown_usage"),
    ],
)
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
    run = RunBudget(max_total_tokens=10_000, unknown_usage="residual", unknown_usage_residual_tokens=2_000)
    run.record(None, reservation=run.reserve(1_000))
    run.record(Usage(1_400, 100), reservation=run.reserve(1_500))
    with pytest.raises(BudgetExceeded, match="residual"):
        run.reserve(600)


def test_record_accepts_a_raw_provider_payload():
    run = RunBudget()
    run.record(
        {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100}, reservation=run.reserve(200)
    )
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
        STOP_COMPLETED,
        1,
        1,
        False,
    )
    assert result.usage == Usage(100, 20) and result.usage_status == USAGE_REPORTED
    assert run.finish() is result


def test_context_manager_records_failed_on_exception():
    with pytest.raises(RuntimeError), RunBudget() as run:
        raise RuntimeError("boom")
    assert run.result.stop_reason == STOP_FAILED and run.result.retryable is True
    assert run.result.error_type == "RuntimeError"


def test_context_manager_records_budget_stop_reason():
    with pytest.raises(BudgetExceeded), RunBudget(max_turns=1) as run:
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


#: The limits of the preset file's code_generation entry, by constructor name.
PRESET_LIMITS = {
    "max_total_tokens": 91000,
    "max_input_tokens": 80000,
    "max_output_tokens": 12000,
    "max_turns": 31,
    "max_tool_calls": 45,
    "max_duration_s": 305,
    "max_cost_usd": 1.62,
}
PRESET = {
    "budgetlens_presets": 1,
    "generated_utc": "2026-11-29T10:00:00Z",
    "multiplier": 1.5,
    "window_days": 14,
    "presets": {
        "code_generation": {
            **PRESET_LIMITS,
            "basis": {"n_runs": 212, "low_sample": False, "p50_total_tokens": 38211.5},
        }
    },
}


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_from_preset_loads_limits_from_each_format(tmp_path, suffix):
    path = tmp_path / f"presets{suffix}"
    dump = {".yaml": yaml.safe_dump, ".toml": tomli_w.dumps, ".json": json.dumps}[suffix]
    path.write_text(dump(PRESET))
    run = RunBudget.from_preset("code_generation", str(path))
    assert run.task_type == "code_generation"
    assert run.limits == PRESET_LIMITS


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


# --- QA regressions: pricing failures, messages, limits, reservations, misuse --------------------
def test_record_keeps_a_calls_usage_when_pricing_fails(monkeypatch, caplog):
    import budgetlens.pricing as pricing

    def broken(*args, **kwargs):
        raise ValueError("prices.yaml: models.gpt-4o: unknown key 'input_eur_per_mtok'")

    run = RunBudget(max_total_tokens=10**7)
    res = run.reserve(100)
    monkeypatch.setattr(pricing, "_price", broken)  # what price_call's one error policy catches
    run.record(Usage(10, 10), model="gpt-4o", reservation=res)
    stats = run.stats()
    assert (stats.reserved_tokens, stats.used_tokens, stats.turns, stats.cost_usd) == (0, 20, 1, None)
    assert "could not price" in caplog.text


@pytest.mark.parametrize(
    "body, named",
    [
        (None, "BUDGETLENS_PRICES_FILE"),
        ("models:\n  m:\n    input_eur_per_mtok: 1.0\n", "input_eur_per_mtok"),
    ],
    ids=["missing_file", "unknown_unit"],
)
def test_bad_price_file_fails_when_the_guard_is_built_not_after_a_paid_call(
    tmp_path, monkeypatch, body, named
):
    from budgetlens.pricing import clear_price_cache

    path = tmp_path / "eur.yaml"
    if body is not None:
        path.write_text(body)
    monkeypatch.setenv("BUDGETLENS_PRICES_FILE", str(path))
    clear_price_cache()
    with pytest.raises(ValueError, match=named) as info:
        RunBudget(max_total_tokens=10**7)
    assert "eur.yaml" in str(info.value)
    clear_price_cache()


def test_spent_limit_message_says_reached_never_a_false_inequality():
    run = RunBudget(max_total_tokens=1_000)
    call(run, 1_000)
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn()
    assert str(info.value) == "budget_tokens: used 1,000 reached limit 1,000 (max_total_tokens)"


@pytest.mark.parametrize(
    "limit, step",
    [("max_cost_usd", "before_turn"), ("max_total_tokens", "reserve"), ("max_turns", "before_turn")],
)
def test_limit_of_zero_allows_nothing_and_says_so(limit, step):
    run = RunBudget(**{limit: 0})
    with pytest.raises(BudgetExceeded) as info:
        run.before_turn() if step == "before_turn" else run.reserve(0)
    assert "limit 0 allows nothing" in str(info.value) and " > " not in str(info.value)


def test_request_that_does_not_fit_says_used_plus_requested_over_limit():
    run = RunBudget(max_total_tokens=1_000)
    with pytest.raises(BudgetExceeded, match=r"used 0 \+ requested 1,500 > limit 1,000"):
        run.reserve(1_500)


def test_budget_exceeded_survives_pickling_for_process_pools():
    import pickle

    exc = BudgetExceeded(STOP_BUDGET_TOKENS, 1_000, 900, 200, "max_total_tokens")
    back = pickle.loads(pickle.dumps(exc))
    assert (back.reason, back.limit, back.used, back.requested, back.detail, str(back)) == (
        exc.reason,
        exc.limit,
        exc.used,
        exc.requested,
        exc.detail,
        str(exc),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: RunBudget(max_total_tokens=float("inf")),
        lambda: RunBudget().set_max(max_turns=float("inf")),
        lambda: RunBudget(max_cost_usd=float("nan")),
    ],
    ids=["constructor_inf", "set_max_inf", "constructor_nan"],
)
def test_infinite_or_nan_limit_is_rejected_naming_the_rule(make):
    with pytest.raises(ValueError, match="finite number >= 0, or None for no limit"):
        make()


@pytest.mark.parametrize(
    "kwargs, first_admitted",
    [
        ({"max_input_tokens": 1_000}, {}),
        ({"max_output_tokens": 1_000}, {"output_tokens": 800}),
        ({"max_output_tokens": 1_000}, {"input_tokens": 200, "output_tokens": 800}),
    ],
)
def test_five_concurrent_reservations_respect_input_and_output_limits(kwargs, first_admitted):
    run = RunBudget(**kwargs)
    admitted = []
    for _ in range(5):
        try:
            admitted.append(run.reserve(1_000 if first_admitted else 800, **first_admitted))
        except BudgetExceeded as exc:
            assert exc.detail in kwargs
    assert len(admitted) == 1


def test_unsplit_reservation_counts_as_input_and_output_part_only_against_output():
    run = RunBudget(max_input_tokens=1_000, max_output_tokens=100)
    run.reserve(900)  # unsplit: input
    run.reserve(150, output_tokens=100)  # 50 input + 100 output
    with pytest.raises(BudgetExceeded, match="max_input_tokens"):
        run.reserve(60)
    with pytest.raises(BudgetExceeded, match="max_output_tokens"):
        run.reserve(1, output_tokens=1)


@pytest.mark.parametrize(
    "split",
    [
        {"input_tokens": 900, "output_tokens": 200},
        {"output_tokens": 2_000},
        {"input_tokens": -1},
        {"output_tokens": 1.5},
    ],
)
def test_reservation_split_that_does_not_add_up_is_rejected(split):
    with pytest.raises(ValueError, match="input_tokens|output_tokens"):
        RunBudget().reserve(1_000, **split)


def test_cost_limit_refuses_a_reservation_whose_worst_case_cost_does_not_fit():
    run = RunBudget(max_cost_usd=0.01, model_chain=("gpt-4o",))  # 2.5 / 10 USD per Mtok
    with pytest.raises(BudgetExceeded) as info:
        run.reserve(100_000)  # unsplit: at the higher (output) rate, 1.00 USD
    assert (info.value.reason, info.value.requested) == (STOP_BUDGET_COST, pytest.approx(1.0))
    run.reset()
    first = run.reserve(2_000, output_tokens=500)  # 1500 * 2.5e-6 + 500 * 1e-5 = 0.00875 USD
    assert first.cost_usd == pytest.approx(0.00875)
    with pytest.raises(BudgetExceeded, match="max_cost_usd"):
        run.reserve(200, output_tokens=200)  # + 0.002 > 0.01
    run.record(Usage(100, 10), reservation=first)
    assert run.reserve(200, output_tokens=200).cost_usd == pytest.approx(0.002)


def test_unpriced_model_adds_no_estimated_cost_to_a_reservation():
    run = RunBudget(max_cost_usd=0.01, model_chain=("no-such-model-xyz",))
    assert run.reserve(10**6).cost_usd == 0.0


@pytest.mark.parametrize(
    "before, charged", [(None, 4_000), (2_500, 2_500)], ids=["first_call_default", "largest_call_so_far"]
)
def test_call_without_usage_or_reservation_is_charged_conservatively_never_zero(before, charged):
    run = RunBudget(max_total_tokens=100_000)
    if before is not None:
        run.record(Usage(before - 500, 500))
    used = run.used_tokens
    run.record(None)
    assert run.used_tokens - used == charged
    assert run.finish().usage_status == USAGE_UNKNOWN


def test_zero_token_reservation_without_usage_is_charged_like_the_largest_call():
    run = RunBudget(unknown_usage="residual", unknown_usage_residual_tokens=50_000)
    run.record(Usage(1_000, 200), reservation=run.reserve(3_000))
    run.record(None, reservation=run.reserve(0))
    assert run.used_tokens == 1_200 + 3_000


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"model_chain": "gpt-4o"}, "model_chain"),
        ({"model_chain": ["big", 5]}, "model_chain"),
        ({"on_event": 5}, "on_event"),
        ({"on_event": [print, "x"]}, "on_event"),
    ],
)
def test_bad_model_chain_or_on_event_is_rejected_naming_it(kwargs, named):
    with pytest.raises(ValueError, match=named):
        RunBudget(**kwargs)


def test_model_chain_may_be_any_iterable_of_names():
    assert RunBudget(model_chain=(m for m in ["big", "small"])).model == "big"


@pytest.mark.parametrize(
    "step",
    [
        lambda r: r.before_turn(),
        lambda r: r.reserve(10),
        lambda r: r.record(Usage(1, 1)),
        lambda r: r.before_tool_call("x"),
    ],
)
def test_finished_run_refuses_further_steps_and_keeps_its_result(step):
    run = RunBudget()
    call(run, 10)
    result = run.finish()
    with pytest.raises(RuntimeError, match="finished"):
        step(run)
    assert run.finish() is result and run.stats().turns == 1


def test_release_after_finish_does_nothing_so_cleanup_never_raises():
    run = RunBudget()
    res = run.reserve(10)
    run.finish()
    run.release(res)


@pytest.mark.parametrize(
    "settle_again",
    [lambda r, res: r.record(Usage(1, 1), reservation=res), lambda r, res: r.release(res)],
    ids=["record", "release"],
)
def test_settling_a_reservation_twice_is_rejected_and_counts_one_turn(settle_again):
    run = RunBudget()
    res = run.reserve(100)
    run.record(Usage(10, 10), reservation=res)
    with pytest.raises(ValueError, match="not open"):
        settle_again(run, res)
    assert run.stats().turns == 1 and run.used_tokens == 20


def test_reservation_of_another_run_is_rejected_and_settles_nothing():
    mine, other = RunBudget(), RunBudget()
    own = mine.reserve(100)
    with pytest.raises(ValueError, match="not made by run"):
        mine.record(Usage(1, 1), reservation=other.reserve(100))
    assert mine.stats().reserved_tokens == 100
    mine.record(Usage(1, 1), reservation=own)


def test_released_reservation_is_not_a_turn():
    run = RunBudget(max_turns=2)
    for _ in range(2):
        run.release(run.reserve(10))
    assert run.stats().turns == 0
    call(run, 10)
    call(run, 10)
    with pytest.raises(BudgetExceeded):
        run.reserve(10)


def test_open_reservations_count_against_the_turn_limit():
    run = RunBudget(max_turns=2)
    run.reserve(10)
    run.reserve(10)
    with pytest.raises(BudgetExceeded) as info:
        run.reserve(10)
    assert info.value.reason == STOP_BUDGET_TURNS


def test_caught_budget_stop_then_normal_finish_is_still_a_budget_stop():
    run = RunBudget(max_total_tokens=1_000)
    with contextlib.suppress(BudgetExceeded):  # the agent caught the stop and wrapped up
        run.reserve(2_000)
    assert run.finish().stop_reason == STOP_BUDGET_TOKENS


def _refused(run: RunBudget) -> None:
    with pytest.raises(BudgetExceeded):
        run.reserve(6_000)


def _recorded(run: RunBudget) -> None:
    run.record(Usage(1_000, 200), reservation=run.reserve(2_000))


# steps of a run with max_total_tokens=5,000 -> the stop reason finish() reports
STOP_AFTER_REFUSAL = [
    ((_refused, _recorded), STOP_COMPLETED),  # recovered: a smaller reservation fit
    ((_recorded, _refused), STOP_BUDGET_TOKENS),  # ended at the refusal
    ((_refused, _recorded, _refused), STOP_BUDGET_TOKENS),  # refused again after recovering
    ((_refused, _refused, _recorded), STOP_COMPLETED),
]


@pytest.mark.parametrize(
    "steps, stop_reason",
    STOP_AFTER_REFUSAL,
    ids=["recovered", "ended_at_refusal", "refused_again", "recovered_twice"],
)
def test_budget_stop_reason_only_when_the_run_ended_at_its_last_refusal(steps, stop_reason):
    run = RunBudget(max_total_tokens=5_000)
    for step in steps:
        step(run)
    assert run.finish().stop_reason == stop_reason


def test_error_after_a_recovered_refusal_is_a_failure():
    run = RunBudget(max_total_tokens=5_000)
    _refused(run)
    _recorded(run)
    assert run.finish(error=TimeoutError("model timed out")).stop_reason == STOP_FAILED


def test_budget_exceeded_leaving_the_with_block_is_a_budget_stop_even_after_recovery():
    with pytest.raises(BudgetExceeded), RunBudget(max_total_tokens=5_000) as run:
        _refused(run)
        _recorded(run)
        run.reserve(6_000)
    assert run.result.stop_reason == STOP_BUDGET_TOKENS


def test_each_refusal_after_a_recorded_call_emits_a_stop_event():
    events = []
    run = RunBudget(max_total_tokens=5_000, on_event=events.append)
    for step in (_refused, _refused, _recorded, _refused):
        step(run)
    assert [e.name for e in events if e.name == EVENT_STOP] == [EVENT_STOP, EVENT_STOP]


def test_unpriced_model_under_a_cost_limit_warns_once_and_the_run_goes_on(caplog):
    events = []
    run = RunBudget(max_cost_usd=0.01, on_event=events.append)
    for _ in range(5):
        call(run, 1_000, 1_000, reserve=2_000, model="my-model")
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING" and r.name.startswith("budgetlens.guard")
    ]
    assert len(warnings) == 1
    assert "my-model" in warnings[0] and "BUDGETLENS_PRICES_FILE" in warnings[0]
    # the unresolved name itself is logged once by the one price path
    unresolved = [r.getMessage() for r in caplog.records if r.name == "budgetlens.pricing"]
    assert len(unresolved) == 1 and "'my-model'" in unresolved[0]
    assert [(e.name, e.reason, e.model) for e in events] == [
        (EVENT_WARNING, REASON_COST_UNENFORCED, "my-model")
    ]
    stats = run.stats()
    assert stats.turns == 5 and stats.cost_usd is None
    assert stats.status == ("budget 0.0 % (0 / 0.01 USD); max_cost_usd not enforced for my-model (no price)")
    assert run.finish().stop_reason == STOP_COMPLETED


def test_unpriced_model_is_named_at_reserve_before_any_call_is_paid(caplog):
    run = RunBudget(max_cost_usd=0.01, model_chain=("my-model",))
    run.reserve(1_000)
    assert "max_cost_usd not enforced for my-model" in run.stats().status
    assert "is not enforced for model my-model" in caplog.text


def test_unpriced_model_without_a_cost_limit_gives_no_cost_warning(caplog):
    events = []
    run = RunBudget(on_event=events.append)
    call(run, 1_000, 1_000, model="my-model")
    assert events == [] and "not enforced" not in caplog.text
    assert "not enforced" not in run.stats().status


def test_priced_model_with_unknown_usage_gives_no_cost_warning(caplog):
    run = RunBudget(max_cost_usd=0.01)
    run.record(None, model="gpt-4o", reservation=run.reserve(1_000))
    assert run.stats().cost_unenforced_models == ()
    assert "not enforced" not in caplog.text


def test_explicit_stop_reason_overrides_a_caught_budget_stop():
    run = RunBudget(max_total_tokens=1_000)
    with pytest.raises(BudgetExceeded):
        run.reserve(2_000)
    assert run.finish(stop_reason=STOP_COMPLETED).stop_reason == STOP_COMPLETED


# --- QA regressions: preset files ---------------------------------------------------------------
def write_preset(tmp_path, doc, suffix=".json"):
    path = tmp_path / f"presets{suffix}"
    path.write_text(json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc))
    return path


def test_from_preset_overrides_replace_or_remove_a_limit_the_preset_sets(tmp_path):
    path = write_preset(tmp_path, PRESET)
    run = RunBudget.from_preset(
        "code_generation", str(path), max_total_tokens=10, max_turns=None, agent_name="fixer"
    )
    assert (run.limits["max_total_tokens"], run.limits["max_turns"], run.limits["max_tool_calls"]) == (
        10,
        None,
        45,
    )


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_preset_format_version_must_be_the_integer_1(tmp_path, version):
    path = write_preset(tmp_path, {**PRESET, "budgetlens_presets": version})
    with pytest.raises(ValueError, match="budgetlens_presets must be the integer 1"):
        RunBudget.from_preset("code_generation", str(path))


def test_preset_without_any_limit_is_rejected_not_turned_into_the_default(tmp_path):
    path = write_preset(tmp_path, {**PRESET, "presets": {"qa": {"basis": {"n_runs": 3}}}})
    with pytest.raises(ValueError, match="presets.qa sets no limit"):
        RunBudget.from_preset("qa", str(path))


def test_preset_with_infinite_limit_is_rejected_naming_the_key(tmp_path):
    path = tmp_path / "presets.yaml"
    path.write_text("budgetlens_presets: 1\npresets:\n  qa:\n    max_total_tokens: .inf\n")
    with pytest.raises(ValueError, match="presets.qa.max_total_tokens must be a finite number"):
        RunBudget.from_preset("qa", str(path))


def test_preset_of_zero_cost_is_valid_and_allows_nothing(tmp_path):
    path = write_preset(tmp_path, {**PRESET, "presets": {"free": {"max_cost_usd": 0.0}}})
    run = RunBudget.from_preset("free", str(path))
    with pytest.raises(BudgetExceeded, match="budget_cost: limit 0 allows nothing"):
        run.before_turn()


def test_preset_file_with_byte_order_mark_loads(tmp_path):
    path = tmp_path / "presets.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(PRESET).encode())
    assert RunBudget.from_preset("code_generation", str(path)).limits["max_turns"] == 31


@pytest.mark.parametrize(
    "suffix, raw, rule",
    [
        (".yaml", b"budgetlens_presets: 1\npresets: [unclosed\n", "not a valid preset file"),
        (".json", b'{"budgetlens_presets": 1, "presets": {"caf\xe9": {}}}', "must be UTF-8 text"),
        (".toml", b"budgetlens_presets = \n", "not a valid preset file"),
    ],
    ids=["yaml_syntax", "latin1", "toml_syntax"],
)
def test_unparsable_preset_file_is_a_value_error_naming_the_file(tmp_path, suffix, raw, rule):
    path = tmp_path / f"presets{suffix}"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=rule) as info:
        RunBudget.from_preset("qa", str(path))
    assert str(path) in str(info.value)
