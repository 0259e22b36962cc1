"""The shape of the seeded sample (``budgetlens.sample.generator``): task types and their sizes,
models and prices, guard thresholds, daily and weekly rhythms, runaways, the incident day and
the failure shares. Tables only; ``budgetlens.sample.generator`` re-exports them.
"""

from __future__ import annotations

from typing import NamedTuple

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
