"""The guard's stop decisions: pure functions of the limits and a run's use.

Each returns a :class:`Stop` (the arguments of :class:`budgetlens.guard.results.BudgetExceeded`) or
None when the limit allows the step; the threshold crossings, the output budget, the run's final
stop reason and its retryability are decided here too. ``RunBudget`` keeps the state and the lock
and raises a :class:`Stop` as ``BudgetExceeded``. Stop reasons are the closed vocabulary of
:mod:`budgetlens.semconv`; limit names are those of :data:`budgetlens.limits.LIMITS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from budgetlens import semconv as sc
from budgetlens.guard.results import Action, BudgetExceeded

__all__ = [
    "DEFAULT_UNKNOWN_CALL_TOKENS", "DETAIL_UNKNOWN_BLOCK", "DETAIL_UNKNOWN_RESIDUAL", "UNKNOWN_USAGE_DETAILS",
    "Stop", "advice", "alerts_reached", "cost_stop", "count_stop", "cross_thresholds",
    "final_stop_reason", "limit_share", "most_used_limit", "output_budget", "reserve_stop", "retryable",
    "spent_stop", "time_stop", "token_stop", "tool_cost_stop", "unknown_usage_stop",
]  # fmt: skip

#: ``BudgetExceeded.detail`` of a refusal by the unknown-usage policy (``block`` / ``residual``).
DETAIL_UNKNOWN_BLOCK = "a previous call's usage is unknown; unknown_usage='block'"
DETAIL_UNKNOWN_RESIDUAL = "residual allowance after unknown usage"
UNKNOWN_USAGE_DETAILS = frozenset({DETAIL_UNKNOWN_BLOCK, DETAIL_UNKNOWN_RESIDUAL})
#: Charge of a call recorded without usage, without a reservation (or with one of 0 tokens), in a
#: run that has seen no call yet (tokens); later such calls are charged the run's largest call.
DEFAULT_UNKNOWN_CALL_TOKENS = 4_000


# --- use against the limits ---------------------------------------------------------------------
def limit_share(
    limits: Mapping[str, float | None],
    input_tokens: int,
    output_tokens: int,
    unknown_tokens: int,
    cost_usd: float,
) -> float:
    """The share (float, ≥ 0; 1.0 = spent) of the most-used token or cost limit.

    ``unknown_tokens``: charges of calls without usage, counted as input. A limit of 0 is spent at
    once (share 1.0, or infinite once anything was used). 0.0 when no token/cost limit is set.
    """
    share = 0.0  # straight-line on purpose: this runs on every recorded call
    limit = limits["max_total_tokens"]
    if limit is not None:
        share = _share(input_tokens + output_tokens + unknown_tokens, limit)
    limit = limits["max_input_tokens"]
    if limit is not None:
        share = max(share, _share(input_tokens + unknown_tokens, limit))
    limit = limits["max_output_tokens"]
    if limit is not None:
        share = max(share, _share(output_tokens, limit))
    limit = limits["max_cost_usd"]
    if limit is not None:
        share = max(share, _share(cost_usd, limit))
    return share


def most_used_limit(
    limits: Mapping[str, float | None],
    input_tokens: int,
    output_tokens: int,
    unknown_tokens: int,
    cost_usd: float,
) -> tuple[str, float, float] | None:
    """The token or cost limit whose share :func:`limit_share` gives, as ``(limit name, used,
    limit)`` in the limit's unit (tokens, or USD for ``max_cost_usd``); a tie goes to the first of
    total, input, output, cost. None when no token/cost limit is set."""
    best: tuple[str, float, float] | None = None
    best_share = -1.0
    for key, used in (
        ("max_total_tokens", input_tokens + output_tokens + unknown_tokens),
        ("max_input_tokens", input_tokens + unknown_tokens),
        ("max_output_tokens", output_tokens),
        ("max_cost_usd", cost_usd),
    ):
        limit = limits[key]
        if limit is not None and _share(used, limit) > best_share:
            best, best_share = (key, used, limit), _share(used, limit)
    return best


def _share(used: float, limit: float) -> float:
    return used / limit if limit else (math.inf if used else 1.0)


def advice(share: float, summarize_at: float) -> Action:
    """The action advised before a turn: STOP when spent, SUMMARIZE at or above ``summarize_at``,
    else CONTINUE (``share`` as :func:`limit_share`)."""
    if share >= 1.0:
        return Action.STOP
    if share >= summarize_at:
        return Action.SUMMARIZE
    return Action.CONTINUE


def cross_thresholds(
    share: float,
    fired: set[Action],
    warn_at: float,
    downgrade_at: float,
    summarize_at: float,
    can_downgrade: bool,
) -> tuple[Action, list[Action]]:
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


def token_stop(
    limits: Mapping[str, float | None], total_tokens: int, input_tokens: int, output_tokens: int
) -> Stop | None:
    """``budget_tokens`` for the first of the total, input and output token limits that is spent
    (the detail names it).

    ``total_tokens`` includes open reservations; ``input_tokens`` includes unknown-usage charges.
    """
    limit = limits["max_total_tokens"]  # straight-line on purpose: this runs before every step
    if limit is not None and total_tokens >= limit:
        return Stop(sc.STOP_BUDGET_TOKENS, limit, total_tokens, 0, "max_total_tokens")
    limit = limits["max_input_tokens"]
    if limit is not None and input_tokens >= limit:
        return Stop(sc.STOP_BUDGET_TOKENS, limit, input_tokens, 0, "max_input_tokens")
    limit = limits["max_output_tokens"]
    if limit is not None and output_tokens >= limit:
        return Stop(sc.STOP_BUDGET_TOKENS, limit, output_tokens, 0, "max_output_tokens")
    return None


def spent_stop(
    limits: Mapping[str, float | None], use: Any, spend_stop: Callable[[], Stop | None] | None = None
) -> Stop | None:
    """The first spent limit before a step, in order: ``max_cost_usd`` (:func:`cost_stop`), the
    spend windows (``spend_stop``, called only when the cost limit allows: e.g.
    :meth:`budgetlens.guard.shared.SharedSteps.spend_stop`), the token limits (:func:`token_stop`,
    open reservations included). ``use``: a :class:`budgetlens.guard.ledger.RunLedger`."""
    cost_limit = limits["max_cost_usd"]  # the cost is read (priced) only under a cost limit
    stop = None if cost_limit is None else cost_stop(cost_limit, use.spent_usd)
    if stop is None and spend_stop is not None:
        stop = spend_stop()
    return stop or token_stop(
        limits, use.committed_tokens, use.input_tokens + use.unknown_tokens, use.output_tokens
    )


def count_stop(reason: str, limit: float | None, count: int) -> Stop | None:
    """``reason`` (``budget_turns`` or ``budget_tools``) when one more call would pass ``limit``:
    a limit of n allows exactly n calls. ``count``: calls made (for turns: recorded calls plus
    open reservations; a released reservation is not a turn)."""
    if limit is not None and count >= limit:
        return Stop(reason, limit, count, 1)
    return None


def reserve_stop(
    limits: Mapping[str, float | None], use: Any, tokens: int, output_tokens: int, cost_usd: float
) -> Stop | None:
    """The first limit a reservation does not fit, next to use and open reservations.

    ``use``: a :class:`budgetlens.guard.ledger.RunLedger`; ``tokens``: the estimate (input + output);
    ``output_tokens``: its output part (the rest counts as input); ``cost_usd``: its estimated
    cost (USD; 0.0 when unknown). Checks, in order: ``max_total_tokens``, ``max_input_tokens``,
    ``max_output_tokens`` (``budget_tokens``, the detail names the limit), ``max_cost_usd``
    (``budget_cost``). A reservation of 0 fits any limit that is not yet spent.
    """
    # Straight-line on purpose: this runs on every reservation (the guard's hot path).
    limit = limits["max_total_tokens"]
    if limit is not None and use.committed_tokens + tokens > limit:
        return Stop(sc.STOP_BUDGET_TOKENS, limit, use.committed_tokens, tokens, "max_total_tokens")
    limit = limits["max_input_tokens"]
    if limit is not None and use.committed_input_tokens + tokens - output_tokens > limit:
        return Stop(
            sc.STOP_BUDGET_TOKENS,
            limit,
            use.committed_input_tokens,
            tokens - output_tokens,
            "max_input_tokens",
        )
    limit = limits["max_output_tokens"]
    if limit is not None and use.committed_output_tokens + output_tokens > limit:
        return Stop(
            sc.STOP_BUDGET_TOKENS, limit, use.committed_output_tokens, output_tokens, "max_output_tokens"
        )
    limit = limits["max_cost_usd"]
    if limit is not None and use.spent_usd + use.reserved_cost_usd + cost_usd > limit:
        return Stop(
            sc.STOP_BUDGET_COST,
            limit,
            round(use.spent_usd + use.reserved_cost_usd, 6),
            round(cost_usd, 6),
            "max_cost_usd",
        )
    return None


def tool_cost_stop(max_cost_usd: float | None, use: Any, name: str, fee_usd: float) -> Stop | None:
    """``budget_cost`` (detail ``tool <name>``) when a paid tool call's ``fee_usd`` (USD) does not fit
    ``max_cost_usd`` next to the model cost, the tool fees and the open reservations' estimates of
    ``use`` (a :class:`budgetlens.guard.ledger.RunLedger`). A free call (0.0) is not checked here."""
    if max_cost_usd is None or not fee_usd:
        return None  # nothing to check: the cost is not read (priced)
    committed = use.spent_usd + use.reserved_cost_usd
    if committed + fee_usd > max_cost_usd:
        return Stop(sc.STOP_BUDGET_COST, max_cost_usd, round(committed, 6), round(fee_usd, 6), f"tool {name}")
    return None


def unknown_usage_stop(
    policy: str, residual_tokens: int | None, limits: Mapping[str, float | None], use: Any, requested: int
) -> Stop | None:
    """The :data:`UNKNOWN_USAGE_POLICIES` decision for a reservation of ``requested`` tokens.

    ``use``: a :class:`budgetlens.guard.ledger.RunLedger`; its ``unknown_at``: used tokens when the first
    call without usage was recorded (None: none was). ``block`` refuses every reservation after
    it; ``residual`` allows ``residual_tokens`` more (default 10 % of ``max_total_tokens``, 0
    without one), counting use and open reservations.
    """
    unknown_at = use.unknown_at
    if unknown_at is None:
        return None
    used_tokens, reserved_tokens = use.used_tokens, use.reserved_tokens
    max_total_tokens = limits["max_total_tokens"]
    if policy == "block":
        return Stop(
            sc.STOP_BUDGET_TOKENS,
            used_tokens,
            used_tokens,
            requested,
            DETAIL_UNKNOWN_BLOCK,
        )
    if residual_tokens is None:
        residual_tokens = int(0.1 * max_total_tokens) if max_total_tokens is not None else 0
    spent_since = used_tokens + reserved_tokens - unknown_at
    if spent_since + requested > residual_tokens:
        return Stop(
            sc.STOP_BUDGET_TOKENS,
            unknown_at + residual_tokens,
            unknown_at + spent_since,
            requested,
            DETAIL_UNKNOWN_RESIDUAL,
        )
    return None


# --- how a run ended ----------------------------------------------------------------------------
def final_stop_reason(
    stop_reason: str | None,
    error: BaseException | None,
    budget_stop: BudgetExceeded | None,
    wrapped_up: bool = False,
) -> str:
    """The run's stop reason: ``stop_reason`` when given; else the reason of a ``BudgetExceeded``
    ``error`` (one that left a ``with`` block is a budget stop); ``failed`` for any other error;
    else the reason of ``budget_stop``, the refusal the run ended at (the first refusal after its
    last recorded call; :attr:`budgetlens.guard.ledger.RunLedger.refusal`); else ``budget_wrap_up``
    when the run made its final call from the wrap-up slice (``wrapped_up``); else ``completed``.

    A run the budget refused and that stopped there is a budget stop even when the agent caught
    the BudgetExceeded and finished normally. A run that recorded a model call after a refusal
    (e.g. a smaller reservation that fit) recovered: ``completed``, so the hit rate counts only
    runs the budget ended. An agent that knows better passes ``stop_reason`` explicitly."""
    if stop_reason is not None:
        return stop_reason
    if isinstance(error, BudgetExceeded):
        return error.reason
    if error is not None:
        return sc.STOP_FAILED
    if budget_stop is not None:
        return budget_stop.reason
    return sc.STOP_BUDGET_WRAP_UP if wrapped_up else sc.STOP_COMPLETED


def retryable(stop_reason: str, stop: BudgetExceeded | None, unconfirmed_effects: int = 0) -> bool:
    """The default ``RunResult.retryable``: could the same run, started again, succeed?

    False while an external effect is unconfirmed (``unconfirmed_effects`` > 0: a retry could
    send the mail or push the commit twice); else True for ``failed`` and for a budget stop made
    by the unknown-usage policy (``stop``, the refusal the run ended at, has a detail of
    :data:`UNKNOWN_USAGE_DETAILS`: with its usage known the retry may fit); False for
    ``completed`` and every other budget stop (the same run would hit the same limit).
    """
    if unconfirmed_effects:
        return False
    if stop_reason == sc.STOP_FAILED:
        return True
    return stop is not None and stop.reason == stop_reason and stop.detail in UNKNOWN_USAGE_DETAILS


def output_budget(
    limits: Mapping[str, float | None], use: Any, ceiling: int | None = None, prompt_tokens: int = 0
) -> int | None:
    """The output tokens (int, >= 0) the next call may ask for (its ``max_tokens``): the least of
    ``max_output_tokens`` left, ``max_total_tokens`` left (use and open reservations counted)
    after the call's ``prompt_tokens``, and ``ceiling`` (e.g. the model's own output limit).
    None when none of the three is set. ``use``: a :class:`budgetlens.guard.ledger.RunLedger`.
    Raises ValueError for a ``ceiling`` or ``prompt_tokens`` that is not an int >= 0."""
    for name, value in (("ceiling", ceiling), ("prompt_tokens", prompt_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be an int >= 0 (tokens), got {value!r}")
    left = [] if ceiling is None else [ceiling]
    limit = limits["max_output_tokens"]
    if limit is not None:
        left.append(int(limit) - use.committed_output_tokens)
    limit = limits["max_total_tokens"]
    if limit is not None:
        left.append(int(limit) - use.committed_tokens - prompt_tokens)
    return max(0, min(left)) if left else None


def alerts_reached(
    alert_limits: Mapping[str, float], fired: set[str], use: Any, elapsed_s: float
) -> list[tuple[str, float]]:
    """The alert-only limits reached now and not before: (name, limit) pairs, added to
    ``fired``. Use is counted as the hard limits count it (tokens with unknown-usage charges,
    recorded turns, tool calls, seconds since start, priced USD); ``use``: a
    :class:`budgetlens.guard.ledger.RunLedger`."""
    reached = []
    for name, limit in alert_limits.items():
        if name not in fired and use.amount(name, elapsed_s) >= limit:
            fired.add(name)
            reached.append((name, limit))
    return reached
