"""The guard's shared steps: what one run holds in the budgets it shares with other runs.

A run may draw from a :class:`budgetlens.guard.pool.TokenPool` (tokens shared by runs) and count
against a :class:`budgetlens.guard.spend.SpendTracker` (USD spend windows shared by runs). Each
step of a run has its shared counterpart, kept here in one place: check before a step, reserve
with a reservation, settle when the call is recorded, release when it failed, and settle what is
still open when the run is reset or finished. A refusal comes back as a
:class:`budgetlens.guard.stops.Stop` (None: allowed); ``RunBudget`` raises it, under its lock.

Every step names its call (``call_id``: the run id and the reservation's number), so a pool or
tracker kept in a shared ledger (docs/fleet.md) settles each hold once, by that id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from budgetlens.guard.ledger import RunLedger
from budgetlens.guard.pool import TokenPool
from budgetlens.guard.results import BudgetExceeded
from budgetlens.guard.spend import SpendTracker
from budgetlens.guard.stops import Stop
from budgetlens.usage import Usage

__all__ = ["ParentSteps", "SharedSteps"]


def _refusal(step: Callable[[], object]) -> Stop | None:
    """Run a pool or spend-window step; its ``BudgetExceeded`` as a Stop with the step's own
    detail (the window and its period, or the pool; and an unreachable shared ledger's offline
    policy when that is why), None when it allowed the step."""
    try:
        step()
    except BudgetExceeded as exc:
        return Stop(exc.reason, exc.limit, exc.used, exc.requested, exc.detail)
    return None


class ParentSteps(Protocol):
    """A child run's steps in its parent run (:class:`budgetlens.guard.children.ParentLink`), named
    by the child's call ids (``child run id:number``). Refusals come back as Stops (None: allowed)."""

    def check(self) -> Stop | None:
        """The parent's refusal now (finished, or a limit of it spent), else None."""
        ...

    def reserve(self, tokens: int, output_tokens: int, cost_usd: float, call_id: str) -> Stop | None:
        """Hold a child call's reservation in the parent, if it fits."""
        ...

    def settle(
        self, call_id: str | None, usage: Usage | None, cost_usd: float | None, charged_tokens: int
    ) -> None:
        """Replace the hold of call ``call_id`` with the recorded call."""
        ...

    def release(self, call_id: str) -> None:
        """Give back the hold of a child call that failed before spending anything."""
        ...

    def charge_tool(self, name: str, fee_usd: float) -> Stop | None:
        """Count a child's paid tool fee (USD) in the parent, unless it does not fit."""
        ...


def call_id(res: Any) -> str | None:
    """The shared ledgers' id of a reservation (``run id:number``); None for a call recorded
    without one."""
    return None if res is None else f"{res.run_id}:{res.id}"


class SharedSteps:
    """One run's steps in the shared token pool and spend windows (either may be None: no step).

    ``pool``: a :class:`TokenPool` or None; ``spend``: a :class:`SpendTracker` or None;
    ``run_id``: names the run's calls in a shared ledger. Tokens are ints, costs USD (float).
    ``parent``: a child run's steps in its parent (:class:`ParentSteps`, a
    :class:`budgetlens.guard.children.ParentLink`; None: no parent run), set by ``RunBudget.child``.
    Never raises for budget reasons: refusals are returned as Stops.
    """

    def __init__(self, pool: TokenPool | None, spend: SpendTracker | None, run_id: str = "") -> None:
        self.pool = pool
        self.spend = spend
        self.run_id = run_id
        self.parent: ParentSteps | None = None

    def spend_stop(self) -> Stop | None:
        """``budget_cost`` (detail: the spend window, e.g. ``daily spend window 2026-05-28``) when a
        spend window has reached its limit or its shared ledger is unreachable under ``block``."""
        spend = self.spend
        return None if spend is None else _refusal(spend.check)

    def pool_stop(self) -> Stop | None:
        """``budget_tokens`` (detail: the pool) when the token pool is spent; else the parent run's
        refusal (see :meth:`ParentSteps.check`) when there is one."""
        pool, parent = self.pool, self.parent
        stop = None if pool is None else _refusal(pool.check)
        return stop if stop is not None or parent is None else parent.check()

    def reserve(
        self,
        tokens: int,
        cost_usd: float,
        number: int = 0,
        *,
        call_id: str | None = None,
        output_tokens: int = 0,
    ) -> Stop | None:
        """Hold ``cost_usd`` in the spend windows, then ``tokens`` in the pool, then both (and the
        ``output_tokens`` part) in the parent run, for one call (the run's reservation ``number``,
        or the child's call named ``call_id``).

        The first refusal is returned and nothing stays held (a spend reservation is given back
        when the pool refuses, both when the parent does)."""
        spend, pool, parent = self.spend, self.pool, self.parent
        if spend is None and pool is None and parent is None:
            return None
        cid = call_id or f"{self.run_id}:{number}"
        if spend is not None:
            stop = _refusal(lambda: spend.reserve(cost_usd, call_id=cid))
            if stop is not None:
                return stop
        if pool is not None:
            stop = _refusal(lambda: pool.reserve(tokens, call_id=cid))
            if stop is not None:
                if spend is not None:
                    spend.release(cost_usd, call_id=cid)  # the pool refused: spend goes back
                return stop
        if parent is not None:
            stop = parent.reserve(tokens, output_tokens, cost_usd, cid)
            if stop is not None:  # the parent refused: what this run's own steps hold goes back
                if spend is not None:
                    spend.release(cost_usd, call_id=cid)
                if pool is not None:
                    pool.settle(tokens, 0, call_id=cid)
                return stop
        return None

    def charge_tool(self, fee_usd: float, name: str = "") -> Stop | None:
        """Add a paid tool call's ``fee_usd`` (USD; tool ``name``) to the spend windows and the parent
        run, unless it does not fit (``budget_cost``, detail: the spend window's or the parent run's;
        nothing is added)."""
        spend, parent = self.spend, self.parent
        if (spend is None and parent is None) or not fee_usd:
            return None
        if spend is not None:
            stop = _refusal(lambda: spend.reserve(fee_usd))
            if stop is not None:
                return stop
        if parent is not None:
            stop = parent.charge_tool(name, fee_usd)
            if stop is not None:
                if spend is not None:
                    spend.release(fee_usd)
                return stop
        if spend is not None:
            spend.release(fee_usd)
            spend.add(fee_usd)
        return None

    def settle_call(self, res: Any, used_tokens: int, usage: Usage | None, cost_usd: float | None) -> None:
        """Settle a recorded call in the pool (:meth:`settle_pool`) and in the parent run: its
        reservation ``res`` (None: none) replaced by its ``usage`` and ``cost_usd`` (USD), or, when
        ``usage`` is None, by the ``used_tokens`` charged for it."""
        self.settle_pool(res, used_tokens)
        if self.parent is not None:
            self.parent.settle(call_id(res), usage, cost_usd, used_tokens if usage is None else 0)

    def settle_pool(self, res: Any, used_tokens: int) -> None:
        """Replace a call's pool reservation (``res``; None: none) with the ``used_tokens`` it
        was charged."""
        if self.pool is not None:
            self.pool.settle(res.tokens if res else 0, used_tokens, call_id=call_id(res))

    def settle_spend(self, res: Any, cost_usd: float | None, usage_known: bool) -> None:
        """Settle a recorded call in the spend windows: its reservation ``res`` (if any) is given
        back and the call's ``cost_usd`` added; a call without usage (``usage_known`` False) and
        without a price is charged its reserved cost, never 0; a priced-nothing call adds nothing."""
        spend = self.spend
        if spend is None:
            return
        charge = cost_usd if cost_usd is not None else (res.cost_usd if res and not usage_known else None)
        spend.settle(res.cost_usd if res else 0.0, charge, call_id=call_id(res))  # one step

    def release(self, res: Any) -> None:
        """Give back what ``res`` holds (its call failed before spending anything)."""
        if self.spend is not None:
            self.spend.release(res.cost_usd, call_id=call_id(res))
        if self.pool is not None:
            self.pool.settle(res.tokens, 0, call_id=call_id(res))
        if self.parent is not None:
            self.parent.release(f"{res.run_id}:{res.id}")

    def settle_open(self, ledger: RunLedger, *, charge: bool) -> None:
        """Settle what ``ledger``'s open reservations hold: given back (``charge=False``, at
        ``reset()``), or, at ``finish()``, charged as spent. A call that was reserved but neither
        recorded nor released may have been paid for: its usage is unknown, so it counts as its
        reservation, never as 0 (design §1); the reservation is no longer held either way."""
        for res in ledger.reservations.values():
            if self.pool is not None:
                self.pool.settle(res.tokens, res.tokens if charge else 0, call_id=call_id(res))
            if self.spend is not None:
                self.spend.settle(res.cost_usd, res.cost_usd if charge else None, call_id=call_id(res))
            if self.parent is not None:
                if charge:
                    self.parent.settle(call_id(res), None, None, res.tokens)
                else:
                    self.parent.release(f"{res.run_id}:{res.id}")
