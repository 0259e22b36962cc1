"""The common path of a plain run's ``reserve`` and ``record`` (issue 25: the guard's hot path).

A step is *plain* when only the run's own limits apply to it: no token pool, spend window or parent
run, no wrap-up slice, no alert-only limits, the run not finished and (to reserve) no call of
unknown usage recorded; to record, the usage is already a complete :class:`~budgetlens.usage.Usage`
priced by the default :func:`~budgetlens.guard.calls.paid_cost`. Such a step takes the functions
here: the same checks in the same order, the same events, result and span as the general path
of :class:`budgetlens.guard.run_state.RunState` (which decides the step is plain and holds the
lock), with the branches for what the run does not have left out. The tests run random runs both
ways and compare every event, span attribute and result. :data:`ENABLED` False sends every step
the general way (for those tests).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from typing import Any

from budgetlens import semconv as sc
from budgetlens.guard import options as opt
from budgetlens.guard.calls import RecordedCall, paid_cost
from budgetlens.guard.results import Action, Reservation
from budgetlens.guard.stops import Stop, limit_share
from budgetlens.pricing import PriceRequest

__all__ = ["ENABLED", "admit_stop", "plain_run", "record", "reserve"]

#: False: every step takes the general path (the tests compare the two).
ENABLED = True


def admit_stop(
    limits: Mapping[str, float | None], use: Any, tokens: int, output_tokens: int, cost_usd: float
) -> Stop | None:
    """:func:`budgetlens.guard.stops.spent_stop` (no spend windows), else
    :func:`budgetlens.guard.stops.reserve_stop`: a plain reservation checked in one pass, the ledger
    read once. Those two are the rules' home; the tests compare this with them on random ledgers."""
    cost_limit = limits["max_cost_usd"]
    spent = 0.0 if cost_limit is None else use.spent_usd  # the cost is read only under a limit
    if cost_limit is not None and spent >= cost_limit:
        return Stop(sc.STOP_BUDGET_COST, cost_limit, round(spent, 6))
    inp, out, unknown, reserved = use.input_tokens, use.output_tokens, use.unknown_tokens, use.reserved_tokens
    committed = inp + out + unknown + reserved
    total, in_limit, out_limit = (
        limits["max_total_tokens"],
        limits["max_input_tokens"],
        limits["max_output_tokens"],
    )
    if total is not None and committed >= total:
        return Stop(sc.STOP_BUDGET_TOKENS, total, committed, 0, "max_total_tokens")
    if in_limit is not None and inp + unknown >= in_limit:
        return Stop(sc.STOP_BUDGET_TOKENS, in_limit, inp + unknown, 0, "max_input_tokens")
    if out_limit is not None and out >= out_limit:
        return Stop(sc.STOP_BUDGET_TOKENS, out_limit, out, 0, "max_output_tokens")
    if total is not None and committed + tokens > total:
        return Stop(sc.STOP_BUDGET_TOKENS, total, committed, tokens, "max_total_tokens")
    if in_limit is not None:
        committed_in = inp + unknown + reserved - use.reserved_output_tokens
        if committed_in + tokens - output_tokens > in_limit:
            return Stop(
                sc.STOP_BUDGET_TOKENS, in_limit, committed_in, tokens - output_tokens, "max_input_tokens"
            )
    if out_limit is not None:
        committed_out = out + use.reserved_output_tokens
        if committed_out + output_tokens > out_limit:
            return Stop(sc.STOP_BUDGET_TOKENS, out_limit, committed_out, output_tokens, "max_output_tokens")
    if cost_limit is not None and spent + use.reserved_cost_usd + cost_usd > cost_limit:
        committed_usd = spent + use.reserved_cost_usd
        return Stop(
            sc.STOP_BUDGET_COST, cost_limit, round(committed_usd, 6), round(cost_usd, 6), "max_cost_usd"
        )
    return None


def plain_run(options: Any, alert_limits: Any, shared: Any, price: Any) -> bool:
    """Whether what is fixed for a run allows plain steps: no wrap-up slice, no alert-only limits,
    no token pool or spend window (``shared``: its :class:`budgetlens.guard.shared.SharedSteps`), the
    default ``price``. A parent run (set on a child after it is built) is checked at each step."""
    return (
        ENABLED
        and options.wrap_up_tokens is None
        and options.wrap_up_usd is None
        and not alert_limits
        and shared.spend is None
        and shared.pool is None
        and price is paid_cost
    )


def reserve(
    state: Any, tokens: int, output_tokens: int | None, model: str | None, cost_usd: float
) -> Reservation:
    """``RunState._reserve_locked`` of a plain, non-final reservation whose cost was estimated (or
    needs none): time, spent and fitting limits, turns; then the reservation is held."""
    if state.finished is not None:
        state.check_open()
    limits, use = state.limits, state.use
    if limits["max_duration_s"] is not None:
        state._check_time()
    stop = admit_stop(limits, use, tokens, output_tokens or 0, cost_usd)
    if stop is not None:
        state.stop_on(stop)
    if limits["max_turns"] is not None:
        state._check_turns()
    number = state._next_id = state._next_id + 1
    res = Reservation(
        number,
        tokens,
        use.turns + len(use.reservations) + 1,
        model,
        time.time_ns(),
        output_tokens or 0,
        cost_usd,
        state.run_id,
    )
    use.reserve(res)
    return res


def record(
    state: Any,
    usage: Any,
    model: str | None,
    reservation: Reservation | None,
    provider: str | None,
    response_model: str | None,
) -> RecordedCall:
    """``RunState.record``'s steps for a plain call with a complete ``usage``, up to the span:
    price it when a cost limit needs the figure (else keep it to price when the cost is read),
    settle the reservation, count the call, cross thresholds."""
    limits = state.limits
    needs_cost = limits["max_cost_usd"] is not None
    if model is not None:
        opt.check_model(model)
    cost = None
    early = needs_cost and (model or reservation or response_model) is not None
    if early:  # priced before the lock, as calls.prepare_call does
        cost = paid_cost(model or getattr(reservation, "model", None) or response_model, usage, provider)
    with state.lock:
        if state.finished is not None:
            state.check_open()
        use = state.use
        res = use.settle(reservation, state.run_id)
        model = model or (res.model if res else None)
        priced = model or response_model
        reserved = res.tokens if res else 0
        later = None
        if not early:  # as calls.price_at_record
            if needs_cost:
                cost = paid_cost(priced, usage, provider)
            elif priced:
                later = PriceRequest(priced, usage, provider, dt.datetime.now(tz=dt.UTC))
        use.add_call(usage, cost, reserved, later)
        if cost is None and needs_cost:
            state.dispatch.cost_unenforced(priced, use, limits)  # no price for the model
        spent = use.spent_usd if needs_cost else 0.0
        if (
            limit_share(limits, use.input_tokens, use.output_tokens, use.unknown_tokens, spent)
            < state._quiet_below
        ):
            action, state.last_actions = Action.CONTINUE, ()
        else:
            action, state.last_actions = state._thresholds()
        total = limits["max_total_tokens"]
        return RecordedCall(
            action,
            model,
            res.start_ns if res else None,
            usage,
            cost,
            reserved,
            use.used_tokens,
            use.turns,
            None if total is None else use.remaining(total),
        )
