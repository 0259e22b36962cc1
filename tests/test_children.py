"""Sub-agent budgets (issue 21): run.child carves from the parent's remainder, counts in the parent."""

from __future__ import annotations

import threading

import pytest

from budgetlens import Action, BudgetEvent, BudgetExceeded, RunBudget, Usage
from budgetlens.guard.children import carve_limits, check_fan_out
from budgetlens.semconv import EVENT_ALERT, EVENT_DOWNGRADE, EVENT_SUMMARIZE, EVENT_WARNING


def test_child_limits_are_the_smaller_of_its_own_and_the_parents_remainder():
    parent = RunBudget(max_total_tokens=10_000, max_cost_usd=1.0, max_turns=5, task_type="lead")
    res = parent.reserve(1_000)
    parent.record(Usage(800, 200), reservation=res)  # 1,000 used: 9,000 left
    child = parent.child(task_type="research", limits={"max_total_tokens": 20_000, "max_turns": 3})
    assert child.limits["max_total_tokens"] == 9_000  # min(20,000, 10,000 - 1,000)
    assert child.limits["max_turns"] == 3  # turns are the child's own, not carved
    assert child.limits["max_cost_usd"] == 1.0  # unpriced calls: nothing spent yet
    small = parent.child(limits={"max_total_tokens": 2_000})
    assert small.limits["max_total_tokens"] == 2_000
    assert child.parent_run_id == parent.run_id
    assert parent.children == (child, small)


def test_open_reservations_of_the_parent_shrink_the_childs_carve():
    parent = RunBudget(max_total_tokens=10_000)
    parent.reserve(4_000)  # open: 6,000 left
    assert parent.child().limits["max_total_tokens"] == 6_000


def test_a_childs_calls_count_in_the_parent_as_they_happen():
    parent = RunBudget(max_total_tokens=10_000)
    child = parent.child(task_type="research")
    res = child.reserve(3_000, output_tokens=1_000)
    assert parent.stats().reserved_tokens == 3_000  # held in the parent before the call
    child.record(Usage(2_000, 500), reservation=res)
    assert parent.used_tokens == 2_500
    assert parent.stats().reserved_tokens == 0
    assert parent.stats().turns == 0  # the parent's turns are its own
    assert child.stats().turns == 1


def test_a_sibling_spends_the_parent_and_the_other_child_is_refused_naming_the_parent():
    parent = RunBudget(max_total_tokens=10_000, task_type="lead")
    first, second = parent.child(), parent.child()  # each carved 10,000
    res = first.reserve(6_000)
    first.record(Usage(6_000, 0), reservation=res)
    with pytest.raises(BudgetExceeded) as caught:
        second.reserve(5_000)  # fits the child's 10,000, not the parent's 4,000 left
    assert caught.value.reason == "budget_tokens"
    assert parent.run_id in caught.value.detail
    assert second.finish().stop_reason == "budget_tokens"
    assert parent.used_tokens == 6_000


def test_a_released_child_call_gives_the_parent_hold_back():
    parent = RunBudget(max_total_tokens=10_000)
    child = parent.child()
    res = child.reserve(4_000)
    child.release(res)
    assert parent.stats().reserved_tokens == 0
    assert parent.used_tokens == 0


def test_a_child_call_never_recorded_is_charged_to_the_parent_at_finish():
    parent = RunBudget(max_total_tokens=10_000)
    child = parent.child()
    child.reserve(1_500)
    child.finish()
    assert parent.used_tokens == 1_500  # unknown usage: the reservation, never 0
    assert parent.stats().reserved_tokens == 0


def test_a_child_paid_tool_fee_counts_in_the_parents_cost_and_stops_at_its_limit():
    parent = RunBudget(max_cost_usd=0.05, task_type="lead")
    child = parent.child(limits={"max_cost_usd": 1.0})
    assert child.limits["max_cost_usd"] == 0.05
    child.before_tool_call("web_search", cost_usd=0.03)
    assert parent.stats().cost_usd == pytest.approx(0.03)
    other = parent.child()
    assert other.limits["max_cost_usd"] == pytest.approx(0.02)
    with pytest.raises(BudgetExceeded) as caught:
        other.before_tool_call("web_search", cost_usd=0.03)  # 0.03 + 0.03 > 0.05 in the parent
    assert caught.value.reason == "budget_cost"
    assert parent.stats().cost_usd == pytest.approx(0.03)


def test_concurrent_children_never_pass_the_parents_limit():
    parent = RunBudget(max_total_tokens=10_000)
    children = [parent.child() for _ in range(8)]
    admitted: list[int] = []
    barrier = threading.Barrier(8)

    def work(child: RunBudget) -> None:
        barrier.wait()
        try:
            res = child.reserve(3_000, output_tokens=1_000)
        except BudgetExceeded:
            return
        child.record(Usage(2_000, 1_000), reservation=res)  # used = reserved: no underestimate
        admitted.append(1)

    threads = [threading.Thread(target=work, args=(c,)) for c in children]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 3  # 3 × 3,000 = 9,000 fits; a 4th would be 12,000
    assert parent.used_tokens == 9_000


def test_a_grandchild_counts_in_every_ancestor():
    root = RunBudget(max_total_tokens=10_000)
    mid = root.child(limits={"max_total_tokens": 5_000})
    leaf = mid.child()
    assert leaf.limits["max_total_tokens"] == 5_000
    res = leaf.reserve(1_000)
    leaf.record(Usage(700, 300), reservation=res)
    assert (leaf.used_tokens, mid.used_tokens, root.used_tokens) == (1_000, 1_000, 1_000)


def test_a_spent_or_finished_parent_makes_no_child():
    parent = RunBudget(max_total_tokens=1_000)
    res = parent.reserve(1_000)
    parent.record(Usage(1_000, 0), reservation=res)
    with pytest.raises(BudgetExceeded):
        parent.child()
    parent.finish()
    with pytest.raises(RuntimeError, match="finished"):
        parent.child()


def test_a_child_of_a_finished_parent_stops_at_its_next_call():
    parent = RunBudget(max_total_tokens=10_000)
    child = parent.child()
    parent.finish()
    with pytest.raises(BudgetExceeded) as caught:
        child.reserve(100)
    assert "finished" in caught.value.detail


def test_the_parents_wrap_up_slice_is_not_carved():
    parent = RunBudget(max_total_tokens=10_000, wrap_up_tokens=2_000)
    assert parent.child().limits["max_total_tokens"] == 8_000


def test_fan_out_is_refused_when_n_times_the_estimate_passes_the_remainder():
    parent = RunBudget(max_total_tokens=10_000, max_cost_usd=1.0)
    with pytest.raises(BudgetExceeded) as caught:
        parent.fan_out(4, "research", estimate_tokens=2_600)  # 10,400 > 10,000
    assert caught.value.reason == "budget_tokens"
    assert caught.value.detail == "fan-out of 4 research"
    assert parent.children == ()  # none was made
    with pytest.raises(BudgetExceeded) as cost:
        parent.fan_out(3, "research", estimate_usd=0.34)  # 1.02 > 1.0
    assert cost.value.reason == "budget_cost"
    made = parent.fan_out(4, "research", estimate_tokens=2_500)  # 10,000 fits exactly
    assert len(made) == 4 and all(c.task_type == "research" for c in made)


def test_fan_out_needs_an_estimate_and_a_positive_count():
    parent = RunBudget(max_total_tokens=10_000)
    with pytest.raises(ValueError, match="no estimate"):
        parent.fan_out(2, "research")
    with pytest.raises(ValueError, match="n must be"):
        check_fan_out(0, "research", {"max_total_tokens": 10}, 1, None)


def test_carve_limits_names_an_unknown_limit():
    with pytest.raises(ValueError, match="max_tokens"):
        carve_limits({"max_tokens": 5}, {})


def test_child_refuses_its_own_pool_or_spend():
    parent = RunBudget(max_total_tokens=10_000)
    with pytest.raises(ValueError, match="pool and spend"):
        parent.child(pool=object())


def test_a_childs_use_fires_the_parents_thresholds_and_alerts_as_it_happens():
    events: list[BudgetEvent] = []
    parent = RunBudget(
        max_total_tokens=10_000,
        model_chain=("big", "small"),
        alert_limits={"max_total_tokens": 7_000},
        on_event=events.append,
        task_type="lead",
    )
    parent.record(Usage(1_000, 0))  # 10 %
    child = parent.child(task_type="research")
    child.record(Usage(5_000, 1_000))  # the parent at 7,000 = 70 %: downgrade (60 %) and the alert
    assert [(e.name, e.run_id, e.percent) for e in events] == [
        (EVENT_DOWNGRADE, parent.run_id, 70.0),
        (EVENT_ALERT, parent.run_id, 70.0),
    ]
    assert (events[0].from_model, events[0].to_model) == ("big", "small") and parent.model == "small"
    assert events[1].reason == "max_total_tokens" and events[1].new_limit == 7_000
    child.record(Usage(1_500, 0))  # 8,500 = 85 %: the warning (80 %) and summarize (85 %)
    assert [(e.name, e.percent) for e in events[2:]] == [(EVENT_WARNING, 85.0), (EVENT_SUMMARIZE, 85.0)]
    assert parent.before_turn() == Action.SUMMARIZE  # its next step advises what the child crossed
    assert [e.name for e in events].count(EVENT_WARNING) == 1  # each once: not again at that step


def test_a_childs_paid_tool_fee_fires_the_parents_cost_thresholds_as_it_happens():
    events: list[BudgetEvent] = []
    parent = RunBudget(max_cost_usd=1.0, on_event=events.append)
    child = parent.child(task_type="research")
    child.before_tool_call("search", cost_usd=0.5)  # 50 %: nothing crossed
    assert events == []
    child.before_tool_call("search", cost_usd=0.35)  # 0.85 USD = 85 % of the parent's 1.0
    assert [(e.name, e.run_id, e.percent) for e in events] == [
        (EVENT_WARNING, parent.run_id, 85.0),
        (EVENT_SUMMARIZE, parent.run_id, 85.0),
    ]
