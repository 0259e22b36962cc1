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
import math
import random
from collections.abc import Iterator
from typing import NamedTuple

from budgetlens import semconv as sc
from budgetlens.pricing import cost_usd
from budgetlens.usage import Usage

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

# --- the tables: task types, sizes, rhythms ----------------------------------------------------
#: weight: share of runs; tokens: 10th-90th percentile of a run's total tokens (lognormal);
#: turns: model calls (uniform); tools: mean tool calls per turn; out: output share of tokens;
#: models: (model, provider, weight); limits: the limits in force from day LIMITS_FROM_DAY.
TASK_TYPES: dict[str, dict] = {
    "simple_qa": dict(
        weight=0.34,
        tokens=(2_000, 5_000),
        turns=(1, 3),
        tools=0.3,
        out=0.25,
        service="support-bot",
        models=[
            ("gpt-4.1-mini", "openai", 0.6),
            ("claude-haiku-4-5", "anthropic", 0.3),
            ("llama-3.1-8b-instruct", "vllm", 0.1),
        ],
        limits=dict(total_tokens=7_000, turns=5, tool_calls=8, duration_s=60.0),
    ),
    "tool_use": dict(
        weight=0.25,
        tokens=(5_000, 10_000),
        turns=(2, 5),
        tools=1.3,
        out=0.15,
        service="ops-agent",
        models=[("gpt-4.1-mini", "openai", 0.5), ("gemini-2.5-flash", "google", 0.5)],
        limits=dict(total_tokens=12_000, turns=8, tool_calls=12, duration_s=120.0),
    ),
    "complex_reasoning": dict(
        weight=0.15,
        tokens=(15_000, 40_000),
        turns=(3, 8),
        tools=0.5,
        out=0.35,
        service="analyst",
        models=[("o4-mini", "openai", 0.6), ("claude-sonnet-4-5", "anthropic", 0.4)],
        limits=dict(total_tokens=48_000, turns=12, cost_usd=0.60),
    ),
    "code_generation": dict(
        weight=0.16,
        tokens=(20_000, 60_000),
        turns=(5, 14),
        tools=1.5,
        out=0.3,
        service="coder",
        models=[("claude-sonnet-4-5", "anthropic", 0.7), ("gpt-4.1", "openai", 0.3)],
        limits=dict(total_tokens=60_000, turns=24, tool_calls=40, duration_s=600.0),
    ),
    "research": dict(
        weight=0.10,
        tokens=(50_000, 150_000),
        turns=(8, 20),
        tools=2.0,
        out=0.1,
        service="research-assistant",
        models=[("gemini-2.5-flash", "google", 0.5), ("claude-sonnet-4-5", "anthropic", 0.5)],
        limits=dict(total_tokens=105_000, turns=30, tool_calls=60, cost_usd=1.50),
    ),
}
#: The guard's actions (fractions of the token limit): downgrade once along the chain; summarize
#: (halves the context of later turns) for research; a warning for everyone.
DOWNGRADE_CHAIN = {
    "claude-sonnet-4-5": "claude-haiku-4-5",
    "gpt-4.1": "gpt-4.1-mini",
    "o4-mini": "gpt-4.1-mini",
}
DOWNGRADE_AT = {"code_generation": 0.7, "complex_reasoning": 0.75}
SUMMARIZE_AT = {"research": 0.6}
WARNING_AT = 0.8
PROVIDERS = {"claude-haiku-4-5": "anthropic", "gpt-4.1-mini": "openai"}
TOOLS = ("search", "read_file", "run_tests", "web_fetch", "sql_query", "calculator")
#: Runs per weekday at the default rate; weekends run at WEEKEND_FACTOR of it.
WEEKEND_FACTOR = 0.35
#: Relative load per UTC hour (a business-hours bump spanning Europe and the Americas).
HOURLY = [1, 1, 1, 1, 1, 2, 3, 5, 7, 8, 9, 9, 8, 9, 10, 10, 9, 8, 6, 4, 3, 2, 2, 1]
RUNAWAY_SHARE = 0.02
RUNAWAY_FACTOR = (10, 50)
TAIL_SHARE = 0.08
LIMITS_FROM_DAY = 4
#: The incident day (index from the first day): a bad deploy of these task types.


class _Incident(NamedTuple):
    """The incident day: ``day_from_end`` days before the end, ``volume`` x the usual runs,
    ``runaway_share`` of the ``task_types`` runs loop away."""

    day_from_end: int
    volume: float
    runaway_share: float
    task_types: tuple[str, ...]


INCIDENT = _Incident(
    day_from_end=5, volume=1.6, runaway_share=0.3, task_types=("code_generation", "tool_use")
)
FAIL_SHARE = 0.0015  # calls that fail (usage unknown, the run ends 'failed')
NO_USAGE_SHARE = 0.004  # streamed calls that report no usage (usage unknown, run goes on)
ERRORS = ("RateLimitError", "APITimeoutError", "InternalServerError")

SOURCE = "sample"


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
            run = _Run(
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


class _Run:
    """One simulated run under the guard's rules (see the module docstring)."""

    def __init__(self, rng, run_id, trace_id, task, start, limited, incident):
        spec = TASK_TYPES[task]
        self.rng, self.task, self.spec, self.start = rng, task, spec, start
        self.run_id, self.trace_id = run_id, trace_id
        self.span_id = f"{self.run_id}.run"
        self.limits = spec["limits"] if limited else {}
        models = spec["models"]
        self.model, self.provider, _ = rng.choices(models, [m[2] for m in models])[0]
        self.first_model = self.model
        self.calls: list[dict] = []
        self.events: list[dict] = []
        self.used = self.tools = 0
        self.cost: float | None = None
        self.now = start
        self.stop = sc.STOP_COMPLETED
        self.unknown = False
        self.retryable: bool | None = None
        self.warned = self.downgraded = self.summarized = False
        lo, hi = spec["tokens"]
        sigma = math.log(hi / lo) / (2 * 1.2816)
        self.target = rng.lognormvariate(math.log(math.sqrt(lo * hi)), sigma)
        self.turns = rng.randint(*spec["turns"])
        if rng.random() < TAIL_SHARE:
            self.target *= 1 + rng.paretovariate(2.5)
        if rng.random() < (INCIDENT.runaway_share if incident else RUNAWAY_SHARE):
            factor = rng.uniform(*RUNAWAY_FACTOR)
            self.target *= factor
            self.turns = min(400, max(self.turns * 3, round(self.turns * factor / 3)))

    # -- helpers ------------------------------------------------------------------------------
    def _remaining(self) -> int | None:
        limit = self.limits.get("total_tokens")
        return None if limit is None else limit - self.used

    def _percent(self) -> float | None:
        limit = self.limits.get("total_tokens")
        return None if limit is None else round(100.0 * self.used / limit, 1)

    def _event(self, name, **fields):
        self.events.append(
            dict(
                event_id=f"{self.run_id}.e{len(self.events):03d}",
                run_id=self.run_id,
                span_id=self.span_id,
                ts_utc=self.now,
                name=name,
                used_tokens=self.used,
                remaining_tokens=self._remaining(),
                percent=self._percent(),
                **fields,
            )
        )

    def _end(self, reason, **fields):
        self.stop = reason
        if reason.startswith("budget_"):
            self._event(sc.EVENT_STOP, reason=reason, **fields)

    def simulate(self) -> None:
        rng, spec, limits = self.rng, self.spec, self.limits
        weights = [1 + 0.35 * i for i in range(self.turns)]
        scale = self.target / sum(weights)
        context = 1.0
        for turn in range(1, self.turns + 1):
            planned = scale * weights[turn - 1] * rng.uniform(0.8, 1.2)
            output = max(20, round(planned * spec["out"] * rng.uniform(0.7, 1.3)))
            input_ = max(50, round(planned * (1 - spec["out"]) * context))
            reserved = input_ + max(1024, 2 * output)
            elapsed = (self.now - self.start).total_seconds()
            if "turns" in limits and turn > limits["turns"]:
                return self._end(sc.STOP_BUDGET_TURNS)
            if "duration_s" in limits and elapsed > limits["duration_s"]:
                return self._end(sc.STOP_BUDGET_TIME)
            if "cost_usd" in limits and self.cost is not None and self.cost > limits["cost_usd"]:
                return self._end(sc.STOP_BUDGET_COST)
            if "total_tokens" in limits and self.used + reserved > limits["total_tokens"]:
                return self._end(sc.STOP_BUDGET_TOKENS, reserved_tokens=reserved)
            if self._call(turn, input_, output, reserved) is False:
                return None
            self._actions()
            if turn < self.turns:
                for _ in range(_poisson(rng, spec["tools"])):
                    if "tool_calls" in limits and self.tools >= limits["tool_calls"]:
                        return self._end(sc.STOP_BUDGET_TOOLS)
                    self.tools += 1
                    self.now += dt.timedelta(seconds=rng.uniform(0.2, 3.0))
                    self._event(sc.EVENT_TOOL_CALL, tool_name=rng.choice(TOOLS))
                if self.summarized:
                    context = 0.5
        return None

    def _call(self, turn, input_, output, reserved) -> bool:
        rng = self.rng
        latency = 0.4 + output / 80 + input_ / 20_000
        row = dict(
            span_id=f"{self.run_id}.c{turn:03d}",
            run_id=self.run_id,
            trace_id=self.trace_id,
            parent_span_id=self.span_id,
            source=SOURCE,
            service_name=self.spec["service"],
            task_type=self.task,
            operation_name=sc.OPERATION_CHAT,
            provider_name=self.provider,
            request_model=self.model,
            start_utc=self.now,
            turn=turn,
            reserved_tokens=reserved,
        )
        draw = rng.random()
        if draw < FAIL_SHARE + NO_USAGE_SHARE:
            failed = draw < FAIL_SHARE
            latency = latency * rng.uniform(0.1, 1.0) if failed else latency
            self.used += reserved  # unknown usage: the reservation is kept
            self.unknown = True
            row.update(usage_status=sc.USAGE_UNKNOWN)
            if failed:
                error = rng.choice(ERRORS)
                row["error_type"] = error
                self.retryable = error != "InternalServerError"
        else:
            cache_read = cache_write = reasoning = 0
            if self.provider != "vllm":
                if turn > 1:
                    cache_read = round(input_ * rng.uniform(0.3, 0.75))
                elif self.provider == "anthropic":
                    cache_write = round(input_ * 0.5)
            if self.model == "o4-mini" or (self.task == "complex_reasoning" and turn % 2):
                reasoning = round(output * rng.uniform(0.4, 0.8))
            usage = Usage(input_, output, cache_read, cache_write, reasoning)
            cost = cost_usd(self.model, usage, provider=self.provider)
            if cost is not None:
                self.cost = (self.cost or 0.0) + cost
            self.used += usage.total_tokens
            row.update(
                response_model=self.model,
                input_tokens=input_,
                output_tokens=output,
                total_tokens=usage.total_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                reasoning_tokens=reasoning,
                cost_usd=cost,
                usage_status=sc.USAGE_REPORTED,
            )
        end = self.now + dt.timedelta(seconds=latency)
        row.update(
            end_utc=end,
            duration_s=round(latency, 3),
            used_tokens=self.used,
            remaining_tokens=self._remaining(),
        )
        self.calls.append(row)
        self.now = end
        if row.get("error_type"):
            self.stop = sc.STOP_FAILED
            return False
        return True

    def _actions(self) -> None:
        percent = self._percent()
        if percent is None:
            return
        fraction = percent / 100
        if not self.warned and fraction >= WARNING_AT:
            self.warned = True
            self._event(sc.EVENT_WARNING)
        at = DOWNGRADE_AT.get(self.task)
        if at and not self.downgraded and fraction >= at and self.model in DOWNGRADE_CHAIN:
            self.downgraded = True
            to_model = DOWNGRADE_CHAIN[self.model]
            self._event(sc.EVENT_DOWNGRADE, from_model=self.model, to_model=to_model)
            self.model, self.provider = to_model, PROVIDERS[to_model]
        at = SUMMARIZE_AT.get(self.task)
        if at and not self.summarized and fraction >= at:
            self.summarized = True
            self._event(sc.EVENT_SUMMARIZE)

    def record(self) -> dict:
        reported = [c for c in self.calls if c["usage_status"] == sc.USAGE_REPORTED]

        def total(name):
            return sum(c[name] for c in reported) if reported else None

        end = self.calls[-1]["end_utc"] if self.calls else self.start
        limits = {f"limit_{k}": v for k, v in self.limits.items()}
        return dict(
            run_id=self.run_id,
            trace_id=self.trace_id,
            source=SOURCE,
            service_name=self.spec["service"],
            task_type=self.task,
            agent_name=self.spec["service"],
            model=self.first_model,
            start_utc=self.start,
            end_utc=end,
            duration_s=round((end - self.start).total_seconds(), 3),
            turns=len(self.calls),
            tool_calls=self.tools,
            input_tokens=total("input_tokens"),
            output_tokens=total("output_tokens"),
            total_tokens=self.used,
            cache_read_tokens=total("cache_read_tokens"),
            cache_write_tokens=total("cache_write_tokens"),
            reasoning_tokens=total("reasoning_tokens"),
            cost_usd=None if self.cost is None else round(self.cost, 8),
            stop_reason=self.stop,
            usage_status=sc.USAGE_UNKNOWN if self.unknown else sc.USAGE_REPORTED,
            retryable=self.retryable if self.stop == sc.STOP_FAILED else False,
            **limits,
        )


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


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
