"""RunLedger: what one guarded run has used so far (the bookkeeping behind ``RunBudget``).

Plain counters with no limits and no lock: :class:`budgetlens.guard.run_budget.RunBudget` owns both, calls the
ledger under its lock and replaces it on ``reset()``. Limits and stop decisions are in
:mod:`budgetlens.guard.stops`.
"""

from __future__ import annotations

from collections.abc import Mapping

from budgetlens import semconv as sc
from budgetlens.guard.results import BudgetExceeded, BudgetStats, Reservation, RunResult
from budgetlens.guard.stops import DEFAULT_UNKNOWN_CALL_TOKENS, limit_share, most_used_limit, retryable
from budgetlens.pricing import PriceRequest, price_calls
from budgetlens.usage import Usage

__all__ = ["RunLedger"]


class RunLedger:
    """One run's use: reported usage (tokens), charges of calls without usage (tokens), open
    reservations (tokens, of which ``reserved_output_tokens`` reserved as output, and their
    estimated cost ``reserved_cost_usd``), turns (recorded model calls), tool calls, priced model
    cost ``cost_usd`` and paid tools' fees ``tool_cost_usd`` (USD; the cost limit counts both:
    :attr:`spent_usd`).

    ``unknown_at``: used tokens when the first call without usage was recorded (None: none was).
    Calls with reported usage are ``priced_calls`` (their cost is in ``cost_usd``) or
    ``unpriced_calls`` (their model had no price).
    ``refusal``: the first budget refusal since the last recorded call (None when the run
    recorded a call after its last refusal, or was never refused): the run's budget stop.
    ``largest_call_tokens``: the largest reservation or reported call so far (tokens).
    """

    __slots__ = (
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "unknown_tokens",
        "reservations",
        "reserved_tokens",
        "reserved_output_tokens",
        "reserved_cost_usd",
        "largest_call_tokens",
        "turns",
        "tool_calls",
        "_cost_usd",
        "tool_cost_usd",
        "_priced_calls",
        "_unpriced_calls",
        "_later",
        "unknown_at",
        "refusal",
        "partial_calls",
    )

    def __init__(self) -> None:
        self.input_tokens = self.output_tokens = 0
        self.cache_read_tokens = self.cache_write_tokens = self.reasoning_tokens = 0
        self.unknown_tokens = 0  # reservations kept as charges of calls without usage
        self.reservations: dict[int, Reservation] = {}
        self.reserved_tokens = self.reserved_output_tokens = self.largest_call_tokens = 0
        self.reserved_cost_usd = 0.0
        self.turns = 0
        self.tool_calls = 0
        self._cost_usd = 0.0
        self.tool_cost_usd = 0.0  # fees of paid tools (USD), apart from model cost
        self._priced_calls = self._unpriced_calls = 0
        self._later: list[PriceRequest] = []  # calls recorded unpriced: priced when first read
        self.unknown_at: int | None = None
        self.refusal: BudgetExceeded | None = None
        self.partial_calls = 0  # calls whose usage lacked a part (charged from the reservation)

    # --- cost, priced when it is read (issue 25) ---------------------------------------------
    def _settle_later(self) -> None:
        """Price the calls recorded without a price (:meth:`add_call` ``later``) in one batch
        (:func:`budgetlens.pricing.price_calls`) and count them as priced or unpriced."""
        if not self._later:
            return
        later, self._later = self._later, []
        for priced in price_calls(later):
            if priced.cost_usd is None:
                self._unpriced_calls += 1
            else:
                self._priced_calls += 1
                self._cost_usd += priced.cost_usd

    @property
    def cost_usd(self) -> float:
        """USD of the priced model calls (calls recorded without a price are priced now, once)."""
        self._settle_later()
        return self._cost_usd

    @cost_usd.setter
    def cost_usd(self, value: float) -> None:
        self._cost_usd = value

    @property
    def priced_calls(self) -> int:
        """Calls with reported usage and a price."""
        self._settle_later()
        return self._priced_calls

    @priced_calls.setter
    def priced_calls(self, value: int) -> None:
        self._priced_calls = value

    @property
    def unpriced_calls(self) -> int:
        """Calls with reported usage whose model had no price."""
        self._settle_later()
        return self._unpriced_calls

    @unpriced_calls.setter
    def unpriced_calls(self, value: int) -> None:
        self._unpriced_calls = value

    # --- reading ---------------------------------------------------------------------------
    @property
    def used_tokens(self) -> int:
        """Tokens used (int, ≥ 0): reported usage plus the charges of calls with unknown usage."""
        return self.input_tokens + self.output_tokens + self.unknown_tokens

    @property
    def committed_tokens(self) -> int:
        """Tokens used plus the tokens of open reservations (int, ≥ 0)."""
        return self.input_tokens + self.output_tokens + self.unknown_tokens + self.reserved_tokens

    @property
    def committed_input_tokens(self) -> int:
        """Input tokens used (unknown-usage charges included) plus the input parts of open
        reservations (an unsplit reservation counts whole as input)."""
        return self.input_tokens + self.unknown_tokens + self.reserved_tokens - self.reserved_output_tokens

    @property
    def committed_output_tokens(self) -> int:
        """Output tokens used plus the output parts of open reservations."""
        return self.output_tokens + self.reserved_output_tokens

    @property
    def open_calls(self) -> int:
        """Open reservations: admitted calls that are not recorded or released yet."""
        return len(self.reservations)

    def unknown_charge(self) -> int:
        """The conservative charge (tokens, > 0) of a call without usage and without a reservation
        to keep: the run's largest call so far, or :data:`DEFAULT_UNKNOWN_CALL_TOKENS`."""
        return self.largest_call_tokens or DEFAULT_UNKNOWN_CALL_TOKENS

    @property
    def usage(self) -> Usage:
        """The summed reported usage (calls without usage are not in it)."""
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
        )

    @property
    def spent_usd(self) -> float:
        """USD spent as the cost limit counts it: priced model cost plus paid tools' fees."""
        if self._later:
            self._settle_later()
        return self._cost_usd + self.tool_cost_usd

    @property
    def priced_cost_usd(self) -> float | None:
        """The sum (USD) of the priced calls' costs: None when the run recorded calls and none
        was priced (unpriced model or unknown usage: never $0 in place of unknown); 0.0 for a run
        without model calls."""
        return self.cost_usd if self.priced_calls or not self.turns else None

    @property
    def usage_known(self) -> bool:
        """False when the run recorded calls and none reported usage (its token totals are then
        unknown, not 0); True otherwise."""
        return self.priced_calls + self.unpriced_calls > 0 or not self.turns

    def remaining(self, max_total_tokens: float | None) -> int | None:
        """Tokens left (int, ≥ 0) under ``max_total_tokens`` after use and open reservations;
        None without a total limit."""
        if max_total_tokens is None:
            return None
        return max(0, int(max_total_tokens) - self.committed_tokens)

    def share(self, limits: Mapping[str, float | None]) -> float:
        """The share of the most-used token or cost limit (see :func:`budgetlens.guard.stops.limit_share`)."""
        spent = (
            self.spent_usd if limits.get("max_cost_usd") is not None else 0.0
        )  # no price read unless limited
        return limit_share(limits, self.input_tokens, self.output_tokens, self.unknown_tokens, spent)

    def stats(
        self, limits: Mapping[str, float | None], elapsed_s: float, cost_unenforced: tuple[str, ...] = ()
    ) -> BudgetStats:
        """A :class:`BudgetStats` snapshot against ``limits`` after ``elapsed_s`` seconds;
        ``cost_unenforced``: models without a price under ``max_cost_usd``."""
        max_total = limits["max_total_tokens"]
        spent = self.spent_usd if limits.get("max_cost_usd") is not None else 0.0
        basis = most_used_limit(limits, self.input_tokens, self.output_tokens, self.unknown_tokens, spent)
        return BudgetStats(
            used_tokens=self.used_tokens,
            reserved_tokens=self.reserved_tokens,
            max_tokens=None if max_total is None else int(max_total),
            remaining_tokens=self.remaining(max_total),
            percent=round(100 * self.share(limits), 1),
            turns=self.turns,
            tool_calls=self.tool_calls,
            cost_usd=None if self.priced_cost_usd is None else self.priced_cost_usd + self.tool_cost_usd,
            elapsed_s=elapsed_s,
            usage=self.usage,
            cost_unenforced_models=cost_unenforced,
            percent_limit=None if basis is None else basis[0],
            percent_used=0.0 if basis is None else basis[1],
            percent_max=None if basis is None else basis[2],
        )

    def amount(self, limit: str, elapsed_s: float) -> float:
        """The run's use in ``limit``'s unit (a :data:`budgetlens.limits.LIMIT_KEYS` name),
        as the hard limits count it: tokens with unknown-usage charges (as input), recorded
        turns, tool calls, ``elapsed_s`` seconds, priced USD (tool fees included). Raises KeyError for another name."""
        return {
            "max_total_tokens": lambda: self.used_tokens,
            "max_input_tokens": lambda: self.input_tokens + self.unknown_tokens,
            "max_output_tokens": lambda: self.output_tokens,
            "max_turns": lambda: self.turns,
            "max_tool_calls": lambda: self.tool_calls,
            "max_duration_s": lambda: elapsed_s,
            "max_cost_usd": lambda: self.spent_usd,
        }[limit]()

    def result(
        self,
        run_id: str,
        task_type: str,
        stop_reason: str,
        duration_s: float,
        error: BaseException | None,
        *,
        limits: Mapping[str, float | None],
        stop: BudgetExceeded | None = None,
        unconfirmed_effects: tuple[str, ...] = (),
        downgrades: int = 0,
    ) -> RunResult:
        """The :class:`RunResult` of a run that ended with ``stop_reason`` after ``duration_s``
        seconds under ``limits``; ``error_type`` names ``error``'s class when the run ``failed``;
        ``stop``: the refusal the run ended at (for ``retryable``, see
        :func:`budgetlens.guard.stops.retryable`); ``unconfirmed_effects``: names of external
        effects never confirmed; ``downgrades``: model moves along the chain."""
        unknown = self.unknown_at is not None
        cost = self.priced_cost_usd
        return RunResult(
            run_id=run_id,
            task_type=task_type,
            stop_reason=stop_reason,
            usage=self.usage,
            used_tokens=self.used_tokens,
            turns=self.turns,
            tool_calls=self.tool_calls,
            duration_s=duration_s,
            cost_usd=None if cost is None else round(cost + self.tool_cost_usd, 9),
            usage_status=sc.USAGE_UNKNOWN
            if unknown
            else sc.USAGE_PARTIAL
            if self.partial_calls
            else sc.USAGE_REPORTED,
            retryable=retryable(stop_reason, stop, len(unconfirmed_effects)),
            error_type=type(error).__name__ if error is not None and stop_reason == sc.STOP_FAILED else None,
            unconfirmed_effects=unconfirmed_effects,
            limits=dict(limits),
            utilization=round(self.share(limits), 4),
            downgrades=downgrades,
            tool_cost_usd=round(self.tool_cost_usd, 9),
        )

    # --- recording -------------------------------------------------------------------------
    def refuse(self, refusal: BudgetExceeded) -> bool:
        """Note a budget refusal. Returns True when it is the first since the last recorded call
        (it then becomes :attr:`refusal`, the run's stop unless a call is recorded later)."""
        if self.refusal is not None:
            return False
        self.refusal = refusal
        return True

    def reserve(self, reservation: Reservation) -> None:
        """Hold ``reservation`` open (its tokens count against the total until settled)."""
        self.reservations[reservation.id] = reservation
        self.reserved_tokens += reservation.tokens
        if reservation.output_tokens:
            self.reserved_output_tokens += reservation.output_tokens
        if reservation.cost_usd:
            self.reserved_cost_usd += reservation.cost_usd
        if reservation.tokens > self.largest_call_tokens:
            self.largest_call_tokens = reservation.tokens

    def settle(self, reservation: Reservation | None, run_id: str) -> Reservation | None:
        """Close ``reservation`` (default: the oldest open one; None when none is open) of run
        ``run_id`` and return it. Raises ValueError for one of another run, or one that is not
        open (already recorded or released, or dropped by ``reset()``)."""
        if reservation is None:
            if not self.reservations:
                return None
            reservation = next(iter(self.reservations.values()))
        elif reservation.__class__ is not Reservation or reservation.run_id != run_id:
            raise ValueError(f"reservation {reservation!r} was not made by run {run_id}")
        res = self.reservations.pop(reservation.id, None)
        if res is None:
            raise ValueError(
                f"reservation {reservation.id} of run {run_id} is not open: a "
                "reservation is settled once (by record or release); reset() drops "
                "open ones"
            )
        self.reserved_tokens -= res.tokens
        if res.output_tokens:
            self.reserved_output_tokens -= res.output_tokens
        if res.cost_usd:  # back to exactly 0.0 once none is open (no float residue)
            self.reserved_cost_usd = self.reserved_cost_usd - res.cost_usd if self.reservations else 0.0
        return res

    def add_call(
        self,
        usage: Usage | None,
        cost_usd: float | None,
        reserved_tokens: int,
        later: PriceRequest | None = None,
    ) -> int | None:
        """Count one recorded model call (a turn): its reported ``usage`` and ``cost_usd`` (with
        ``later``, a call recorded without a price: priced when the cost is first read), or, when
        ``usage`` is None, a conservative charge, never 0: ``reserved_tokens`` when > 0, else
        :meth:`unknown_charge` (the run's largest call, else ``DEFAULT_UNKNOWN_CALL_TOKENS``).
        Clears :attr:`refusal` (the run went on after it).
        Returns the charge (tokens) when this is the run's first call without usage, else None."""
        self.turns += 1
        self.refusal = None  # the run went on after any refusal: it recovered
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.cache_read_tokens += usage.cache_read_tokens
            self.cache_write_tokens += usage.cache_write_tokens
            self.reasoning_tokens += usage.reasoning_tokens
            if usage.input_tokens + usage.output_tokens > self.largest_call_tokens:
                self.largest_call_tokens = usage.input_tokens + usage.output_tokens
            if later is not None:
                self._later.append(later)
            elif cost_usd is None:
                self._unpriced_calls += 1
            else:
                self._priced_calls += 1
                self._cost_usd += cost_usd
            return None
        charge = reserved_tokens or self.unknown_charge()
        return charge if self.add_unknown(charge) else None

    def complete_partial(
        self, usage: Usage, missing: tuple[str, ...], reservation: Reservation | None
    ) -> Usage:
        """A partial ``usage`` (lacking the parts named in ``missing``: ``"input_tokens"`` and/or
        ``"output_tokens"``) with each missing part charged, never 0: the reservation's part
        (input = its tokens minus its output part), else :meth:`unknown_charge` for the input.
        Counts the call in :attr:`partial_calls`."""
        self.partial_calls += 1
        inp, out = usage.input_tokens, usage.output_tokens
        if "input_tokens" in missing:
            charged = reservation.tokens - reservation.output_tokens if reservation else self.unknown_charge()
            inp = max(inp, charged, usage.cache_read_tokens + usage.cache_write_tokens)
        if "output_tokens" in missing and reservation is not None:
            out = max(out, reservation.output_tokens, usage.reasoning_tokens)
        return Usage(inp, out, usage.cache_read_tokens, usage.cache_write_tokens, usage.reasoning_tokens)

    def add_unknown(self, charged_tokens: int) -> bool:
        """Charge a call that ended without usage ``charged_tokens`` (tokens). Returns True for the
        run's first such call."""
        self.unknown_tokens += charged_tokens
        if self.unknown_at is not None:
            return False
        self.unknown_at = self.used_tokens
        return True
