"""The values a budget guard hands to an agent loop: actions, events, the stop, the result, and
the alerts of the shared spend windows and token pools (a leaf: the ledgers import them).

Kept apart from :mod:`budgetlens.guard.run_budget` (the bookkeeping) so an agent can import and match on them
without the rest. Stop reasons and usage statuses are the closed vocabularies of
:mod:`budgetlens.semconv`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from budgetlens.semconv import (
    EVENT_ALERT,
    EVENT_DOWNGRADE,
    EVENT_LIMIT_CHANGED,
    EVENT_STOP,
    EVENT_SUMMARIZE,
    EVENT_TOOL_CALL,
    EVENT_WARNING,
    EVENT_WRAP_UP,
)
from budgetlens.usage import Usage

__all__ = [
    "Action",
    "BudgetEvent",
    "BudgetExceeded",
    "BudgetStats",
    "Effect",
    "LimitChange",
    "PoolAlert",
    "Reservation",
    "RunResult",
    "SpendAlert",
]


class Action(str, enum.Enum):
    """What the guard advises after a check or a record, least to most severe.

    ``WARN``: use crossed ``warn_at`` (once). ``DOWNGRADE``: switch to ``RunBudget.model``, the
    next model of the chain (once, at ``downgrade_at``). ``SUMMARIZE``: compress the context (while
    use is at or above ``summarize_at``). ``WRAP_UP``: the next ordinary call does not fit next to
    the run's wrap-up slice: make the final call now (``reserve(..., final=True)``: no tools, output
    capped to ``output_budget(final=True)``; the adapters do it themselves). ``STOP``: the budget
    is spent; the next check raises.

    Actions compare by severity (``Action.SUMMARIZE > Action.WARN``), so a loop that must see the
    warning tests ``action >= Action.WARN``: one call that crosses several thresholds returns
    the most severe; ``RunBudget.last_actions`` lists every one it crossed.
    """

    CONTINUE = "continue"
    WARN = "warn"
    DOWNGRADE = "downgrade"
    SUMMARIZE = "summarize"
    WRAP_UP = "wrap_up"
    STOP = "stop"

    @property
    def severity(self) -> int:
        """0 (CONTINUE) to 5 (STOP)."""
        return _SEVERITY[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return _SEVERITY[self] < _SEVERITY[other]

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return _SEVERITY[self] <= _SEVERITY[other]

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return _SEVERITY[self] > _SEVERITY[other]

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return _SEVERITY[self] >= _SEVERITY[other]

    __hash__ = str.__hash__


_SEVERITY = {a: i for i, a in enumerate(Action)}

#: Action -> span event name (CONTINUE has none; tool calls are events without an action).
EVENT_FOR_ACTION = {
    Action.WARN: EVENT_WARNING,
    Action.DOWNGRADE: EVENT_DOWNGRADE,
    Action.SUMMARIZE: EVENT_SUMMARIZE,
    Action.WRAP_UP: EVENT_WRAP_UP,
    Action.STOP: EVENT_STOP,
}
EVENT_NAME_TOOL_CALL = EVENT_TOOL_CALL
EVENT_NAME_LIMIT_CHANGED = EVENT_LIMIT_CHANGED
EVENT_NAME_ALERT = EVENT_ALERT


@dataclass(frozen=True, slots=True)
class BudgetEvent:
    """One budget event, given to ``on_event`` callbacks and emitted as a span event.

    ``name`` is a span event name from :mod:`budgetlens.semconv` (``budgetlens.warning``, ...);
    ``action`` the matching :class:`Action` (None for tool calls); token counts in tokens;
    ``percent`` 0-100+ (one decimal) of the most-used token/cost limit; ``reason``: the stop
    reason of a stop, ``cost_unenforced`` on the warning that a ``model`` has no price under
    ``max_cost_usd``, the limit's name on ``budgetlens.limit_changed`` and ``budgetlens.alert``
    events. ``previous_limit`` / ``new_limit`` (the limit's unit, None = no limit) and
    ``changed_by`` are set on ``budgetlens.limit_changed``; on ``budgetlens.alert``,
    ``new_limit`` is the alert-only limit reached; ``tool_cost_usd`` (USD) is a paid tool call's fee
    on ``budgetlens.tool_call``.
    """

    name: str
    action: Action | None
    run_id: str
    used_tokens: int
    remaining_tokens: int | None
    percent: float
    reason: str | None = None
    from_model: str | None = None
    to_model: str | None = None
    tool_name: str | None = None
    model: str | None = None
    previous_limit: float | None = None
    new_limit: float | None = None
    changed_by: str | None = None
    tool_cost_usd: float | None = None


class BudgetExceeded(Exception):
    """Raised BEFORE a call or tool use that the budget does not allow.

    ``reason``: a ``budget_*`` stop reason; ``limit``: the limit that was hit (tokens, count,
    seconds or USD); ``used``: the amount used so far (same unit, reservations included);
    ``requested``: the amount this check asked for (0 when the limit is already spent);
    ``detail``: which limit or rule, when the numbers alone do not say it.
    The message states what happened: ``used U + requested R > limit L`` when the request does
    not fit, ``used U reached limit L`` when the limit is already spent, and ``limit 0 allows
    nothing`` for a limit of 0 (a valid limit: nothing of that kind may be spent).
    The one deliberate raise into an agent loop. Picklable (crosses process pools).
    """

    def __init__(self, reason: str, limit: float, used: float, requested: float = 0, detail: str = ""):
        self.reason = reason
        self.limit = limit
        self.used = used
        self.requested = requested
        self.detail = detail
        if limit == 0:
            message = f"{reason}: limit 0 allows nothing"
        elif requested and used + requested > limit:
            message = f"{reason}: used {used:,} + requested {requested:,} > limit {limit:,}"
        else:
            message = f"{reason}: used {used:,} reached limit {limit:,}"
        super().__init__(message + (f" ({detail})" if detail else ""))

    def __reduce__(self):
        return type(self), (self.reason, self.limit, self.used, self.requested, self.detail)


class Reservation(NamedTuple):
    """A token reservation for one model call, returned by ``RunBudget.reserve``.

    Settle it once, with ``record(usage, reservation=...)`` (usage replaces it) or
    ``release(...)`` (the call failed before spending). ``tokens``: the estimate (input +
    output); ``turn``: the turn number it was admitted as (completed calls plus open
    reservations; the recorded call is numbered in completion order); ``start_ns``: wall clock
    (ns since epoch) at reserve time, used as the model-call span's start; ``output_tokens``:
    the part of ``tokens`` reserved as output (0 when the estimate was not split: it then counts
    as input); ``cost_usd``: its estimated worst-case cost (USD; 0.0 without a cost limit or a
    price); ``run_id``: the run it belongs to.
    """

    id: int
    tokens: int
    turn: int
    model: str | None
    start_ns: int
    output_tokens: int = 0
    cost_usd: float = 0.0
    run_id: str | None = None


class Effect(NamedTuple):
    """An external effect (a tool call that writes somewhere: sends a mail, pushes a commit) begun
    by ``RunBudget.begin_effect`` and not yet confirmed by ``RunBudget.confirm_effect``.

    ``id``: unique within the run; ``name``: the tool or effect name (never its arguments);
    ``run_id``: the run it belongs to.
    """

    id: int
    name: str
    run_id: str


class LimitChange(NamedTuple):
    """One change of a limit by ``RunBudget.set_max``: ``limit`` (its name), ``previous`` and
    ``new`` (in the limit's unit; None = no limit), ``changed_by`` (free text, None when not
    given) and ``ts_utc`` (when, a timezone-aware UTC datetime)."""

    limit: str
    previous: float | None
    new: float | None
    changed_by: str | None
    ts_utc: datetime


@dataclass(frozen=True, slots=True)
class BudgetStats:
    """A snapshot of a run's use against its total-token limit (tokens) and other counters.

    ``percent`` has one decimal and is the share of the most-used token/cost limit: that limit is
    ``percent_limit`` (``max_total_tokens``, ``max_input_tokens``, ``max_output_tokens`` or
    ``max_cost_usd``; None without any), ``percent_used`` and ``percent_max`` are its use and its
    limit (tokens, or USD for the cost limit). ``status`` is one line for CLI agents that shows the
    fraction the percent comes from: ``"budget 52.3 % (33,472 / 64,000 tokens)"`` (total),
    ``"budget 90.0 % (9,000 / 10,000 input tokens)"``, ``"... output tokens)"``, ``"budget 45.0 %
    (0.45 / 1 USD)"``, or ``"budget 0.0 % (9,100 tokens, no token limit)"``; it is followed by
    ``"; max_cost_usd not enforced for my-model (no price)"`` when ``cost_unenforced_models``
    (models without a price, called under a cost limit) is not empty. ``cost_usd``: the sum of
    the priced calls (None when calls were made and none was priced).
    """

    used_tokens: int
    reserved_tokens: int
    max_tokens: int | None
    remaining_tokens: int | None
    percent: float
    turns: int
    tool_calls: int
    cost_usd: float | None
    elapsed_s: float
    usage: Usage
    cost_unenforced_models: tuple[str, ...] = ()
    percent_limit: str | None = None
    percent_used: float = 0.0
    percent_max: float | None = None

    @property
    def status(self) -> str:
        if self.percent_limit is None or self.percent_max is None:
            line = f"budget {self.percent:.1f} % ({self.used_tokens:,} tokens, no token limit)"
        else:
            line = f"budget {self.percent:.1f} % ({_fraction(self.percent_limit, self.percent_used, self.percent_max)})"
        if self.cost_unenforced_models:
            line += f"; max_cost_usd not enforced for {', '.join(self.cost_unenforced_models)} (no price)"
        return line

    def __str__(self) -> str:
        return self.status


#: The unit words of a status fraction, per limit (total tokens read as plain "tokens").
_FRACTION_UNITS = {
    "max_total_tokens": "tokens",
    "max_input_tokens": "input tokens",
    "max_output_tokens": "output tokens",
    "max_cost_usd": "USD",
}


def _fraction(limit: str, used: float, maximum: float) -> str:
    """``"9,000 / 10,000 input tokens"``; a cost as ``"0.4512 / 1 USD"`` (4 significant figures,
    no exponent)."""
    if limit == "max_cost_usd":
        return f"{_usd(used)} / {_usd(maximum)} USD"
    return f"{int(used):,} / {int(maximum):,} {_FRACTION_UNITS[limit]}"


def _usd(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{value:,.0f}"


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended, returned by ``RunBudget.finish``.

    ``stop_reason``: one of :data:`budgetlens.semconv.STOP_REASONS`; ``usage``: the run's summed
    usage (unknown calls counted at their reservation in ``used_tokens``, not in ``usage``);
    ``usage_status``: ``reported`` or ``unknown`` (some call had no usage); ``retryable``: whether a
    retry could succeed (see :func:`budgetlens.guard.stops.retryable`: a failure, or a stop by
    the unknown-usage policy, unless an external effect is unconfirmed; False for any other budget
    stop and a completed run; the caller may decide instead, see ``RunBudget.finish``);
    ``unconfirmed_effects``: names of external effects begun and never confirmed (a retry could
    repeat them); ``limits``: the limits the run ended under (constructor names, None = no
    limit); ``utilization``: the share (float, 1.0 = spent) of the most-used token or cost limit;
    ``downgrades``: how many times the model moved along the chain; ``cost_usd``: the sum (USD) of the priced calls, None when the run made
    calls and none was priced (unpriced model or unknown usage; never $0 in place of unknown);
    calls with reported usage but no price are not in it (the collector counts them unpriced); it
    includes the fees of paid tools, which ``tool_cost_usd`` (USD, 0.0 without any) gives apart.
    A budget ``stop_reason`` means the run ended at a refusal: one it recovered from (a call
    recorded after it) does not count (see :func:`budgetlens.guard.stops.final_stop_reason`).
    """

    run_id: str
    task_type: str
    stop_reason: str
    usage: Usage
    used_tokens: int
    turns: int
    tool_calls: int
    duration_s: float
    cost_usd: float | None
    usage_status: str
    retryable: bool
    error_type: str | None = None
    unconfirmed_effects: tuple[str, ...] = ()
    limits: dict[str, float | None] = field(default_factory=dict)
    utilization: float = 0.0
    downgrades: int = 0
    tool_cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class SpendAlert:
    """An 80 % alert of one window: spend and limit in USD, percent 0-100 (one decimal)."""

    window: str
    spent_usd: float
    limit_usd: float
    percent: float
    period: str


@dataclass(frozen=True, slots=True)
class PoolAlert:
    """The pool crossed ``alert_at``: ``used_tokens`` (recorded tokens) of
    ``max_tokens``, ``percent`` 0-100 (one decimal)."""

    pool: str
    used_tokens: int
    max_tokens: int
    percent: float
