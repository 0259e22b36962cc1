"""One simulated run of the seeded sample under the guard's rules (``SimulatedRun``): turn by turn,
reservations, limits, warnings, downgrades, summaries and tool calls, as store rows (see
``budgetlens.sample.generator``).
"""

from __future__ import annotations

import datetime as dt
import math
import random

from budgetlens import semconv as sc
from budgetlens.pricing import cost_usd
from budgetlens.sample.profile import (
    DOWNGRADE_AT,
    DOWNGRADE_CHAIN,
    ERRORS,
    FAIL_SHARE,
    INCIDENT,
    NO_USAGE_SHARE,
    PROVIDERS,
    RUNAWAY_FACTOR,
    RUNAWAY_SHARE,
    SOURCE,
    SUMMARIZE_AT,
    TAIL_SHARE,
    TASK_TYPES,
    TOOLS,
    WARNING_AT,
)
from budgetlens.usage import Usage


class SimulatedRun:
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
