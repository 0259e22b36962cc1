"""The wrap-up slice: a share of the budget kept for one final call (issue 21 item 1).

A run built with ``wrap_up_tokens`` (tokens) and/or ``wrap_up_usd`` (USD) keeps that much of
``max_total_tokens`` / ``max_cost_usd`` out of reach of its ordinary calls: they must fit the
*ordinary limits* (the limits minus the slice). When the next ordinary call would not fit, the
guard advises ``Action.WRAP_UP``; the agent (or an adapter, for it) then makes one final call with
``reserve(..., final=True)``, which may use the whole limit: no tools, a short instruction to answer
now, output capped to ``output_budget(final=True)``. Once that call is recorded the run stops with
``budget_wrap_up`` (a budget stop that still returned an answer): every later check raises
``BudgetExceeded`` with that reason, and ``finish()`` defaults to it.

"The next ordinary call" is estimated as the run's largest call so far (tokens) at the run's mean
cost per recorded call (USD); ``RunBudget.wrap_up_due`` checks a call of a known size instead.
The slice covers the total-token and cost limits only (input/output/turn limits stay hard).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgetlens import semconv as sc
from budgetlens.guard.results import Action
from budgetlens.guard.stops import Stop, reserve_stop
from budgetlens.limits import check_limit

__all__ = ["DETAIL_WRAPPED_UP", "WrapUp", "check_wrap_up", "wrap_up_due"]

#: ``BudgetExceeded.detail`` of a check after the final call was recorded.
DETAIL_WRAPPED_UP = "the final call from the wrap-up slice was made"
_SLICED = (("max_total_tokens", "wrap_up_tokens"), ("max_cost_usd", "wrap_up_usd"))


def check_wrap_up(limits: Mapping[str, float | None], wrap_up_tokens: Any, wrap_up_usd: Any) -> None:
    """Check the slice: each None or a number >= 0 (tokens whole), below its limit when the limit
    is set (a slice as large as the limit leaves no room for any ordinary call). Raises ValueError
    naming the argument and the rule."""
    check_limit("max_total_tokens", wrap_up_tokens, label="wrap_up_tokens")
    check_limit("max_cost_usd", wrap_up_usd, label="wrap_up_usd")
    for limit_name, name in _SLICED:
        value, limit = (wrap_up_tokens, wrap_up_usd)[name == "wrap_up_usd"], limits.get(limit_name)
        if value is not None and limit is not None and value >= limit:
            raise ValueError(f"{name} must be below {limit_name} ({limit}), got {value!r}")


class WrapUp:
    """One run's wrap-up slice and where its final call stands (no lock: the run's lock holds).

    ``tokens`` / ``usd``: the slice (None: none of that kind); ``final_id``: the id of the open final
    reservation (None when none is open); ``done``: the final call was recorded (the run stops).
    """

    __slots__ = ("tokens", "usd", "final_id", "done")

    def __init__(self, tokens: int | None, usd: float | None) -> None:
        self.tokens, self.usd = tokens, usd
        self.final_id: int | None = None
        self.done = False

    @property
    def available(self) -> bool:
        """True while the run has a slice and its final call is neither open nor made."""
        return (self.tokens is not None or self.usd is not None) and self.final_id is None and not self.done

    def ordinary(self, limits: Mapping[str, float | None]) -> Mapping[str, float | None]:
        """The limits an ordinary call must fit: ``limits`` with the slice taken off the total-token
        and cost limits while the slice is available (else ``limits`` itself)."""
        if not self.available:
            return limits
        ordinary = dict(limits)
        for limit_name, value in (("max_total_tokens", self.tokens), ("max_cost_usd", self.usd)):
            limit = limits[limit_name]
            if value is not None and limit is not None:
                ordinary[limit_name] = max(0, limit - value)
        return ordinary

    def due(
        self, limits: Mapping[str, float | None], use: Any, tokens: int, output_tokens: int, cost_usd: float
    ) -> bool:
        """True when the slice is available and a call of ``tokens`` (``output_tokens`` of them
        output) costing ``cost_usd`` does not fit the ordinary limits next to ``use`` (a
        :class:`budgetlens.guard.ledger.RunLedger`)."""
        if not self.available:
            return False
        return reserve_stop(self.ordinary(limits), use, tokens, output_tokens, cost_usd) is not None

    def advise(
        self, advised: Action, crossed: tuple[Action, ...], limits: Mapping[str, float | None], use: Any
    ) -> tuple[Action, tuple[Action, ...]]:
        """(advised, crossed) with WRAP_UP added when the next ordinary call, estimated as the run's
        largest call at its mean cost per call, does not fit (STOP stays the most severe)."""
        priced = use.turns and limits.get("max_cost_usd") is not None  # the cost is read only if limited
        mean_cost = use.cost_usd / use.turns if priced else 0.0
        if advised >= Action.STOP or not self.due(limits, use, use.largest_call_tokens, 0, mean_cost):
            return advised, crossed
        return max(advised, Action.WRAP_UP), tuple(sorted({*crossed, Action.WRAP_UP}))

    def stop(self) -> Stop | None:
        """``budget_wrap_up`` once the final call was made, else None."""
        return Stop(sc.STOP_BUDGET_WRAP_UP, 0, 0, 0, DETAIL_WRAPPED_UP) if self.done else None


def wrap_up_due(state: Any, tokens: int, output_tokens: int, model: str | None) -> bool:
    """``RunBudget.wrap_up_due``: does a call of ``tokens`` (``output_tokens`` of them output) with
    ``model`` (default the run's) miss the ordinary limits of ``state`` (a
    :class:`budgetlens.guard.run_state.RunState`) while its slice is available? Its cost is
    estimated as ``reserve`` does (0 when unpriced)."""
    from budgetlens.pricing import estimate_cost_usd

    model = model or state.model
    cost = 0.0
    if state.limits["max_cost_usd"] is not None and state.wrap_up.usd is not None and model:
        cost = estimate_cost_usd(model, tokens, output_tokens, state.options.provider) or 0.0
    with state.lock:
        return state.wrap_up.due(state.limits, state.use, tokens, output_tokens, cost)
