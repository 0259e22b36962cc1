"""One recorded model call: how it is priced and what the run keeps of it once settled.

:func:`paid_cost` is the default :data:`PriceCall` of :class:`budgetlens.guard.run_state.RunState`;
:class:`RecordedCall` is what ``RunState`` settles under its lock and hands to the telemetry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from budgetlens.guard.results import Action
from budgetlens.pricing import price_call
from budgetlens.usage import Usage

__all__ = ["PROBE_USAGE", "PriceCall", "RecordedCall", "paid_cost"]

#: Prices a call already paid for: (model, usage, provider) -> USD, or None when unpriced.
PriceCall = Callable[[str | None, Usage, str | None], float | None]
PROBE_USAGE = Usage(0, 0)  # prices nothing: tells whether a model has a price (not None)


def paid_cost(model: str | None, usage: Usage, provider: str | None) -> float | None:
    """USD of a call already paid for, priced now through :func:`budgetlens.pricing.price_call`
    (every billed dimension: tokens by kind and modality, cache writes by duration, web searches,
    service tier). ``price_call`` never raises for a price: a price file that fails only now
    is logged there and the call counts as unpriced, so it is never dropped."""
    return price_call(model, usage, provider).cost_usd


class RecordedCall(NamedTuple):
    """One recorded call, as settled under the lock (tokens; USD; None: unpriced or unknown)."""

    action: Action
    model: str | None
    start_ns: int | None
    usage: Usage | None
    cost_usd: float | None
    reserved_tokens: int
    used_tokens: int
    turn: int
    remaining_tokens: int | None
