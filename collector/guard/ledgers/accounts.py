"""Spend windows and token pools kept in a shared ledger: what ``SpendTracker`` and
``TokenPool`` delegate to when a ledger is set (``ledger=`` or ``BUDGETLENS_LEDGER``).

:class:`SharedWindows` keeps the calendar windows (``daily``, ``monthly``; in the tracker's time
zone) of one scope as ledger accounts, one per period (``spend:daily:UTC:2026-12-01|*``): the
sum starts again at local midnight / on the 1st because the key changes. Rolling windows
(``24h``, ``30d``) stay in-process only. :class:`SharedPool` keeps one pool of tokens
(``pool:NAME|scope``; it never resets).

Each reservation of a run is one ledger hold under a call id unique to the attempt
(``RunBudget`` passes ``call_id`` = run id and reservation number); its settle charges the
actual amount once and drops the hold. Alerts fire at the settle that crosses ``alert_at`` of a
limit: once in the whole fleet per period (per pool), whichever process makes it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from budgetlens.guard.ledgers.client import LedgerClient
from budgetlens.guard.ledgers.protocol import Balance, Refusal, account_key
from budgetlens.guard.results import BudgetExceeded, PoolAlert, SpendAlert
from budgetlens.semconv import STOP_BUDGET_COST, STOP_BUDGET_TOKENS

log = logging.getLogger(__name__)

__all__ = ["CHECK_TTL_S", "SharedPool", "SharedWindows"]

#: Seconds a check (``before_turn``) trusts the spend the ledger last reported; ``reserve``
#: always asks the ledger.
CHECK_TTL_S = 1.0


class _Calls:
    """Guard call id -> ledger call id: a new one per reservation attempt (so a run id used twice
    never meets the first run's settles), kept until settled; the last settled ones are
    remembered, so settling a call id again reuses its ledger id and the ledger charges once."""

    _REMEMBERED = 10_000

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._open: dict[str, str] = {}
        self._settled: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def new(self, call_id: str | None) -> str:
        return f"{self._prefix}{call_id or ''}#{uuid.uuid4().hex}"

    def opened(self, call_id: str | None, ledger_id: str) -> None:
        if call_id is not None:
            with self._lock:
                self._open[call_id] = ledger_id

    def released(self, call_id: str | None) -> str | None:
        """The ledger id of ``call_id``'s open hold (no longer open), or None."""
        if call_id is None:
            return None
        with self._lock:
            return self._open.pop(call_id, None)

    def settled(self, call_id: str | None) -> str:
        """The ledger id to settle ``call_id`` under (its hold's, or the one it was settled
        under before, else a new one)."""
        if call_id is None:
            return self.new(None)
        with self._lock:
            ledger_id = self._open.pop(call_id, None) or self._settled.get(call_id) or self.new(call_id)
            self._settled[call_id] = ledger_id
            self._settled.move_to_end(call_id)
            if len(self._settled) > self._REMEMBERED:
                self._settled.popitem(last=False)
            return ledger_id


class _Seen:
    """The spend of accounts as the ledger last reported it, with when (monotonic s): ``check``
    (``before_turn``) reads it instead of asking the ledger when it is under ``CHECK_TTL_S`` old."""

    def __init__(self) -> None:
        self._spent: dict[str, tuple[float, float]] = {}

    def note(self, key: str, spent: float) -> None:
        self._spent[key] = (spent, time.monotonic())

    def fresh(self, keys: list[str]) -> dict[str, float] | None:
        now, found = time.monotonic(), {}
        for key in keys:
            seen = self._spent.get(key)
            if seen is None or now - seen[1] > CHECK_TTL_S:
                return None
            found[key] = seen[0]
        return found


def _deliver(alert: Any, on_alert: Callable[[Any], object] | None, what: str) -> None:
    if on_alert is not None:
        try:
            on_alert(alert)
        except Exception:
            log.exception("%s on_alert callback failed", what)


class SharedWindows:
    """Calendar spend windows of one scope in a shared ledger (USD). Built by ``SpendTracker``;
    ``limits`` are validated there. Raises ValueError for a rolling window."""

    def __init__(
        self,
        client: LedgerClient,
        limits: dict[str, float],
        *,
        tz: str,
        scope: str,
        alert_at: float,
        on_alert: Callable[[Any], object] | None,
        clock: Callable[[], float],
    ) -> None:
        rolling = sorted(name for name in limits if name not in ("daily", "monthly"))
        if rolling:
            raise ValueError(
                f"rolling spend windows {rolling} are kept in-process only; a shared ledger keeps the "
                "calendar windows 'daily' and 'monthly'"
            )
        self.client, self.limits, self.tz, self.scope = client, dict(limits), tz, scope
        self._zone = ZoneInfo(tz)
        self._alert_at, self._on_alert, self._clock = alert_at, on_alert, clock
        self._calls = _Calls(f"spend|{scope}|")
        self._seen = _Seen()

    def period(self, window: str, ts: float | None = None) -> str:
        """The calendar period of ``window`` at ``ts`` (default now): ``YYYY-MM-DD`` or ``YYYY-MM``."""
        local = datetime.fromtimestamp(self._clock() if ts is None else ts, self._zone)
        return local.strftime("%Y-%m-%d") if window == "daily" else local.strftime("%Y-%m")

    def key(self, window: str, ts: float | None = None) -> str:
        """The ledger account of ``window`` now (or at ``ts``)."""
        return account_key("spend", f"{window}:{self.tz}", self.scope, self.period(window, ts))

    def _accounts(self, ts: float | None = None) -> list[tuple[str, str, float]]:
        return [(name, self.key(name, ts), limit) for name, limit in self.limits.items()]

    def _refused(self, refusal: Refusal, requested: float) -> BudgetExceeded:
        window = next((n for n, k, _ in self._accounts() if k == refusal.key), "spend")
        detail = f"{window} spend window {self.period(window)} (spend + open reservations, shared ledger)"
        if refusal.detail:
            detail = f"{window} spend window: {refusal.detail}"
        return BudgetExceeded(
            STOP_BUDGET_COST,
            refusal.limit,
            round(refusal.spent + refusal.held, 6),
            round(requested, 6),
            detail,
        )

    def reserve(self, cost_usd: float, *, call_id: str | None = None) -> None:
        """Hold ``cost_usd`` in every window for ``call_id``; BudgetExceeded(``budget_cost``)
        naming the window when it does not fit (or the ledger is unreachable under ``block``)."""
        ledger_id = self._calls.new(call_id)
        refusal = self.client.reserve(ledger_id, [(k, lim) for _, k, lim in self._accounts()], cost_usd)
        if refusal is not None:
            if not refusal.detail:
                self._seen.note(refusal.key, refusal.spent)
            raise self._refused(refusal, cost_usd)
        self._calls.opened(call_id, ledger_id)

    def settle(self, reserved_usd: float, cost_usd: float | None, *, call_id: str | None = None) -> list:
        """Replace ``call_id``'s hold with ``cost_usd`` (None or 0: released, nothing charged).
        Returns the alerts this crossed. Never raises for budget or ledger reasons."""
        if not cost_usd:
            ledger_id = self._calls.released(call_id)
            if ledger_id is not None:
                self.client.settle(ledger_id, [], 0.0)  # drops the hold, charges nothing
            return []
        return self._charge(self._calls.settled(call_id), cost_usd, None)

    def add(self, cost_usd: float, ts: float | None = None, *, call_id: str | None = None) -> list:
        """Charge ``cost_usd`` at ``ts`` (default now), once per ``call_id``; returns alerts."""
        return self._charge(self._calls.settled(call_id), cost_usd, ts)

    def _charge(self, ledger_id: str, cost_usd: float, ts: float | None) -> list:

        accounts = self._accounts(ts)
        spent = self.client.settle(ledger_id, [k for _, k, _ in accounts], cost_usd)
        alerts = []
        for name, key, limit in accounts:
            after = (spent or {}).get(key)
            if after is not None:
                self._seen.note(key, after)
            line = self._alert_at * limit
            if after is not None and after - cost_usd < line <= after:
                period = self.period(name, ts)
                alerts.append(SpendAlert(name, after, limit, round(100 * after / limit, 1), period))
                log.warning(
                    "spend window %s (%s) at %.1f %% of $%.2f", name, period, 100 * after / limit, limit
                )
        for alert in alerts:
            _deliver(alert, self._on_alert, "spend")
        return alerts

    def _balance(self, window: str) -> Balance:
        found = self.client.balances([self.key(window)])
        if found is None:
            return Balance(0.0, 0.0)
        return found[self.key(window)]

    def spent(self, window: str) -> float:
        """USD spent in ``window`` this period (fleet-wide). KeyError for a window not kept."""
        if window not in self.limits:
            raise KeyError(f"no spend window {window!r}")
        return self._balance(window).spent

    def reserved(self, window: str) -> float:
        """USD of live holds in ``window`` (fleet-wide). KeyError for a window not kept."""
        if window not in self.limits:
            raise KeyError(f"no spend window {window!r}")
        return self._balance(window).held

    def check(self) -> None:
        """BudgetExceeded(``budget_cost``) when a window has reached its limit (spend as the
        ledger reported it at most ``CHECK_TTL_S`` ago, else asked now), or when the ledger is
        unreachable and the offline policy blocks."""
        accounts = self._accounts()
        keys = [k for _, k, _ in accounts]
        spent = self._seen.fresh(keys)
        if spent is None:
            found = self.client.balances(keys)
            if found is not None:
                spent = {key: balance.spent for key, balance in found.items()}
                for key, value in spent.items():
                    self._seen.note(key, value)
        for name, key, limit in accounts:
            if spent is None:
                if not self.client.offline.residual:
                    raise BudgetExceeded(
                        STOP_BUDGET_COST, limit, 0, 0, f"{name} spend window: ledger unreachable (block)"
                    )
                continue
            if spent[key] >= limit:
                raise BudgetExceeded(
                    STOP_BUDGET_COST,
                    limit,
                    round(spent[key], 6),
                    0,
                    f"{name} spend window {self.period(name)}",
                )


class SharedPool:
    """One token pool of one scope in a shared ledger (tokens). Built by ``TokenPool``."""

    def __init__(
        self,
        client: LedgerClient,
        name: str,
        max_tokens: int,
        *,
        scope: str,
        alert_at: float,
        on_alert: Callable[[Any], object] | None,
    ) -> None:
        self.client, self.name, self.max_tokens = client, name, max_tokens
        self.key = account_key("pool", name, scope)
        self._alert_at, self._on_alert = alert_at, on_alert
        self._calls = _Calls(f"pool|{scope}|")

    def _balance(self) -> Balance | None:
        found = self.client.balances([self.key])
        return None if found is None else found[self.key]

    @property
    def used_tokens(self) -> int:
        balance = self._balance()
        return 0 if balance is None else round(balance.spent)

    @property
    def reserved_tokens(self) -> int:
        balance = self._balance()
        return 0 if balance is None else round(balance.held)

    @property
    def remaining_tokens(self) -> int:
        balance = self._balance()
        if balance is None:
            return 0
        return max(0, self.max_tokens - round(balance.spent + balance.held))

    def check(self) -> None:
        balance = self._balance()
        detail = f"token pool {self.name}"
        if balance is None:
            if not self.client.offline.residual:
                raise BudgetExceeded(
                    STOP_BUDGET_TOKENS, self.max_tokens, 0, 0, f"{detail}: ledger unreachable"
                )
            return
        held = round(balance.spent + balance.held)
        if held >= self.max_tokens:
            raise BudgetExceeded(STOP_BUDGET_TOKENS, self.max_tokens, held, 0, detail)

    def reserve(self, tokens: int, *, call_id: str | None = None) -> None:
        ledger_id = self._calls.new(call_id)
        refusal = self.client.reserve(ledger_id, [(self.key, float(self.max_tokens))], float(tokens))
        if refusal is not None:
            detail = f"token pool {self.name}" + (f": {refusal.detail}" if refusal.detail else "")
            raise BudgetExceeded(
                STOP_BUDGET_TOKENS, self.max_tokens, round(refusal.spent + refusal.held), tokens, detail
            )
        self._calls.opened(call_id, ledger_id)

    def settle(self, reserved_tokens: int, used_tokens: int, *, call_id: str | None = None) -> None:

        if not used_tokens:
            ledger_id = self._calls.released(call_id)
            if ledger_id is not None:
                self.client.settle(ledger_id, [], 0.0)  # drops the hold, charges nothing
            return
        spent = self.client.settle(self._calls.settled(call_id), [self.key], float(used_tokens))
        after = (spent or {}).get(self.key)
        line = self._alert_at * self.max_tokens
        if after is not None and after - used_tokens < line <= after:
            percent = round(100 * after / self.max_tokens, 1) if self.max_tokens else 100.0
            log.warning("token pool %s at %.1f %% of %d tokens", self.name, percent, self.max_tokens)
            _deliver(
                PoolAlert(self.name, round(after), self.max_tokens, percent), self._on_alert, "token pool"
            )
