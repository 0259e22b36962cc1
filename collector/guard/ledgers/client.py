"""The process side of a shared ledger: leases kept alive, settles that never raise, and the
offline policy.

One :class:`LedgerClient` per ledger and process (``budgetlens.guard.ledgers.shared_client``
caches them) wraps a backend (:class:`~budgetlens.guard.ledgers.protocol.Ledger`):

- **Leases.** Every hold is taken for ``lease_s`` seconds. A daemon thread renews the holds of
  this process's calls in flight every ``lease_s / 3`` seconds, so a call may take longer than
  the lease while the process lives; a process killed with -9 stops renewing and its holds end at
  most ``lease_s`` after its last renewal. A hold is renewed for at most ``max_hold_s`` after it
  was taken (a reservation never settled by a live process ends too).
- **Failures** are not waited for twice: within ``RETRY_AFTER_S`` (1 s) of one, operations
  apply the offline policy at once; the renewal thread keeps probing.
- **Settles** never raise into the agent: a settle that cannot reach the ledger waits in an
  outbox and is sent again (same call id: it charges once) before the next operation and by the
  renewal thread.
- **Offline policy** when the ledger cannot be reached: ``block`` (default: every reservation is
  refused, reason ``budget_cost`` / ``budget_tokens``, detail ``ledger unreachable``) or
  ``residual:F`` (this process may hold and spend, per account, up to ``F`` x the limit (0 < F
  <= 1), less the spend it last saw, until the ledger answers again; its charges are then sent).
  Never unlimited: with ``residual:F`` and P processes a fleet passes a limit by at most
  P x F x limit during an outage.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from budgetlens.guard.ledgers.protocol import EPSILON, Balance, Ledger, LedgerUnavailable, Refusal

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LEASE_S", "DEFAULT_MAX_HOLD_S", "LedgerClient", "OfflinePolicy", "parse_offline"]

#: Seconds a hold lasts without renewal (a killed worker's holds end within this).
DEFAULT_LEASE_S = 30.0
#: Seconds after which a hold is no longer renewed (a call longer than this loses its hold).
DEFAULT_MAX_HOLD_S = 3600.0
#: Seconds after a failure during which operations apply the offline policy at once, without
#: waiting for the ledger again (the renewal thread keeps trying).
RETRY_AFTER_S = 1.0
UNREACHABLE = "ledger unreachable"


@dataclass(frozen=True, slots=True)
class OfflinePolicy:
    """What the guard does while the ledger cannot be reached: ``residual`` = 0 blocks; else
    the fraction (0, 1] of each limit this process may use on its own."""

    residual: float = 0.0

    def __str__(self) -> str:
        return "block" if not self.residual else f"residual:{self.residual:g}"


def parse_offline(value: str | OfflinePolicy | None) -> OfflinePolicy:
    """``"block"`` (or None) or ``"residual:F"`` with 0 < F <= 1 -> OfflinePolicy. Raises
    ValueError naming the rule."""
    if value is None or isinstance(value, OfflinePolicy):
        return value or OfflinePolicy()
    text = str(value).strip().lower()
    if text == "block":
        return OfflinePolicy()
    name, _, fraction = text.partition(":")
    try:
        residual = float(fraction)
    except ValueError:
        residual = -1.0
    if name != "residual" or not 0 < residual <= 1:
        raise ValueError(
            f"ledger offline policy must be 'block' or 'residual:F' with 0 < F <= 1, got {value!r}"
        )
    return OfflinePolicy(residual)


class LedgerClient:
    """Leases, retries and the offline policy over ``backend`` (see the module docstring).

    ``lease_s`` (> 0) and ``max_hold_s`` (>= lease_s) in seconds; ``offline``: an
    :class:`OfflinePolicy` or its text. ``name``: shown in logs (the ledger URL without
    password). Raises ValueError for a bad argument. Thread-safe.
    """

    def __init__(
        self,
        backend: Ledger,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        max_hold_s: float = DEFAULT_MAX_HOLD_S,
        offline: str | OfflinePolicy | None = None,
        name: str = "ledger",
    ) -> None:
        if isinstance(lease_s, bool) or not isinstance(lease_s, (int, float)) or not 0 < lease_s < 1e9:
            raise ValueError(f"lease_s must be a number of seconds > 0, got {lease_s!r}")
        if not isinstance(max_hold_s, (int, float)) or max_hold_s < lease_s:
            raise ValueError(f"max_hold_s must be >= lease_s ({lease_s}), got {max_hold_s!r}")
        self.backend, self.lease_s, self.max_hold_s = backend, float(lease_s), float(max_hold_s)
        self.offline = parse_offline(offline)
        self.name = name
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}  # call id -> monotonic time the hold was taken
        self._outbox: dict[str, tuple[tuple[str, ...], float]] = {}  # settles not yet sent
        self._local_held: dict[str, tuple[tuple[str, ...], float]] = {}  # offline holds
        self._local_spent: dict[str, float] = {}  # offline charges per key, not yet sent
        self._known_spent: dict[str, float] = {}  # last spend seen per key
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reachable = True
        self._down_until = 0.0  # monotonic time before which the ledger counts as unreachable

    def _call(self, op, *args):
        """``op(*args)`` on the backend; LedgerUnavailable at once within RETRY_AFTER_S of a failure."""
        if self._down_until > time.monotonic():
            raise LedgerUnavailable("unreachable a moment ago")
        try:
            return op(*args)
        except LedgerUnavailable:
            self._down_until = time.monotonic() + RETRY_AFTER_S
            raise

    # --- operations --------------------------------------------------------------------------
    def reserve(self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float) -> Refusal | None:
        """Hold ``amount`` for ``call_id`` in every ``(key, limit)``; None when held, else the
        Refusal (``detail`` names an unreachable ledger). Never raises LedgerUnavailable."""
        self._flush()
        try:
            refusal = self._call(self.backend.reserve, call_id, accounts, amount, self.lease_s)
        except LedgerUnavailable as exc:
            self._unreachable(exc)
            return self._reserve_offline(call_id, accounts, amount)
        self._reachable = True
        if refusal is not None:
            self._known_spent[refusal.key] = refusal.spent
            return refusal
        if amount > 0:
            with self._lock:
                self._live[call_id] = time.monotonic()
            self._start_renewing()
        return None

    def settle(self, call_id: str, keys: Sequence[str], amount: float) -> dict[str, float] | None:
        """Drop ``call_id``'s holds and charge ``amount`` to ``keys`` once. Returns the keys'
        spent after the charge; None when settled before, or when the ledger is unreachable (the
        settle then waits in the outbox). Never raises LedgerUnavailable."""
        keys = tuple(keys)
        with self._lock:
            self._live.pop(call_id, None)
            local = self._local_held.pop(call_id, None)
        self._flush()
        try:
            spent = self._call(self.backend.settle, call_id, keys, amount)
        except LedgerUnavailable as exc:
            self._unreachable(exc)
            with self._lock:
                self._outbox[call_id] = (keys, amount)
                for key in keys:
                    self._local_spent[key] = self._local_spent.get(key, 0.0) + amount
            self._start_renewing()
            return None
        if local is not None:
            log.debug("call %s held offline, settled at the ledger", call_id)
        if spent:
            self._known_spent.update(spent)
        return spent

    def balances(self, keys: Sequence[str]) -> dict[str, Balance] | None:
        """Spent and live holds of ``keys``, this process's unsent charges included; None when
        the ledger is unreachable."""
        self._flush()
        try:
            found = self._call(self.backend.balances, keys)
        except LedgerUnavailable as exc:
            self._unreachable(exc)
            return None
        with self._lock:
            pending = dict(self._local_spent)
        for key, balance in found.items():
            self._known_spent[key] = balance.spent
            if key in pending:
                found[key] = Balance(balance.spent + pending[key], balance.held)
        return found

    @property
    def pending_settles(self) -> int:
        """Settles waiting in the outbox (the ledger was unreachable)."""
        with self._lock:
            return len(self._outbox)

    def close(self) -> None:
        """Stop renewing (holds then end with their lease), try the outbox once, close the
        backend. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._flush()
        self.backend.close()

    # --- offline ------------------------------------------------------------------------------
    def _unreachable(self, exc: LedgerUnavailable) -> None:
        if self._reachable:
            log.warning("%s unreachable (%s); offline policy %s", self.name, exc, self.offline)
        self._reachable = False

    def _reserve_offline(
        self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float
    ) -> Refusal | None:
        residual = self.offline.residual
        with self._lock:
            if residual:
                refused = None
                for key, limit in accounts:
                    held = sum(a for keys, a in self._local_held.values() if key in keys)
                    spent = self._local_spent.get(key, 0.0)
                    allowance = min(residual * limit, max(0.0, limit - self._known_spent.get(key, 0.0)))
                    if spent + held + amount > allowance + EPSILON:
                        refused = Refusal(
                            key, limit, spent, held, f"{UNREACHABLE} (residual {residual:g} spent)"
                        )
                        break
                if refused is None:
                    self._local_held[call_id] = (tuple(k for k, _ in accounts), amount)
                    return None
                return refused
        key, limit = accounts[0] if accounts else ("", 0.0)
        return Refusal(
            key, limit, self._known_spent.get(key, 0.0), 0.0, f"{UNREACHABLE} (offline policy block)"
        )

    def _flush(self, probe: bool = False) -> None:
        """Send the outbox (oldest first); stops at the first failure. ``probe``: try even
        within RETRY_AFTER_S of a failure (the renewal thread)."""
        if not self._outbox or (not probe and self._down_until > time.monotonic()):
            return
        with self._lock:
            waiting = list(self._outbox.items())
        for call_id, (keys, amount) in waiting:
            try:
                spent = self.backend.settle(call_id, keys, amount)
            except LedgerUnavailable:
                self._down_until = time.monotonic() + RETRY_AFTER_S
                return
            self._down_until = 0.0
            with self._lock:
                self._outbox.pop(call_id, None)
                for key in keys:
                    left = self._local_spent.get(key, 0.0) - amount
                    if left > EPSILON:
                        self._local_spent[key] = left
                    else:
                        self._local_spent.pop(key, None)
            if spent:
                self._known_spent.update(spent)
        if not self._reachable:
            log.warning("%s reachable again; %d offline settles sent", self.name, len(waiting))
            self._reachable = True

    # --- renewal thread -------------------------------------------------------------------------
    def _start_renewing(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._renew_loop, name="budgetlens-ledger-lease", daemon=True
            )
            self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            self.renew_now()

    def renew_now(self) -> int:
        """Renew this process's live holds once and send the outbox; returns the holds renewed
        (0 when the ledger is unreachable). The renewal thread calls this every lease_s / 3."""
        now = time.monotonic()
        with self._lock:
            for call_id, taken in list(self._live.items()):
                if now - taken > self.max_hold_s:
                    del self._live[call_id]
                    log.warning("call %s held for over %g s: no longer renewed", call_id, self.max_hold_s)
            live = list(self._live)
        self._flush(probe=True)
        if not live:
            return 0
        try:
            renewed = self.backend.renew(live, self.lease_s)
            self._down_until = 0.0
            return renewed
        except LedgerUnavailable as exc:
            self._unreachable(exc)
            return 0
