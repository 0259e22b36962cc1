"""Spend windows across runs: daily / monthly limits in USD, per process.

A :class:`SpendTracker` sums the cost of every run of THIS process that shares it (pass it as
``RunBudget(spend=tracker)``). Windows:

- ``daily`` and ``monthly``: calendar days / months in the tracker's time zone (``zoneinfo``
  name, default ``UTC``); the sum starts again at local midnight / on the 1st.
- ``24h`` and ``30d``: rolling windows, only when named so.

Per window: one alert when spend crosses ``alert_at`` (default 80 %) of its limit (again only in
the next calendar period, or for rolling windows after spend fell back below the line), and a
hard stop (``BudgetExceeded`` with reason ``budget_cost``) from the moment spend reaches the limit.

Reservations: ``RunBudget.reserve`` reserves the call's estimated cost in every window of the
tracker atomically (one lock for all runs that share it) and refuses a call whose estimate does
not fit next to spend and the other runs' open reservations; ``record`` settles it (the actual
cost replaces the estimate; a call without usage keeps the estimate as its charge) and
``release`` gives it back. Spend then passes a limit by at most what one call overshoots its
own estimate.

This is per process: two processes (or hosts) each sharing their own tracker do not see each
other's reservations or spend. Fleet-wide spend alerts come from the collector's Prometheus
metrics (``budgetlens_*`` cost counters aggregated across agents), not from this tracker.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from budgetlens.attribution import check_scope
from budgetlens.guard.results import BudgetExceeded
from budgetlens.semconv import STOP_BUDGET_COST

log = logging.getLogger(__name__)

__all__ = ["SpendAlert", "SpendTracker", "WINDOWS"]

#: Window names -> rolling length in seconds (None = calendar window).
WINDOWS = {"daily": None, "monthly": None, "24h": 24 * 3600.0, "30d": 30 * 24 * 3600.0}


@dataclass(frozen=True, slots=True)
class SpendAlert:
    """An 80 % alert of one window: spend and limit in USD, percent 0-100 (one decimal)."""

    window: str
    spent_usd: float
    limit_usd: float
    percent: float
    period: str


class _Window:
    __slots__ = ("name", "limit", "length", "period", "spent", "alerted", "entries", "reserved")

    def __init__(self, name: str, limit: float) -> None:
        self.name, self.limit, self.length = name, limit, WINDOWS[name]
        self.period: str | None = None
        self.spent = 0.0
        self.alerted = False
        self.entries: deque[tuple[float, float]] = deque()
        self.reserved = 0.0  # USD of open reservations (not yet spent)


class SpendTracker:
    """Sums USD spend per window and stops at the limits.

    ``limits``: ``{"daily": 20.0, "monthly": 400.0, "24h": 25.0, "30d": 500.0}`` (any subset,
    USD > 0); ``tz``: zoneinfo name for calendar windows; ``alert_at``: fraction in (0, 1];
    ``on_alert``: callable taking a :class:`SpendAlert`; ``clock``: seconds since the epoch
    (injectable). ``scope``: None (every run given it) or an
    attribution mapping such as ``{"team": "search-infra"}``: only runs whose attribution matches it
    (``RunBudget(team=...)``, see :mod:`budgetlens.attribution`) draw from it; others ignore it. Raises ValueError naming an unknown window, a bad limit or time zone.
    Thread-safe.
    """

    def __init__(
        self,
        limits: dict[str, float],
        *,
        tz: str = "UTC",
        alert_at: float = 0.8,
        on_alert: Callable[[SpendAlert], object] | None = None,
        clock: Callable[[], float] = time.time,
        scope: Mapping[str, str] | None = None,
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
        self.scope = check_scope(scope)

    def _period(self, window: _Window, ts: float) -> str:
        local = datetime.fromtimestamp(ts, self._zone)
        return local.strftime("%Y-%m-%d") if window.name == "daily" else local.strftime("%Y-%m")

    def _roll(self, window: _Window, now: float) -> None:
        if window.length is None:
            period = self._period(window, now)
            if period != window.period:
                window.period, window.spent, window.alerted = period, 0.0, False
            return
        window.period = window.name
        while window.entries and window.entries[0][0] <= now - window.length:
            _, cost = window.entries.popleft()
            window.spent -= cost
        if window.spent < 1e-12:
            window.spent = 0.0
        if window.alerted and window.spent < self._alert_at * window.limit:
            window.alerted = False

    def add(self, cost_usd: float, ts: float | None = None) -> list[SpendAlert]:
        """Add a cost (USD >= 0) at ``ts`` (default now). Returns the alerts this crossed."""
        if (
            isinstance(cost_usd, bool)
            or not isinstance(cost_usd, (int, float))
            or not math.isfinite(cost_usd)
            or cost_usd < 0
        ):
            raise ValueError(f"cost_usd must be a finite USD amount >= 0, got {cost_usd!r}")
        now = self._clock() if ts is None else ts
        alerts = []
        with self._lock:
            for w in self._windows:
                self._roll(w, now)
                w.spent += cost_usd
                if w.length is not None:
                    w.entries.append((now, cost_usd))
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

    def reserve(self, cost_usd: float) -> None:
        """Reserve an estimated ``cost_usd`` (USD >= 0) in every window, atomically across the runs
        sharing this tracker. Raises BudgetExceeded(``budget_cost``) naming the window, changing
        nothing, when spend plus open reservations plus this estimate would pass a limit (or
        spend has reached it)."""
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

    def release(self, reserved_usd: float) -> None:
        """Give back a reservation of ``reserved_usd`` (USD) made with :meth:`reserve`."""
        with self._lock:
            for w in self._windows:
                w.reserved = max(0.0, w.reserved - reserved_usd)
                if w.reserved < 1e-12:
                    w.reserved = 0.0

    def reserved(self, window: str) -> float:
        """USD of open reservations in ``window``. Raises KeyError for an unknown window."""
        with self._lock:
            for w in self._windows:
                if w.name == window:
                    return w.reserved
        raise KeyError(f"no spend window {window!r}")

    def spent(self, window: str) -> float:
        """USD spent in ``window`` now. Raises KeyError for a window the tracker has not."""
        with self._lock:
            for w in self._windows:
                if w.name == window:
                    self._roll(w, self._clock())
                    return w.spent
        raise KeyError(f"no spend window {window!r}")

    def check(self) -> None:
        """Raise BudgetExceeded(``budget_cost``) when any window has reached its limit."""
        now = self._clock()
        with self._lock:
            for w in self._windows:
                self._roll(w, now)
                if w.spent >= w.limit:
                    raise BudgetExceeded(
                        STOP_BUDGET_COST, w.limit, round(w.spent, 6), 0, f"{w.name} spend window {w.period}"
                    )
