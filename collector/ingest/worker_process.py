"""What runs in a decode worker process besides its bodies (``budgetlens.ingest.decode_pool``):
its start (priority, signals, exit with the collector, the Arrow allocator) and its warm-ups."""

from __future__ import annotations

import logging

from budgetlens.ingest.heap import use_system_memory_pool

log = logging.getLogger(__name__)

__all__ = ["WORKER_NICENESS", "exit_with", "init_worker", "log_failed_start", "load_prices", "warm_up"]

#: How much lower than the collector's the workers' CPU priority is (nice steps). 0: every body
#: is mapped there, so they are the request path (at +10, a busy machine starved them until the
#: exporters timed out); the event loop still answers at once (it mostly sleeps, and the
#: scheduler runs a waking sleeper first). The loader thread keeps its +10.
WORKER_NICENESS = 0
#: The decode worker's garbage-collector thresholds (``gc.set_threshold``): a body's rows are
#: thousands of short-lived dicts freed by reference counting, and at the default 700 a
#: generation-0 pass ran every few spans. With the imports frozen (``gc.freeze``) the passes
#: that remain skip them.
WORKER_GC_THRESHOLD = (50_000, 50, 1000)


def freeze_heap() -> None:
    """Move every object alive now (the imports, the price data) out of the collector's reach."""
    import gc

    gc.collect()
    gc.freeze()


def exit_with(pid: int) -> None:
    """Block until process ``pid`` ends, then end this process. A pool's workers hold the
    write end of their own task pipe, so they never see it close when the collector is
    killed; without this they (and the forkserver) would outlive it."""
    import os
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3): poll
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass
            time.sleep(1.0)
    select.select([fd], [], [])
    os._exit(0)


def warm_up() -> int:
    return 0


def log_failed_start(warm) -> None:
    if not warm.cancelled() and warm.exception() is not None:
        log.error("a decode worker did not start: %s", warm.exception())


def load_prices() -> int:
    """A large-body worker's first task after the first one's: load the price data while it
    waits for its body. (Not in the initializer: the worker started with the pool would load
    it while the collector loads it for its first in-process body, the two on a 2-core machine;
    the first small body waited 1.9-2.2 s instead of 0.8-1.1 s. That first worker loads it with
    its first body.)"""
    from budgetlens.pricing import warm_prices

    warm_prices()
    freeze_heap()
    return 0


def init_worker(collector_pid: int) -> None:
    """In each worker: ignore SIGINT (a Ctrl-C reaches the whole process group; the collector
    handles it and stops the workers itself), exit with the collector (even after ``kill -9``),
    lower the CPU priority (``WORKER_NICENESS``), let Arrow hand freed memory back to the OS,
    import the mapping and freeze it with a higher gc threshold (``WORKER_GC_THRESHOLD``)."""
    import gc
    import os
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_with, args=(collector_pid,), daemon=True).start()
    use_system_memory_pool()
    try:
        if WORKER_NICENESS:
            os.nice(WORKER_NICENESS)
    except OSError as error:  # not permitted: keep the priority
        log.debug("decode worker priority unchanged: %s", error)
    import budgetlens.ingest.decode_pool  # noqa: F401  (the tasks' module: imported before the freeze)

    freeze_heap()
    gc.set_threshold(*WORKER_GC_THRESHOLD)
