"""Seeded sample data: agent runs as the guard would record them, and the committed sample.

``generate_sample`` simulates ``days`` days of agent runs over the seeds' task types with their
typical sizes (tables below), turn by turn under a ``RunBudget``-like guard: a reservation that
does not fit stops the run before the call (``budget_tokens``), as do the turn, tool-call, time
and cost limits; a warning at 80 %, a downgrade along a model chain and context summaries are
span events. It yields store rows (dicts keyed by ``budgetlens.store.schema`` columns) with
``source = "sample"``. Costs come from ``budgetlens.pricing.cost_usd`` (genai-prices); one model
is deliberately unpriced. The same ``seed``, ``days``, ``runs_per_day`` and ``end_utc`` give the
same rows.

Ids name the generation (``generation_id``): run ``sample-20261128-s7-000123`` (end date, seed,
run number; a non-default ``days`` or ``runs_per_day`` adds ``-d7`` / ``-r50``), its calls
``<run_id>.c001``, events ``<run_id>.e000``, run span ``<run_id>.run``, and a trace id of a hash
of the generation then the run number. Writing the same generation twice adds nothing; two
different generations (another end date, seed, span or volume) never share an id, so they can
sit in one store side by side.

What the data shows: heavy tails, 2 % runaway loops at 10-50x normal (before the limits came into
force they run to the end; after, the guard stops them), limits in force from day 4, cache and
reasoning tokens, a little unknown usage (streams without usage, failed calls: the reservation
is kept, never 0), a weekday/weekend and day/night rhythm, and one incident day (a bad deploy:
more runs and many runaways in ``code_generation`` and ``tool_use``).

The committed portable sample (gzip JSONL) is written and read by ``budgetlens.sample.file``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import random
from collections.abc import Iterator

from budgetlens.sample.profile import (  # DOWNGRADE_CHAIN, INCIDENT: re-exported
    DOWNGRADE_CHAIN,  # noqa: F401
    HOURLY,
    INCIDENT,
    LIMITS_FROM_DAY,
    TASK_TYPES,
    WEEKEND_FACTOR,
)
from budgetlens.sample.run import SimulatedRun

__all__ = [
    "SAMPLE_END_UTC",
    "SAMPLE_SEED",
    "TASK_TYPES",
    "default_end_utc",
    "generate_sample",
    "generation_id",
    "write_sample",
]

log = logging.getLogger(__name__)

#: The committed sample ends here (exclusive), so the demo is the same on every machine.
SAMPLE_END_UTC = dt.datetime(2026, 11, 28)
SAMPLE_SEED = 7


def default_end_utc() -> dt.datetime:
    today = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return dt.datetime(today.year, today.month, today.day)


def generation_id(seed: int, end_utc: dt.datetime, days: int = 14, runs_per_day: int = 300) -> str:
    """The id prefix of one generation, e.g. ``sample-20261128-s7`` (end date, seed).

    ``end_utc`` is the exclusive end (naive UTC); a time other than midnight adds it
    (``sample-20261128T063000-s7``). ``days`` other than 14 adds ``-d<days>`` and
    ``runs_per_day`` other than 300 adds ``-r<runs>``, so every set of arguments that gives other
    rows gives other ids.
    """
    stamp = f"{end_utc:%Y%m%d}"
    if end_utc.time() != dt.time():
        stamp += f"T{end_utc:%H%M%S}" + (f".{end_utc:%f}" if end_utc.microsecond else "")
    tag = f"sample-{stamp}-s{seed}"
    if days != 14:
        tag += f"-d{days}"
    if runs_per_day != 300:
        tag += f"-r{runs_per_day}"
    return tag


def generate_sample(
    days: int = 14,
    seed: int = SAMPLE_SEED,
    runs_per_day: int = 300,
    end_utc: dt.datetime | None = None,
) -> Iterator[tuple[list[dict], list[dict], list[dict]]]:
    """Yield one (calls, records, events) batch of store rows per simulated day.

    ``days`` days end at ``end_utc`` (exclusive, naive UTC; default: today 00:00 UTC);
    ``runs_per_day`` is a weekday's volume. Raises ValueError for days < 1 (or reaching back
    before the year 1) or runs_per_day < 1.
    """
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days!r}")
    if runs_per_day < 1:
        raise ValueError(f"runs_per_day must be >= 1, got {runs_per_day!r}")
    end = end_utc or default_end_utc()
    try:
        first = end - dt.timedelta(days=days)
    except OverflowError:
        raise ValueError(f"days must reach no further back than the year 1, got {days!r}") from None
    rng = random.Random(seed)
    prefix = generation_id(seed, end, days, runs_per_day)
    # trace ids: 32 hex digits (OTel), the generation's hash then the run number
    trace_prefix = hashlib.sha256(prefix.encode()).hexdigest()[:16]
    names = list(TASK_TYPES)
    weights = [TASK_TYPES[t]["weight"] for t in names]
    incident_day = days - INCIDENT.day_from_end if days > INCIDENT.day_from_end else None
    number = 0
    for day in range(days):
        day_start = first + dt.timedelta(days=day)
        volume = runs_per_day * (WEEKEND_FACTOR if day_start.weekday() >= 5 else 1.0)
        if day == incident_day:
            volume *= INCIDENT.volume
        calls, records, events = [], [], []
        for _ in range(max(1, round(rng.gauss(volume, volume**0.5)))):
            number += 1
            hour = rng.choices(range(24), HOURLY)[0]
            start = day_start + dt.timedelta(hours=hour, seconds=rng.uniform(0, 3600))
            task = rng.choices(names, weights)[0]
            run = SimulatedRun(
                rng,
                f"{prefix}-{number:06d}",
                f"{trace_prefix}{number:016x}",
                task,
                start,
                day >= LIMITS_FROM_DAY,
                incident=(day == incident_day and task in INCIDENT.task_types),
            )
            run.simulate()
            calls += run.calls
            records.append(run.record())
            events += run.events
        yield calls, records, events


# --- writing to the store -----------------------------------------------------------------------
def write_sample(
    db_path,
    days: int = 14,
    seed: int = SAMPLE_SEED,
    runs_per_day: int = 300,
    end_utc: dt.datetime | None = None,
) -> int:
    """Generate a sample into the store at ``db_path`` (created if missing); return the runs.

    Writes one batch per day through ``budgetlens.store`` (idempotent: the same arguments twice add
    nothing). Raises StoreError when another process holds the file too long.
    """
    from budgetlens.store import write_batch, write_connection

    runs = 0
    for calls, records, events in generate_sample(days, seed, runs_per_day, end_utc):
        with write_connection(db_path) as conn:
            write_batch(conn, calls, records, events)
        runs += len(records)
    log.info("wrote %d sample runs to %s", runs, db_path)
    return runs
