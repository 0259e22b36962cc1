"""The shared ledger with real parts: PostgreSQL (a throwaway server), worker processes killed
with -9, and the collector serving its ledger over HTTP."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests
from _collector_helpers import collector_process, live_collector
from _ledger_helpers import LedgerPostgres

from budgetlens import BudgetExceeded, SpendTracker
from budgetlens.guard.ledgers import LedgerClient
from budgetlens.guard.ledgers.http import HttpLedger
from budgetlens.guard.ledgers.postgres import PostgresLedger

pytestmark = pytest.mark.system

WORKER = str(Path(__file__).with_name("_ledger_worker.py"))
DAY_KEY = "spend:daily:UTC:2026-05-28|*"  # the workers' window (their clock is fixed on that day)


def _spawn(log: Path, worker: int, runs: int, limit: float, env: dict, pool: int = 0) -> subprocess.Popen:
    with open(log.with_suffix(".stderr"), "ab") as stderr:  # the worker's warnings, for a failure
        return subprocess.Popen(
            [sys.executable, WORKER, str(log), str(worker), str(runs), str(limit), str(worker), str(pool)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _stderr(log: Path) -> str:
    return log.with_suffix(".stderr").read_text()[-3000:]


def _events(logs: list[Path]) -> list[dict]:
    return [json.loads(line) for log in logs if log.exists() for line in log.read_text().splitlines()]


def _env(url: str, lease_s: float, **extra: str) -> dict:
    env = dict(os.environ, BUDGETLENS_LEDGER=url, BUDGETLENS_LEDGER_LEASE_S=str(lease_s), **extra)
    env.pop("BUDGETLENS_LEDGER_OFFLINE", None)  # block: the default policy
    return env


def test_a_fleet_stays_within_the_bound_through_kills_and_a_ledger_restart(tmp_path):
    workers, runs, limit, lease_s = 8, 200, 0.4, 4.0  # ~920 of the 1,600 runs fit the limit
    rng = random.Random(19)
    logs = [tmp_path / f"worker{w}.log" for w in range(workers)]
    with LedgerPostgres() as pg:
        env = _env(pg.url, lease_s)
        procs = [_spawn(logs[w], w, runs, limit, env) for w in range(workers)]
        kills, outage, deadline = 0, None, time.monotonic() + 240
        spawns = [1] * workers
        try:
            while any(p.poll() is None for p in procs):
                assert time.monotonic() < deadline, "the fleet did not finish in 240 s"
                time.sleep(rng.uniform(0.1, 0.4))  # ten kills while a fast fleet still runs
                events = _events(logs)
                started = sum(1 for e in events if e["event"] == "start")
                if outage is None and started > 0.4 * workers * runs:
                    stopped = time.time()
                    pg.stop()  # the ledger's server goes away (as a crash) and comes back
                    time.sleep(1.0)
                    pg.start()  # within the lease: the live workers' holds outlast the outage
                    outage = (stopped, time.time())
                # kill -9 a worker in the middle of its runs (not while it starts), then restart it
                last = {e["worker"]: e["event"] for e in events}
                ups = [
                    sum(1 for e in events if e["worker"] == w and e["event"] == "up") for w in range(workers)
                ]
                busy = [
                    w
                    for w, p in enumerate(procs)
                    if p.poll() is None and ups[w] == spawns[w] and last[w] not in ("up", "done")
                ]
                if busy and kills < 10:
                    w = rng.choice(busy)
                    procs[w].send_signal(signal.SIGKILL)
                    procs[w].wait()
                    kills += 1
                    procs[w] = _spawn(logs[w], w, runs, limit, env)
                    spawns[w] += 1
            for w, p in enumerate(procs):
                assert p.returncode == 0, _stderr(logs[w])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        time.sleep(lease_s + 0.5)  # every hold a killed worker left has passed its lease
        with psycopg.connect(pg.url) as conn:
            spent = conn.execute(
                "SELECT spent FROM budgetlens_ledger_accounts WHERE key = %s", (DAY_KEY,)
            ).fetchone()[0]
            settled = conn.execute(
                "SELECT call_id, amount FROM budgetlens_ledger_settled WHERE %s = ANY (keys)", (DAY_KEY,)
            ).fetchall()
            live_holds = conn.execute(
                "SELECT count(*) FROM budgetlens_ledger_holds WHERE expires_at > now()"
            ).fetchone()[0]
        tracker = SpendTracker({"daily": limit}, ledger=PostgresLedger(pg.url), clock=lambda: 1_780_000_000.0)
        room = limit - spent
        if room > 1e-9:  # the window has room again once the leases ended: it is not refused
            tracker.reserve(room - 1e-9, call_id="after")

    events = _events(logs)
    assert kills >= 8 and outage is not None
    assert sum(1 for e in events if e["event"] == "up") == workers + kills  # each killed mid-runs
    for w in range(workers):  # every run of every worker was tried, through the kills
        assert {e["run"] for e in events if e["worker"] == w and e["event"] == "start"} == set(range(runs))
    paid = {e["run_id"]: e for e in events if e["event"] == "paid"}
    confirmed = {e["run_id"] for e in events if e["event"] == "settled"}
    charged: dict[str, float] = {}
    for call_id, amount in settled:  # spend|*|<run id>:<reservation>#<attempt>
        run_id = call_id.split("|")[2].split(":")[0]
        assert run_id not in charged, f"run {run_id} charged twice"
        assert run_id in paid, f"charge {call_id} of a run that never paid"
        charged[run_id] = amount
        assert amount == pytest.approx(paid[run_id]["actual"], abs=1e-12)
    assert confirmed <= set(charged), "a settle the worker saw confirmed is not in the ledger"
    assert spent == pytest.approx(sum(charged.values()), abs=1e-9)  # each charge counted once
    assert live_holds == 0  # no hold outlives its lease

    # the bound (docs/fleet.md): at most one call per worker in flight, each short of its
    # estimate by at most the largest shortfall; plus what killed workers paid and never settled
    # (the outage is shorter than the lease: no live worker's hold ended before its settle)
    shortfall = max(max(0.0, e["actual"] - e["estimate"]) for e in paid.values())
    bound = workers * shortfall
    lost = sum(e["actual"] for run_id, e in paid.items() if run_id not in charged)
    assert spent <= limit + bound + 1e-9
    assert sum(e["actual"] for e in paid.values()) <= limit + bound + lost + 1e-9
    assert any(e["used"] + e["requested"] > limit for e in events if e["event"] == "refused")

    # a refusal either did not fit, or was the offline policy's block while the ledger's server was
    # down: it names the unreachable ledger, and comes after the outage began and before the
    # workers' reconnects (a connection the stop broke is seen as down one retry later, and a busy
    # machine can take seconds to reconnect: the window is generous, the detail is the check)
    for e in (e for e in events if e["event"] == "refused"):
        if e["used"] + e["requested"] <= limit + 1e-9:
            why = f"refused with room: {e}" + _stderr(logs[e["worker"]])
            assert "ledger unreachable" in e["detail"], why
            assert outage[0] - 0.5 <= e["t"] <= outage[1] + 15.0, why


def test_a_worker_killed_while_holding_frees_the_window_within_its_lease(tmp_path):
    lease_s = 2.0
    with LedgerPostgres() as pg:
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time; from budgetlens import SpendTracker\n"
                "t = SpendTracker({'daily': 1.0})\n"
                "t.reserve(0.9, call_id='big'); print('held', flush=True); time.sleep(600)",
            ],
            env=_env(pg.url, lease_s),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            tracker = SpendTracker(
                {"daily": 1.0}, ledger=LedgerClient(PostgresLedger(pg.url), lease_s=lease_s)
            )
            time.sleep(lease_s * 1.5)  # alive: its renewals keep the hold past the lease
            with pytest.raises(BudgetExceeded):
                tracker.reserve(0.5, call_id="mine")
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            killed = time.monotonic()
            while True:
                try:
                    tracker.reserve(0.5, call_id="mine")
                    break
                except BudgetExceeded:
                    assert time.monotonic() - killed < lease_s + 1.0, (
                        "the dead worker's hold outlived its lease"
                    )
                    time.sleep(0.1)
            assert tracker.reserved("daily") == pytest.approx(0.5)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


def test_processes_share_one_window_and_pool_through_the_collector(tmp_path, db_path, free_port):
    workers, runs, limit, pool = 3, 60, 0.05, 60_000  # the pool binds first (about 40 runs)
    logs = [tmp_path / f"worker{w}.log" for w in range(workers)]
    with live_collector(db_path, free_port, token="s3cret") as live:
        bad = requests.post(f"{live.url}/v1/ledger/reserve", json={"call_id": "x"}, timeout=5)
        assert bad.status_code == 401
        bad = requests.post(
            f"{live.url}/v1/ledger/reserve",
            json={"call_id": "x", "accounts": [["k", -1]], "amount": 1, "lease_s": 5},
            headers={"Authorization": "Bearer s3cret"},
            timeout=5,
        )
        assert bad.status_code == 400 and "accounts[0] limit must be >= 0" in bad.json()["error"]
        env = _env(live.url, 5.0, BUDGETLENS_COLLECTOR_TOKEN="s3cret")
        procs = [_spawn(logs[w], w, runs, limit, env, pool) for w in range(workers)]
        for w, p in enumerate(procs):
            assert p.wait(120) == 0, _stderr(logs[w])
        ledger = HttpLedger(live.url, token="s3cret")
        balance = ledger.balances([DAY_KEY])[DAY_KEY]
        tokens = ledger.balances(["pool:batch|*"])["pool:batch|*"]
        wrong = LedgerClient(HttpLedger(live.url, token="wrong"))
        assert wrong.reserve("w", [(DAY_KEY, 10.0)], 0.001).detail.startswith("ledger unreachable")
    events = _events(logs)
    paid = [e for e in events if e["event"] == "paid"]
    assert sum(e["actual"] for e in paid) == pytest.approx(balance.spent)  # every call charged once
    assert sum(e["tokens"] for e in paid) == tokens.spent
    assert balance.held == 0 and tokens.held == 0
    shortfall = max(max(0, e["tokens"] - 1_500) for e in paid)  # each reserved 1,500 tokens
    assert pool - 1_500 * workers <= tokens.spent <= pool + workers * shortfall
    assert balance.spent < limit and any(e["event"] == "refused" for e in events)


def test_the_collector_keeps_its_ledger_across_a_restart(python, db_path):
    with collector_process(python, db_path) as (_, url):
        ledger = HttpLedger(url)
        assert ledger.reserve("held", [("k", 1.0)], 0.25, 60) is None
        assert ledger.settle("paid", ["k"], 0.5) == {"k": 0.5}
    with collector_process(python, db_path) as (_, url):
        ledger = HttpLedger(url)
        assert ledger.settle("paid", ["k"], 0.5) is None  # a retry after the restart: charged once
        balance = ledger.balances(["k"])["k"]
        assert (balance.spent, balance.held) == (0.5, 0.25)
