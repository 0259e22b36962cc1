"""A run's limits: their names and units, their validation, and the stop decisions against them.

The one owner of "is this a valid limit" (used by :class:`collector.guard.RunBudget` and by
:mod:`collector.presets_loader`) and of "is this limit spent" (pure functions that return a
:class:`Stop`, or None when the limit allows the step). ``RunBudget`` keeps the state and the lock
and raises :class:`collector.actions.BudgetExceeded` from a :class:`Stop`. Stop reasons are the
closed vocabulary of :mod:`collector.semconv`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from collector import semconv as sc
from collector.actions import Action, BudgetExceeded
from collector.preset_format import LIMIT_KEYS

__all__ = [
    "DEFAULT_MAX_TOTAL_TOKENS",
    "LIMIT_KEYS",
    "UNKNOWN_USAGE_POLICIES",
    "WHOLE_NUMBER_LIMITS",
    "Stop",
    "advice",
    "check_fraction",
    "check_limit",
    "check_limits",
    "check_stop_reason",
    "count_stop",
    "cost_stop",
    "cross_thresholds",
    "final_stop_reason",
    "limit_share",
    "reserve_stop",
    "resolve_limits",
    "retryable",
    "time_stop",
    "token_stop",
    "unknown_usage_stop",
]

#: A bare guard (no limit given) allows this many tokens.
DEFAULT_MAX_TOTAL_TOKENS = 64_000
#: ``block``: after a call with unknown usage no new reservation is admitted (the safe default);
#: ``residual``: the run may go on, but only within ``unknown_usage_residual_tokens`` more tokens.
UNKNOWN_USAGE_POLICIES = ("block", "residual")
#: Limits that may carry a fraction (seconds, USD); every other limit counts tokens or calls.
_FRACTIONAL_LIMITS = ("max_duration_s", "max_cost_usd")
#: Limits that count tokens or calls: whole numbers (``2.0`` passes, ``2.5`` does not).
WHOLE_NUMBER_LIMITS = tuple(k for k in LIMIT_KEYS if k not in _FRACTIONAL_LIMITS)


# --- validation ---------------------------------------------------------------------------------
def check_limit(name: str, value: Any, *, label: str | None = None) -> None:
    """Check one limit value: None, or a number >= 0 (not NaN, not a bool); a whole number
    unless ``name`` is ``max_duration_s`` or ``max_cost_usd``.

    ``label`` names the value in the message (default ``name``, e.g. ``"file: presets.qa.max_turns"``).
    Raises ValueError naming it and the rule.
    """
    if value is None:
        return
    label = label or name
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
        raise ValueError(f"{label} must be a number >= 0 or None, got {value!r}")
    if name not in _FRACTIONAL_LIMITS and value != int(value):
        raise ValueError(f"{label} must be a whole number, got {value!r}")


def check_limits(limits: Mapping[str, Any]) -> None:
    """Check limits keyed by :data:`LIMIT_KEYS` names, in order.

    Raises ValueError naming an unknown limit or, as :func:`check_limit`, an invalid value.
    """
    for name, value in limits.items():
        if name not in LIMIT_KEYS:
            raise ValueError(f"unknown limit {name!r}; expected one of {LIMIT_KEYS}")
        check_limit(name, value)


def resolve_limits(limits: Mapping[str, Any]) -> dict[str, float | None]:
    """All :data:`LIMIT_KEYS` (missing ones None) after :func:`check_limits`; with no limit given,
    ``max_total_tokens`` is :data:`DEFAULT_MAX_TOTAL_TOKENS`. Raises ValueError as
    :func:`check_limits`."""
    check_limits(limits)
    resolved = {name: limits.get(name) for name in LIMIT_KEYS}
    if all(v is None for v in resolved.values()):
        resolved["max_total_tokens"] = DEFAULT_MAX_TOTAL_TOKENS
    return resolved


def check_fraction(name: str, value: Any) -> None:
    """Check a threshold: a number in (0, 1]. Raises ValueError naming ``name`` and the rule."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")


def check_stop_reason(stop_reason: str | None) -> None:
    """Check a stop reason given by the caller: None or one of :data:`collector.semconv.STOP_REASONS`.
    Raises ValueError naming the allowed reasons."""
    if stop_reason is not None and stop_reason not in sc.STOP_REASONS:
        raise ValueError(f"stop_reason must be one of {sc.STOP_REASONS}, got {stop_reason!r}")


# --- use against the limits ---------------------------------------------------------------------
def limit_share(limits: Mapping[str, float | None], input_tokens: int, output_tokens: int,
                unknown_tokens: int, cost_usd: float) -> float:
    """The share (float, ≥ 0; 1.0 = spent) of the most-used token or cost limit.

    ``unknown_tokens``: charges of calls without usage, counted as input. A limit of 0 is spent at
    once (share 1.0, or infinite once anything was used). 0.0 when no token/cost limit is set.
    """
    share = 0.0
    pairs = ((limits["max_total_tokens"], input_tokens + output_tokens + unknown_tokens),
             (limits["max_input_tokens"], input_tokens + unknown_tokens),
             (limits["max_output_tokens"], output_tokens),
             (limits["max_cost_usd"], cost_usd))
    for limit, used in pairs:
        if limit is not None:
            share = max(share, used / limit if limit else (math.inf if used else 1.0))
    return share


def advice(share: float, summarize_at: float) -> Action:
    """The action advised before a turn: STOP when spent, SUMMARIZE at or above ``summarize_at``,
    else CONTINUE (``share`` as :func:`limit_share`)."""
    if share >= 1.0:
        return Action.STOP
    if share >= summarize_at:
        return Action.SUMMARIZE
    return Action.CONTINUE


def cross_thresholds(share: float, fired: set[Action], warn_at: float, downgrade_at: float,
                     summarize_at: float, can_downgrade: bool) -> tuple[Action, list[Action]]:
    """The thresholds (fractions, as ``share``) crossed after a recorded call.

    Returns (the advised action, the actions to emit now, least severe first) and adds them to
    ``fired``. WARN fires once; DOWNGRADE fires once and is only advised and emitted when
    ``can_downgrade`` (the chain has a next model), but is spent either way; SUMMARIZE is emitted
    once and advised while ``share`` >= ``summarize_at``; STOP is advised from 1.0.
    """
    advised, emit = Action.CONTINUE, []
    if share >= warn_at and Action.WARN not in fired:
        fired.add(Action.WARN)
        emit.append(Action.WARN)
        advised = Action.WARN
    if share >= downgrade_at and Action.DOWNGRADE not in fired:
        fired.add(Action.DOWNGRADE)
        if can_downgrade:
            emit.append(Action.DOWNGRADE)
            advised = max(advised, Action.DOWNGRADE, key=lambda a: a.severity)
    if share >= summarize_at:
        if Action.SUMMARIZE not in fired:
            fired.add(Action.SUMMARIZE)
            emit.append(Action.SUMMARIZE)
        advised = max(advised, Action.SUMMARIZE, key=lambda a: a.severity)
    if share >= 1.0:
        advised = Action.STOP
    return advised, emit


# --- stop decisions (None: the step is allowed) -------------------------------------------------
class Stop(NamedTuple):
    """A budget stop decided by a check: the arguments of :class:`BudgetExceeded`.

    ``reason``: a ``budget_*`` stop reason; ``limit``, ``used``, ``requested`` in the limit's unit
    (tokens, count, seconds or USD); ``detail``: why, when the numbers alone do not say it.
    """

    reason: str
    limit: float
    used: float
    requested: float = 0
    detail: str = ""

    def exception(self) -> BudgetExceeded:
        """The :class:`BudgetExceeded` that reports this stop."""
        return BudgetExceeded(self.reason, self.limit, self.used, self.requested, self.detail)


def time_stop(max_duration_s: float | None, elapsed_s: float) -> Stop | None:
    """``budget_time`` once ``elapsed_s`` (seconds since the run started) reaches the limit."""
    if max_duration_s is not None and elapsed_s >= max_duration_s:
        return Stop(sc.STOP_BUDGET_TIME, max_duration_s, round(elapsed_s, 3))
    return None


def cost_stop(max_cost_usd: float | None, cost_usd: float) -> Stop | None:
    """``budget_cost`` once the priced cost (USD) reaches the limit."""
    if max_cost_usd is not None and cost_usd >= max_cost_usd:
        return Stop(sc.STOP_BUDGET_COST, max_cost_usd, round(cost_usd, 6))
    return None


def token_stop(limits: Mapping[str, float | None], total_tokens: int, input_tokens: int,
               output_tokens: int) -> Stop | None:
    """``budget_tokens`` for the first of the total, input and output token limits that is spent.

    ``total_tokens`` includes open reservations; ``input_tokens`` includes unknown-usage charges.
    """
    for key, used in (("max_total_tokens", total_tokens), ("max_input_tokens", input_tokens),
                      ("max_output_tokens", output_tokens)):
        limit = limits[key]
        if limit is not None and used >= limit:
            return Stop(sc.STOP_BUDGET_TOKENS, limit, used)
    return None


def count_stop(reason: str, limit: int | None, count: int) -> Stop | None:
    """``reason`` (``budget_turns`` or ``budget_tools``) when one more call would pass ``limit``:
    a limit of n allows exactly n calls."""
    if limit is not None and count >= limit:
        return Stop(reason, limit, count, 1)
    return None


def reserve_stop(max_total_tokens: float | None, used_tokens: int, requested: int) -> Stop | None:
    """``budget_tokens`` when ``requested`` tokens do not fit next to ``used_tokens`` (use plus
    open reservations)."""
    if max_total_tokens is not None and used_tokens + requested > max_total_tokens:
        return Stop(sc.STOP_BUDGET_TOKENS, max_total_tokens, used_tokens, requested)
    return None


def unknown_usage_stop(policy: str, residual_tokens: int | None, max_total_tokens: float | None,
                       unknown_at: int | None, used_tokens: int, reserved_tokens: int,
                       requested: int) -> Stop | None:
    """The :data:`UNKNOWN_USAGE_POLICIES` decision for a reservation of ``requested`` tokens.

    ``unknown_at``: used tokens when the first call without usage was recorded (None: none was).
    ``block`` refuses every reservation after it; ``residual`` allows ``residual_tokens`` more
    (default 10 % of ``max_total_tokens``, 0 without one), counting use and open reservations.
    """
    if unknown_at is None:
        return None
    if policy == "block":
        return Stop(sc.STOP_BUDGET_TOKENS, used_tokens, used_tokens, requested,
                    "a previous call's usage is unknown; unknown_usage='block'")
    if residual_tokens is None:
        residual_tokens = int(0.1 * max_total_tokens) if max_total_tokens is not None else 0
    spent_since = used_tokens + reserved_tokens - unknown_at
    if spent_since + requested > residual_tokens:
        return Stop(sc.STOP_BUDGET_TOKENS, unknown_at + residual_tokens, unknown_at + spent_since,
                    requested, "residual allowance after unknown usage")
    return None


# --- how a run ended ----------------------------------------------------------------------------
def final_stop_reason(stop_reason: str | None, error: BaseException | None,
                      budget_stop: BudgetExceeded | None) -> str:
    """The run's stop reason: ``stop_reason`` when given; else the reason of a ``BudgetExceeded``
    ``error``; ``failed`` for any other error; else the budget stop raised so far; else
    ``completed``."""
    if stop_reason is not None:
        return stop_reason
    if isinstance(error, BudgetExceeded):
        return error.reason
    if error is not None:
        return sc.STOP_FAILED
    return budget_stop.reason if budget_stop is not None else sc.STOP_COMPLETED


def retryable(stop_reason: str, usage_unknown: bool) -> bool:
    """True when a retry could succeed: a failure, or any stop but ``completed`` in a run where some
    call had no usage; False for a budget stop or a completed run."""
    return stop_reason == sc.STOP_FAILED or (usage_unknown and stop_reason != sc.STOP_COMPLETED)
