"""A worker process of the shared-ledger system tests: runs guarded "calls" against one daily
limit of the ledger in ``BUDGETLENS_LEDGER`` and logs what happened, one JSON line per event
(written with one ``os.write``, so a kill -9 never leaves half a line).

``python _ledger_worker.py LOG WORKER RUNS LIMIT_USD SEED [POOL_TOKENS]``: runs number ``done .. RUNS-1`` (a
restarted worker goes on after the last run it started). Per run: ``start``; then ``refused``
(with the refusal's numbers, its detail and the time) or ``paid`` (the provider "charged" ``actual`` USD
against the reservation's ``estimate``), then ``settled`` once the ledger has the charge (or
``pending`` while it waits in the outbox). A tenth of the settles are sent twice (a retry).
With ``POOL_TOKENS`` the runs also draw from one shared token pool ``batch`` of that size.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid

from budgetlens import BudgetExceeded, RunBudget, SpendTracker, TokenPool
from budgetlens.guard.ledgers import shared_client
from budgetlens.pricing import price_call
from budgetlens.usage import Usage

MODEL = "gpt-4o-mini"
DAY = 1_780_000_000.0  # the window's day is fixed: the test never straddles midnight
INPUT_TOKENS, OUTPUT_TOKENS = 1_000, 500


def main(log_path: str, worker: int, runs: int, limit_usd: float, seed: int, pool_tokens: int = 0) -> None:
    done = 0
    if os.path.exists(log_path):
        with open(log_path) as log:
            done = sum(1 for line in log if '"start"' in line)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(event: str, **fields) -> None:
        record = {"event": event, "worker": worker, "t": time.time(), **fields}
        os.write(fd, (json.dumps(record) + "\n").encode())

    rng = random.Random(seed * 1000 + done)
    tracker = SpendTracker({"daily": limit_usd}, clock=lambda: DAY)
    pool = TokenPool(pool_tokens, name="batch") if pool_tokens else None
    client = shared_client()
    assert client is not None, "BUDGETLENS_LEDGER is not set"
    log("up", pid=os.getpid(), first_run=done)
    for i in range(done, runs):
        run_id = f"w{worker}-r{i}-{uuid.uuid4().hex[:8]}"
        log("start", run=i, run_id=run_id)
        run = RunBudget(run_id=run_id, spend=tracker, pool=pool, max_total_tokens=None)
        try:
            res = run.reserve(INPUT_TOKENS + OUTPUT_TOKENS, model=MODEL, output_tokens=OUTPUT_TOKENS)
        except BudgetExceeded as refused:
            log("refused", run=i, used=refused.used, requested=refused.requested, detail=refused.detail)
            run.finish()
            if refused.used + refused.requested <= limit_usd:
                time.sleep(0.2)  # it fitted: the ledger was unreachable; back off as a queue would
            continue
        time.sleep(rng.uniform(0.01, 0.03))  # the model call (long enough that the test's kills land mid-run)
        usage = Usage(INPUT_TOKENS, round(OUTPUT_TOKENS * rng.uniform(0.3, 1.6)))
        actual = price_call(MODEL, usage).cost_usd
        log("paid", run=i, run_id=run_id, estimate=res.cost_usd, actual=actual, tokens=usage.total_tokens)
        run.record(usage, model=MODEL, reservation=res)
        if rng.random() < 0.1:  # a retried settle: the ledger charges it once
            tracker.settle(res.cost_usd, actual, call_id=f"{run_id}:{res.id}")
        log("settled" if client.pending_settles == 0 else "pending", run=i, run_id=run_id)
        run.finish()
    deadline = time.monotonic() + 30
    while client.pending_settles and time.monotonic() < deadline:
        client.renew_now()
        time.sleep(0.2)
    log("done", pending=client.pending_settles)
    client.close()


if __name__ == "__main__":
    pool_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), pool_tokens)
