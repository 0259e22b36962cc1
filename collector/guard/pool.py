"""A token pool shared by runs: one allowance of tokens that batch agents draw from together.

Where :class:`budgetlens.guard.spend.SpendTracker` bounds USD across runs, a :class:`TokenPool`
bounds tokens: pass one pool to every run (``RunBudget(pool=pool)``). A run's reservation is
drawn from the pool as well as from its own limits, atomically (a reservation that does not fit
the pool raises ``BudgetExceeded`` with reason ``budget_tokens`` and detail ``token pool NAME``,
before the call); ``record`` replaces the reservation with the call's tokens (or the
unknown-usage charge), ``release`` gives it back. Per process and thread-safe by default; with a
shared ledger (``ledger=`` or ``BUDGETLENS_LEDGER``, see docs/fleet.md) one pool of a ``scope``
is drawn from by every process (:mod:`budgetlens.guard.ledgers.accounts`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from budgetlens.attribution import check_scope
from budgetlens.guard.results import BudgetExceeded, PoolAlert
from budgetlens.semconv import STOP_BUDGET_TOKENS

log = logging.getLogger(__name__)

__all__ = ["PoolAlert", "TokenPool"]


class TokenPool:
    """``max_tokens`` (int >= 0) shared by every run given this pool.

    ``name``: shown in refusals and logs; ``alert_at``: fraction in (0, 1] of recorded use at
    which one :class:`PoolAlert` goes to ``on_alert`` (and a WARNING log), once per pool.
    ``ledger``: a shared ledger URL, backend or client (default ``BUDGETLENS_LEDGER``; unset =
    in-process). Raises ValueError naming a bad argument.
    ``scope``: None (shared by every run given it) or an attribution mapping such as
    ``{"team": "search-infra"}``: only runs whose attribution matches it (``RunBudget(team=...)``,
    see :mod:`budgetlens.attribution`) draw from it, others ignore it; with a shared ledger it
    also names the ledger's account (a plain string scope names an account and matches every run).
    """

    def __init__(
        self,
        max_tokens: int,
        *,
        name: str = "default",
        alert_at: float = 0.8,
        on_alert: Callable[[PoolAlert], object] | None = None,
        ledger: Any = None,
        scope: Mapping[str, str] | str | None = None,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0 (tokens), got {max_tokens!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if (
            isinstance(alert_at, bool)
            or not isinstance(alert_at, (int, float))
            or not math.isfinite(alert_at)
            or not 0 < alert_at <= 1
        ):
            raise ValueError(f"alert_at must be a fraction in (0, 1], got {alert_at!r}")
        if on_alert is not None and not callable(on_alert):
            raise ValueError(f"on_alert must be a callable taking a PoolAlert, got {on_alert!r}")
        self.max_tokens, self.name = max_tokens, name
        self._alert_at, self._on_alert = alert_at, on_alert
        self._used = self._reserved = 0
        self._alerted = False
        self._lock = threading.Lock()
        self.scope = None if scope is None or isinstance(scope, str) else check_scope(scope)
        shared_scope = scope if self.scope is None else self.scope  # tenant -> team: one account
        self._shared = _shared_pool(ledger, shared_scope, name, max_tokens, alert_at, on_alert)

    @property
    def shared(self) -> bool:
        """True when the pool is kept in a shared ledger (not in this process)."""
        return self._shared is not None

    @property
    def used_tokens(self) -> int:
        """Tokens recorded by the runs (unknown-usage charges included)."""
        return self._used if self._shared is None else self._shared.used_tokens

    @property
    def reserved_tokens(self) -> int:
        """Tokens held by open reservations."""
        return self._reserved if self._shared is None else self._shared.reserved_tokens

    @property
    def remaining_tokens(self) -> int:
        """Tokens left (int, >= 0) after use and open reservations."""
        if self._shared is not None:
            return self._shared.remaining_tokens
        with self._lock:
            return max(0, self.max_tokens - self._used - self._reserved)

    def check(self) -> None:
        """Raise BudgetExceeded(``budget_tokens``) when the pool is spent (use and open
        reservations reach ``max_tokens``)."""
        if self._shared is not None:
            self._shared.check()
            return
        with self._lock:
            held = self._used + self._reserved
            if held >= self.max_tokens:
                raise BudgetExceeded(STOP_BUDGET_TOKENS, self.max_tokens, held, 0, self._detail)

    def reserve(self, tokens: int, *, call_id: str | None = None) -> None:
        """Hold ``tokens`` (int >= 0) for one call. Raises BudgetExceeded(``budget_tokens``) when
        they do not fit next to use and open reservations (nothing is held then)."""
        if self._shared is not None:
            self._shared.reserve(tokens, call_id=call_id)
            return
        with self._lock:
            held = self._used + self._reserved
            if held + tokens > self.max_tokens:
                raise BudgetExceeded(STOP_BUDGET_TOKENS, self.max_tokens, held, tokens, self._detail)
            self._reserved += tokens

    def settle(self, reserved_tokens: int, used_tokens: int, *, call_id: str | None = None) -> None:
        """Replace a reservation of ``reserved_tokens`` with ``used_tokens`` (0: released).
        Never raises for budget reasons: a call that used more than it reserved is counted.
        With a shared ledger the hold of ``call_id`` is settled, once."""
        if self._shared is not None:
            self._shared.settle(reserved_tokens, used_tokens, call_id=call_id)
            return
        with self._lock:
            self._reserved = max(0, self._reserved - reserved_tokens)
            self._used += used_tokens
            alert = self._alert_locked()
        self._deliver(alert)

    @property
    def _detail(self) -> str:
        return f"token pool {self.name}"

    def _alert_locked(self) -> PoolAlert | None:
        if self._alerted or self._used < self._alert_at * self.max_tokens:
            return None
        self._alerted = True  # use only grows: one alert per pool
        percent = round(100 * self._used / self.max_tokens, 1) if self.max_tokens else 100.0
        return PoolAlert(self.name, self._used, self.max_tokens, percent)

    def _deliver(self, alert: PoolAlert | None) -> None:
        if alert is None:
            return
        log.warning("token pool %s at %.1f %% of %d tokens", alert.pool, alert.percent, alert.max_tokens)
        if self._on_alert is not None:
            try:
                self._on_alert(alert)
            except Exception:
                log.exception("token pool on_alert callback failed")


def _shared_pool(ledger, scope, name, max_tokens, alert_at, on_alert):
    """The shared pool for ``ledger`` (argument, else ``BUDGETLENS_LEDGER``); None: in-process."""
    from budgetlens.guard.ledgers import scope_key, shared_client

    key = scope_key(scope)
    client = shared_client(ledger)
    if client is None:
        return None
    from budgetlens.guard.ledgers.accounts import SharedPool

    return SharedPool(client, name, max_tokens, scope=key, alert_at=alert_at, on_alert=on_alert)
