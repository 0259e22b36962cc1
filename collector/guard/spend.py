"""Spend windows across runs: daily / monthly limits in USD, per process.

A :class:`SpendTracker` sums the cost of every run of THIS process that shares it (pass it as
``RunBudget(spend=tracker)``). Windows:

- ``daily`` and ``monthly``: calendar days / months in the tracker's time zone (``zoneinfo``
  name, default ``UTC``); the sum starts again at local midnight / on the 1st.
- ``24h`` and ``30d``: rolling windows, only when named so.

Each cost counts in the period of its own timestamp, whatever order costs arrive in: a late cost
stamped in an earlier month goes to that month (never resets the current one), and a cost older
than a rolling window's length is not in it. :meth:`SpendTracker.next_reset` tells when a
window's sum next starts again (calendar) or next drops (rolling).

Per window: one alert when spend crosses ``alert_at`` (default 80 %) of its limit (again only in
the next calendar period, or for rolling windows after spend fell back below the line), and a
hard stop (``BudgetExceeded`` with reason ``budget_cost``) from the moment spend reaches the limit.

Reservations: ``RunBudget.reserve`` reserves the call's estimated cost in every window of the
tracker atomically (one lock for all runs that share it) and refuses a call whose estimate does
not fit next to spend and the other runs' open reservations; ``record`` settles it (the actual
cost replaces the estimate; a call without usage keeps the estimate as its charge) and
``release`` gives it back. Spend then passes a limit by at most the sum of the in-flight calls'
shortfall against their estimates (real cost minus estimate, where positive): each open
reservation fitted under the limit, so only the excess of the calls in flight can land past it.

By default this is per process: two processes (or hosts) each sharing their own tracker do not
see each other's reservations or spend. With a shared ledger (``ledger=`` or
``BUDGETLENS_LEDGER``: PostgreSQL, the collector, a SQLite file; see docs/fleet.md) the calendar
windows of a ``scope`` are kept there and every process reserves against the same window
(:mod:`budgetlens.guard.ledgers.accounts`).
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from budgetlens.attribution import check_scope
from budgetlens.guard.results import BudgetExceeded, SpendAlert
from budgetlens.semconv import STOP_BUDGET_COST

log = logging.getLogger(__name__)

__all__ = ["SpendAlert", "SpendTracker", "WINDOWS"]

#: Window names -> rolling length in seconds (None = calendar window).
WINDOWS = {"daily": None, "monthly": None, "24h": 24 * 3600.0, "30d": 30 * 24 * 3600.0}


class _Window:
    __slots__ = ("name", "limit", "length", "period", "spent", "alerted", "entries", "reserved", "ahead")

    def __init__(self, name: str, limit: float) -> None:
        self.name, self.limit, self.length = name, limit, WINDOWS[name]
        self.period: str | None = None
        self.spent = 0.0
        self.alerted = False
        self.entries: list[tuple[float, float]] = []  # rolling: (ts, USD), sorted by ts
        self.ahead: dict[str, float] = {}  # calendar: USD stamped in periods after the current one
        self.reserved = 0.0  # USD of open reservations (not yet spent)


class SpendTracker:
    """Sums USD spend per window and stops at the limits.

    ``limits``: ``{"daily": 20.0, "monthly": 400.0, "24h": 25.0, "30d": 500.0}`` (any subset,
    USD > 0); ``tz``: zoneinfo name for calendar windows; ``alert_at``: fraction in (0, 1];
    ``on_alert``: callable taking a :class:`SpendAlert`; ``clock``: seconds since the epoch
    (injectable). ``ledger``: a shared ledger URL, backend or client (default
    ``BUDGETLENS_LEDGER``; unset = in-process). Raises
    ValueError naming an unknown window, a bad limit, time zone, scope or ledger (and a rolling
    window with a shared ledger). Thread-safe.
    ``scope``: which runs count against it, as :class:`budgetlens.guard.pool.TokenPool`'s ``scope``
    (None: every run given it; an attribution mapping: only the runs it matches; with a shared
    ledger it also names the ledger's account).
    """

    def __init__(
        self,
        limits: dict[str, float],
        *,
        tz: str = "UTC",
        alert_at: float = 0.8,
        on_alert: Callable[[SpendAlert], object] | None = None,
        clock: Callable[[], float] = time.time,
        ledger: Any = None,
        scope: Mapping[str, str] | str | None = None,
    ) -> None:
        if not limits:
            raise ValueError(f"limits must name at least one window of {tuple(WINDOWS)}")
        unknown = sorted(set(limits) - set(WINDOWS))
        if unknown:
            raise ValueError(
                f"unknown spend window(s) {unknown}; use {tuple(WINDOWS)} (rolling windows only "
                "when named '24h' or '30d')"
            )
        for name, value in limits.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"limits[{name!r}] must be a finite USD amount > 0, got {value!r}")
        if isinstance(alert_at, bool) or not isinstance(alert_at, (int, float)) or not 0 < alert_at <= 1:
            raise ValueError(f"alert_at must be a fraction in (0, 1], got {alert_at!r}")
        try:
            self._zone = ZoneInfo(tz)
        except Exception as exc:
            raise ValueError(f"tz must be an IANA time zone name, got {tz!r}") from exc
        self._windows = [_Window(name, float(v)) for name, v in limits.items()]
        self._alert_at, self._on_alert, self._clock = alert_at, on_alert, clock
        self._lock = threading.Lock()
        self.scope = None if scope is None or isinstance(scope, str) else check_scope(scope)
        shared_scope = scope if self.scope is None else self.scope  # tenant -> team: one account
        self._shared = _shared_windows(ledger, shared_scope, limits, tz, alert_at, on_alert, clock)

    @property
    def shared(self) -> bool:
        """True when the windows are kept in a shared ledger (not in this process)."""
        return self._shared is not None

    def _period(self, window: _Window, ts: float) -> str:
        local = datetime.fromtimestamp(ts, self._zone)
        return local.strftime("%Y-%m-%d") if window.name == "daily" else local.strftime("%Y-%m")

    def _roll(self, window: _Window, now: float) -> None:
        if window.length is None:
            period = self._period(window, now)
            if period != window.period:
                # costs stamped ahead of the clock (skew) count once their period comes
                window.period, window.spent, window.alerted = period, window.ahead.pop(period, 0.0), False
                window.ahead = {p: v for p, v in window.ahead.items() if p > period}
            return
        window.period = window.name
        cut = 0
        while cut < len(window.entries) and window.entries[cut][0] <= now - window.length:
            window.spent -= window.entries[cut][1]
            cut += 1
        del window.entries[:cut]
        if window.spent < 1e-12:
            window.spent = 0.0
        if window.alerted and window.spent < self._alert_at * window.limit:
            window.alerted = False

    def add(
        self, cost_usd: float, ts: float | None = None, *, call_id: str | None = None
    ) -> list[SpendAlert]:
        """Add a cost (USD >= 0) at ``ts`` (seconds since the epoch, default now): it counts in
        the period of ``ts`` (a late cost in its own past period, not the current one). Returns
        the alerts this crossed."""
        if (
            isinstance(cost_usd, bool)
            or not isinstance(cost_usd, (int, float))
            or not math.isfinite(cost_usd)
            or cost_usd < 0
        ):
            raise ValueError(f"cost_usd must be a finite USD amount >= 0, got {cost_usd!r}")
        if self._shared is not None:
            return self._shared.add(cost_usd, ts, call_id=call_id)
        now = self._clock()
        stamped = now if ts is None else ts
        alerts = []
        with self._lock:
            for w in self._windows:
                self._roll(w, now)
                if w.length is None:
                    period = self._period(w, stamped)
                    if period != w.period:
                        if w.period is not None and period > w.period:
                            w.ahead[period] = w.ahead.get(period, 0.0) + cost_usd
                        continue  # an earlier period's cost: not in the current one
                elif stamped <= now - w.length:
                    continue  # already outside the rolling window
                else:
                    bisect.insort(w.entries, (stamped, cost_usd))
                w.spent += cost_usd
                if not w.alerted and w.spent >= self._alert_at * w.limit:
                    w.alerted = True
                    alerts.append(
                        SpendAlert(
                            w.name, w.spent, w.limit, round(100 * w.spent / w.limit, 1), w.period or ""
                        )
                    )
        for alert in alerts:
            log.warning(
                "spend window %s (%s) at %.1f %% of $%.2f",
                alert.window,
                alert.period,
                alert.percent,
                alert.limit_usd,
            )
            if self._on_alert is not None:
                try:
                    self._on_alert(alert)
                except Exception:
                    log.exception("spend on_alert callback failed")
        return alerts

    def settle(self, reserved_usd: float, cost_usd: float | None, *, call_id: str | None = None) -> None:
        """Replace the reservation of ``reserved_usd`` (``call_id``'s) with the call's
        ``cost_usd`` (None: nothing charged), in one step with a shared ledger (once per call)."""
        if self._shared is not None:
            self._shared.settle(reserved_usd, cost_usd, call_id=call_id)
            return
        if reserved_usd:
            self.release(reserved_usd)
        if cost_usd is not None:
            self.add(cost_usd)

    def reserve(self, cost_usd: float, *, call_id: str | None = None) -> None:
        """Reserve an estimated ``cost_usd`` (USD >= 0) in every window, atomically across the runs
        sharing this tracker. Raises BudgetExceeded(``budget_cost``) naming the window, changing
        nothing, when spend plus open reservations plus this estimate would pass a limit (or
        spend has reached it)."""
        if self._shared is not None:
            self._shared.reserve(cost_usd, call_id=call_id)
            return
        now = self._clock()
        with self._lock:
            for w in self._windows:
                self._roll(w, now)
                committed = w.spent + w.reserved
                if w.spent >= w.limit or committed + cost_usd > w.limit + 1e-12:
                    raise BudgetExceeded(
                        STOP_BUDGET_COST,
                        w.limit,
                        round(committed, 6),
                        round(cost_usd, 6),
                        f"{w.name} spend window {w.period} (spend + open reservations)",
                    )
            for w in self._windows:
                w.reserved += cost_usd

    def release(self, reserved_usd: float, *, call_id: str | None = None) -> None:
        """Give back a reservation of ``reserved_usd`` (USD) made with :meth:`reserve` (with a
        shared ledger: the hold of ``call_id``; without one its lease ends it)."""
        if self._shared is not None:
            self._shared.settle(reserved_usd, None, call_id=call_id)
            return
        with self._lock:
            for w in self._windows:
                w.reserved = max(0.0, w.reserved - reserved_usd)
                if w.reserved < 1e-12:
                    w.reserved = 0.0

    def reserved(self, window: str) -> float:
        """USD of open reservations in ``window``. Raises KeyError for an unknown window."""
        if self._shared is not None:
            return self._shared.reserved(window)
        with self._lock:
            for w in self._windows:
                if w.name == window:
                    return w.reserved
        raise KeyError(f"no spend window {window!r}")

    def spent(self, window: str) -> float:
        """USD spent in ``window`` now. Raises KeyError for a window the tracker has not."""
        if self._shared is not None:
            return self._shared.spent(window)
        with self._lock:
            for w in self._windows:
                if w.name == window:
                    self._roll(w, self._clock())
                    return w.spent
        raise KeyError(f"no spend window {window!r}")

    def next_reset(self, window: str) -> datetime | None:
        """When ``window`` next starts again (calendar: the next local midnight or 1st of the
        month, as an aware datetime in the tracker's time zone) or next drops a cost (rolling:
        when its oldest cost leaves it; None when it holds none). Raises KeyError for a window
        the tracker has not."""
        now = self._clock()
        with self._lock:
            for w in self._windows:
                if w.name != window:
                    continue
                self._roll(w, now)
                if w.length is not None:
                    if not w.entries:
                        return None
                    return datetime.fromtimestamp(w.entries[0][0] + w.length, self._zone)
                local = datetime.fromtimestamp(now, self._zone)
                if w.name == "daily":
                    day = local.date() + timedelta(days=1)
                else:
                    day = (local.date().replace(day=28) + timedelta(days=4)).replace(day=1)
                return datetime(day.year, day.month, day.day, tzinfo=self._zone)
        raise KeyError(f"no spend window {window!r}")

    def check(self) -> None:
        """Raise BudgetExceeded(``budget_cost``) when any window has reached its limit."""
        if self._shared is not None:
            self._shared.check()
            return
        now = self._clock()
        with self._lock:
            for w in self._windows:
                self._roll(w, now)
                if w.spent >= w.limit:
                    raise BudgetExceeded(
                        STOP_BUDGET_COST, w.limit, round(w.spent, 6), 0, f"{w.name} spend window {w.period}"
                    )


def _shared_windows(ledger, scope, limits, tz, alert_at, on_alert, clock):
    """The shared windows for ``ledger`` (argument, else ``BUDGETLENS_LEDGER``); None: in-process."""
    from budgetlens.guard.ledgers import scope_key, shared_client

    key = scope_key(scope)
    client = shared_client(ledger)
    if client is None:
        return None  # in-process: the tracker is its own scope
    from budgetlens.guard.ledgers.accounts import SharedWindows

    return SharedWindows(
        client, dict(limits), tz=tz, scope=key, alert_at=alert_at, on_alert=on_alert, clock=clock
    )
