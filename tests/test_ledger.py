"""The shared ledger: its contract on a SQLite ledger, the client's leases and offline policy, and
SpendTracker / TokenPool / RunBudget drawing from one ledger as separate processes would."""

from __future__ import annotations

import pytest

from budgetlens import BudgetExceeded, RunBudget, SpendTracker, TokenPool
from budgetlens.guard.ledgers import (
    Balance,
    LedgerClient,
    LedgerUnavailable,
    OfflinePolicy,
    open_backend,
    parse_offline,
    scope_key,
    shared_client,
)
from budgetlens.guard.ledgers.local import SqliteLedger
from budgetlens.semconv import STOP_BUDGET_COST, STOP_BUDGET_TOKENS

DAY = 1_780_000_000.0  # 2026-05-28 UTC, a fixed day for the window's period


class Clock:
    def __init__(self, now: float = DAY) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ledger() -> SqliteLedger:
    return SqliteLedger()


def process(ledger, **kwargs) -> LedgerClient:
    """One process's client on the shared ledger (its own outbox, leases and offline state)."""
    return LedgerClient(ledger, **kwargs)


# --- the backend contract ----------------------------------------------------------------------
def test_a_reservation_that_does_not_fit_is_refused_with_the_account_numbers(ledger):
    assert ledger.reserve("a", [("k", 1.0)], 0.7, 30) is None
    refusal = ledger.reserve("b", [("k", 1.0)], 0.4, 30)
    assert (refusal.key, refusal.limit, refusal.spent, refusal.held) == ("k", 1.0, 0.0, 0.7)
    assert ledger.balances(["k"])["k"].held == pytest.approx(0.7)


def test_a_reservation_over_several_accounts_is_all_or_nothing(ledger):
    assert ledger.reserve("a", [("daily", 10.0), ("monthly", 1.0)], 0.8, 30) is None
    assert ledger.reserve("b", [("daily", 10.0), ("monthly", 1.0)], 0.5, 30).key == "monthly"
    assert ledger.balances(["daily"])["daily"].held == pytest.approx(0.8)  # b held nothing


def test_a_settle_retried_charges_once(ledger):
    ledger.reserve("a", [("k", 1.0)], 0.5, 30)
    assert ledger.settle("a", ["k"], 0.4) == {"k": pytest.approx(0.4)}
    assert ledger.settle("a", ["k"], 0.4) is None
    assert ledger.balances(["k"])["k"].spent == pytest.approx(0.4)


def test_a_release_drops_the_hold_and_charges_nothing(ledger):
    ledger.reserve("a", [("k", 1.0)], 0.5, 30)
    assert ledger.settle("a", [], 0.0) == {}
    assert ledger.balances(["k"])["k"] == Balance(0.0, 0.0)
    assert ledger.reserve("a", [("k", 1.0)], 0.5, 30) is None  # not remembered as settled


def test_a_retried_reserve_holds_once(ledger):
    ledger.reserve("a", [("k", 1.0)], 0.5, 30)
    assert ledger.reserve("a", [("k", 1.0)], 0.5, 30) is None
    assert ledger.balances(["k"])["k"].held == pytest.approx(0.5)


def test_a_hold_ends_with_its_lease_unless_renewed():
    clock = Clock()
    ledger = SqliteLedger(clock=clock)
    ledger.reserve("dead", [("k", 1.0)], 0.6, 10)
    ledger.reserve("alive", [("k", 1.0)], 0.3, 10)
    clock.now += 8
    assert ledger.renew(["alive", "unknown"], 10) == 1
    clock.now += 3  # "dead" is past its lease: it counts no more
    assert ledger.balances(["k"])["k"].held == pytest.approx(0.3)
    assert ledger.reserve("next", [("k", 1.0)], 0.7, 10) is None
    clock.now += 20
    assert ledger.renew(["alive"], 10) == 0  # an expired hold is never revived


def test_a_settle_after_the_lease_still_charges():
    clock = Clock()
    ledger = SqliteLedger(clock=clock)
    ledger.reserve("slow", [("k", 1.0)], 0.5, 1)
    clock.now += 5
    assert ledger.settle("slow", ["k"], 0.6) == {"k": pytest.approx(0.6)}


def test_the_file_ledger_keeps_spend_and_holds_across_reopening(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    first = SqliteLedger(path)
    first.reserve("a", [("k", 1.0)], 0.5, 60)
    first.settle("b", ["k"], 0.25)
    first.close()
    again = SqliteLedger(path)
    assert again.balances(["k"])["k"] == Balance(0.25, 0.5)
    assert again.settle("b", ["k"], 0.25) is None


# --- scopes and resolution ---------------------------------------------------------------------
def test_scope_keys_are_canonical():
    assert scope_key(None) == "*"
    assert scope_key({"user": "u1", "team": "search-infra"}) == "team=search-infra,user=u1"
    assert scope_key("tenant=acme") == "tenant=acme"
    for bad in ("", {"team": ""}, {"team": "a,b"}, {"team": 3}, "a|b"):
        with pytest.raises(ValueError, match="scope"):
            scope_key(bad)


def test_in_process_stays_the_default(monkeypatch):
    monkeypatch.delenv("BUDGETLENS_LEDGER", raising=False)
    assert shared_client() is None
    assert not SpendTracker({"daily": 1.0}).shared
    assert not TokenPool(10).shared
    monkeypatch.setenv("BUDGETLENS_LEDGER", "memory")
    assert shared_client() is None


def test_the_environment_variable_chooses_the_ledger(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGETLENS_LEDGER", f"sqlite:///{tmp_path}/shared.sqlite3")
    first, second = SpendTracker({"daily": 1.0}), SpendTracker({"daily": 1.0})
    assert first.shared and second.shared
    first.add(0.75)
    assert second.spent("daily") == pytest.approx(0.75)
    assert not SpendTracker({"daily": 1.0}, ledger="memory").shared  # the argument wins


@pytest.mark.parametrize(
    "url, rule",
    [("redis://x", "BUDGETLENS_LEDGER must be"), ("sqlite://", "needs a file path"), ("http://", "http")],
)
def test_a_bad_ledger_url_is_named(url, rule):
    with pytest.raises(ValueError, match=rule):
        open_backend(url)


def test_a_bad_lease_or_offline_policy_is_named(monkeypatch, ledger):
    monkeypatch.setenv("BUDGETLENS_LEDGER_LEASE_S", "soon")
    with pytest.raises(ValueError, match="BUDGETLENS_LEDGER_LEASE_S"):
        shared_client(ledger)
    for bad in ("residual", "residual:0", "residual:2", "allow"):
        with pytest.raises(ValueError, match="'block' or 'residual:F'"):
            parse_offline(bad)
    assert parse_offline("residual:0.1") == OfflinePolicy(0.1)


def test_rolling_windows_stay_in_process(ledger):
    with pytest.raises(ValueError, match="in-process only"):
        SpendTracker({"daily": 1.0, "24h": 2.0}, ledger=ledger)


# --- SpendTracker and TokenPool on one ledger, as two processes ----------------------------------
def test_two_processes_share_one_daily_limit(ledger):
    a = SpendTracker({"daily": 1.0}, ledger=process(ledger), clock=Clock())
    b = SpendTracker({"daily": 1.0}, ledger=process(ledger), clock=Clock())
    a.reserve(0.6, call_id="a1")
    with pytest.raises(BudgetExceeded) as refused:
        b.reserve(0.6, call_id="b1")
    assert (
        refused.value.reason == STOP_BUDGET_COST and "daily spend window 2026-05-28" in refused.value.detail
    )
    a.settle(0.6, 0.5, call_id="a1")
    a.settle(0.6, 0.5, call_id="a1")  # retried: charged once
    b.reserve(0.5, call_id="b1")
    assert (b.spent("daily"), b.reserved("daily")) == (pytest.approx(0.5), pytest.approx(0.5))


def test_the_window_starts_again_at_local_midnight(ledger):
    clock = Clock(DAY)
    tracker = SpendTracker({"daily": 1.0}, ledger=ledger, tz="Europe/Berlin", clock=clock)
    tracker.add(1.0)
    with pytest.raises(BudgetExceeded):
        tracker.check()
    clock.now += 24 * 3600
    tracker.check()
    assert tracker.spent("daily") == 0.0


def test_scopes_are_separate_budgets(ledger):
    team_a = SpendTracker({"daily": 1.0}, ledger=ledger, scope={"team": "a"})
    team_b = SpendTracker({"daily": 1.0}, ledger=ledger, scope={"team": "b"})
    team_a.add(1.0)
    with pytest.raises(BudgetExceeded):
        team_a.check()
    team_b.check()
    team_b.reserve(0.9, call_id="x")


def test_the_alert_fires_once_for_the_fleet(ledger):
    alerts = []
    trackers = [
        SpendTracker({"daily": 1.0}, ledger=process(ledger), on_alert=alerts.append, clock=Clock())
        for _ in range(3)
    ]
    for i in range(8):
        trackers[i % 3].add(0.125)
    assert [(a.window, a.period, a.percent) for a in alerts] == [("daily", "2026-05-28", 87.5)]


def test_a_shared_pool_is_drawn_by_every_process(ledger):
    alerts = []
    a = TokenPool(1_000, name="nightly", ledger=process(ledger), on_alert=alerts.append)
    b = TokenPool(1_000, name="nightly", ledger=process(ledger), on_alert=alerts.append)
    a.reserve(700, call_id="a1")
    with pytest.raises(BudgetExceeded) as refused:
        b.reserve(400, call_id="b1")
    assert refused.value.reason == STOP_BUDGET_TOKENS and refused.value.detail == "token pool nightly"
    a.settle(700, 850, call_id="a1")
    assert (b.used_tokens, b.reserved_tokens, b.remaining_tokens) == (850, 0, 150)
    assert [alert.used_tokens for alert in alerts] == [850]
    with pytest.raises(BudgetExceeded):
        TokenPool(850, name="nightly", ledger=ledger).check()


def test_runs_in_two_processes_stop_at_one_limit(ledger):
    spend = [SpendTracker({"daily": 0.02}, ledger=process(ledger), clock=Clock()) for _ in range(2)]
    pool = [TokenPool(5_000, name="batch", ledger=process(ledger)) for _ in range(2)]
    first = RunBudget(spend=spend[0], pool=pool[0], max_total_tokens=None)
    second = RunBudget(spend=spend[1], pool=pool[1], max_total_tokens=None)
    held = first.reserve(3_000, model="gpt-4o", output_tokens=1_000)
    with pytest.raises(BudgetExceeded) as refused:
        second.reserve(3_000, model="gpt-4o", output_tokens=1_000)
    assert refused.value.reason in (STOP_BUDGET_COST, STOP_BUDGET_TOKENS)
    first.record({"input_tokens": 1_000, "output_tokens": 200}, model="gpt-4o", reservation=held)
    assert pool[1].used_tokens == 1_200 and pool[1].reserved_tokens == 0
    assert spend[1].spent("daily") == pytest.approx(first.stats().cost_usd)
    again = second.reserve(3_000, model="gpt-4o", output_tokens=1_000)
    second.release(again)
    assert spend[0].reserved("daily") == 0.0 and pool[0].reserved_tokens == 0


def test_open_reservations_at_finish_are_charged_once(ledger):
    spend = SpendTracker({"daily": 1.0}, ledger=ledger)
    run = RunBudget(spend=spend, max_total_tokens=None)
    held = run.reserve(2_000, model="gpt-4o")
    run.finish()
    assert spend.spent("daily") == pytest.approx(held.cost_usd)
    assert spend.reserved("daily") == 0.0


# --- leases and the offline policy ---------------------------------------------------------------
class Flaky:
    """A backend that is down while ``down`` is set (a network partition)."""

    def __init__(self, inner) -> None:
        self.inner, self.down, self.calls = inner, False, 0

    def __getattr__(self, name):
        method = getattr(self.inner, name)
        if name == "close":
            return method

        def call(*args):
            self.calls += 1
            if self.down:
                raise LedgerUnavailable("partitioned")
            return method(*args)

        return call


def test_block_refuses_while_the_ledger_is_unreachable(ledger):
    flaky = Flaky(ledger)
    tracker = SpendTracker({"daily": 1.0}, ledger=process(flaky))
    flaky.down = True
    with pytest.raises(BudgetExceeded, match="ledger unreachable"):
        tracker.reserve(0.1, call_id="a")
    with pytest.raises(BudgetExceeded, match="ledger unreachable"):
        tracker.check()
    pool = TokenPool(100, ledger=process(flaky))
    with pytest.raises(BudgetExceeded, match="ledger unreachable"):
        pool.reserve(1, call_id="a")


def test_a_run_refused_while_the_ledger_is_unreachable_says_so(ledger):
    # before, RunBudget replaced every spend-window refusal's detail with "spend window": a block
    # by the offline policy read as a window that was full
    flaky = Flaky(ledger)
    client = process(flaky)
    tracker = SpendTracker({"daily": 1.0}, ledger=client, clock=Clock())
    run = RunBudget(run_id="r1", spend=tracker, max_total_tokens=10**6)
    run.reserve(200_000, model="gpt-4o-mini")  # the ledger answers: held (about $0.03)
    flaky.down = True
    with pytest.raises(BudgetExceeded) as refused:
        RunBudget(run_id="r2", spend=tracker, max_total_tokens=10**6).reserve(200_000, model="gpt-4o-mini")
    assert refused.value.reason == STOP_BUDGET_COST
    assert refused.value.detail == "daily spend window: ledger unreachable (offline policy block)"
    flaky.down = False
    assert client.renew_now() == 1  # back: r1's hold is renewed
    tracker.add(0.99)
    with pytest.raises(BudgetExceeded) as refused:  # reachable and full: the window and its day
        RunBudget(run_id="r3", spend=tracker, max_total_tokens=10**6).reserve(200_000, model="gpt-4o-mini")
    assert refused.value.detail.startswith("daily spend window 2026-05-2")


def test_residual_allows_a_bounded_share_offline_and_sends_the_charges_later(ledger):
    flaky = Flaky(ledger)
    client = process(flaky, offline="residual:0.25")
    tracker = SpendTracker({"daily": 1.0}, ledger=client, clock=Clock())
    tracker.add(0.5)
    flaky.down = True
    tracker.reserve(0.2, call_id="a")
    with pytest.raises(BudgetExceeded, match="residual"):
        tracker.reserve(0.1, call_id="b")  # 0.2 held + 0.1 > 0.25 x $1.00
    tracker.settle(0.2, 0.2, call_id="a")  # waits in the outbox
    assert client.pending_settles == 1
    tracker.check()  # residual: the guard goes on within its share
    flaky.down = False
    assert client.renew_now() == 0 and client.pending_settles == 0
    assert ledger.balances([tracker._shared.key("daily")]).popitem()[1].spent == pytest.approx(0.7)


def test_residual_never_passes_the_spend_last_seen(ledger):
    flaky = Flaky(ledger)
    tracker = SpendTracker({"daily": 1.0}, ledger=process(flaky, offline="residual:0.5"), clock=Clock())
    tracker.add(0.9)
    flaky.down = True
    with pytest.raises(BudgetExceeded):
        tracker.reserve(0.2, call_id="a")  # only $0.10 was left when it was last seen


def test_the_client_renews_its_live_holds(ledger):
    client = process(ledger, lease_s=30)
    tracker = SpendTracker({"daily": 1.0}, ledger=client)
    tracker.reserve(0.5, call_id="a")
    assert client.renew_now() == 1
    tracker.settle(0.5, 0.4, call_id="a")
    assert client.renew_now() == 0
    client.close()
    client.close()


def test_a_hold_is_renewed_for_at_most_max_hold_s(ledger, monkeypatch):
    client = process(ledger, lease_s=1, max_hold_s=1)
    SpendTracker({"daily": 1.0}, ledger=client).reserve(0.5, call_id="a")
    import budgetlens.guard.ledgers.client as client_module

    later = client_module.time.monotonic() + 5
    monkeypatch.setattr(client_module.time, "monotonic", lambda: later)
    assert client.renew_now() == 0


def test_a_failure_is_not_waited_for_again_within_a_second(ledger, monkeypatch):
    flaky = Flaky(ledger)
    client = process(flaky)
    tracker = SpendTracker({"daily": 1.0}, ledger=client)
    flaky.down = True
    for _ in range(3):
        with pytest.raises(BudgetExceeded, match="ledger unreachable"):
            tracker.reserve(0.1, call_id="a")
    assert flaky.calls == 1  # the next two applied the policy at once
    flaky.down = False
    import budgetlens.guard.ledgers.client as client_module

    later = client_module.time.monotonic() + 1.5
    monkeypatch.setattr(client_module.time, "monotonic", lambda: later)
    tracker.reserve(0.1, call_id="a")
    assert flaky.calls == 2
