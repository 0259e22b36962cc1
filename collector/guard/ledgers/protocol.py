"""The shared ledger's contract: accounts, holds (leases), idempotent settles.

An *account* is one budget that many processes draw from, named by a key string built by
:func:`account_key`: a spend window of one calendar period (``spend:daily:UTC:2026-12-01``), or a
token pool (``pool:nightly``), each within a *scope* (``*`` for everyone, or an attribution key
such as ``team=search-infra``). The ledger stores per account the amount ``spent`` (USD or tokens,
float) and the open *holds*: ``(call_id, key, amount, expires_at)``. A hold counts against its
account until it is settled or its lease ends, whichever comes first; a worker killed with -9
therefore frees what it held when its lease ends.

Every backend (:mod:`.local` SQLite or memory, :mod:`.postgres`, :mod:`.http` to a collector)
implements :class:`Ledger`:

- ``reserve``: all or nothing over several accounts; refused when an account has reached its
  limit or ``spent + live holds + amount`` would pass it. Idempotent by ``call_id``.
- ``settle``: drop the holds of ``call_id`` and add ``amount`` to ``spent`` of each key, once:
  a second settle of the same ``call_id`` changes nothing and returns None. A settle of 0 (or
  of no keys) is a release: the holds go, nothing is charged or remembered.
- ``renew``: extend the live holds of some calls (the client's heartbeat); expired holds stay
  expired.
- ``balances``: spent and live holds of some accounts.

Backends raise :class:`LedgerUnavailable` when the ledger cannot be reached; the client
(:mod:`.client`) then applies its offline policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Balance",
    "Ledger",
    "LedgerUnavailable",
    "Refusal",
    "account_key",
    "check_amount",
    "scope_key",
    "EPSILON",
]

#: Tolerance of the fit test (float sums of USD): a reservation fits when
#: ``spent + held + amount <= limit + EPSILON`` (as the in-process tracker).
EPSILON = 1e-12

#: Scope of an account that every run shares (no attribution key).
GLOBAL_SCOPE = "*"


class LedgerUnavailable(Exception):
    """The ledger could not be reached or answered with a server error (the message says why)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a reservation did not fit: the account ``key`` with its ``limit``, ``spent`` and the
    ``held`` amount of live holds (same unit as the limit) at the moment of the refusal;
    ``detail``: empty for a limit, else why the ledger could not decide (unreachable)."""

    key: str
    limit: float
    spent: float
    held: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Balance:
    """One account now: ``spent`` and ``held`` (live holds only), in the account's unit."""

    spent: float
    held: float


class Ledger(Protocol):
    """A store of accounts and leased holds shared by many processes (see module docstring)."""

    def reserve(
        self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float, lease_s: float
    ) -> Refusal | None:
        """Hold ``amount`` (>= 0) for ``call_id`` in every ``(key, limit)`` of ``accounts``, for
        ``lease_s`` seconds, atomically. Returns None when held (or already held by this call id),
        else the first :class:`Refusal` (nothing held). Raises LedgerUnavailable."""
        ...

    def settle(self, call_id: str, keys: Sequence[str], amount: float) -> dict[str, float] | None:
        """Drop ``call_id``'s holds and add ``amount`` (>= 0) to every key's spend, once. Returns
        the keys' spent after the charge ({} for a release: amount 0 or no keys), or None when
        ``call_id`` was settled before (nothing changed then). Raises LedgerUnavailable."""
        ...

    def renew(self, call_ids: Sequence[str], lease_s: float) -> int:
        """Extend the live holds of ``call_ids`` to ``lease_s`` seconds from now; returns how many
        holds were extended. Raises LedgerUnavailable."""
        ...

    def balances(self, keys: Sequence[str]) -> dict[str, Balance]:
        """Spent and live holds of each key (0, 0 for an account never used). Raises
        LedgerUnavailable."""
        ...

    def close(self) -> None:
        """Release connections; idempotent."""
        ...


def scope_key(scope: str | Mapping[str, str] | None) -> str:
    """The scope part of an account key: ``*`` for None; a string as given; an attribution
    mapping as ``k=v`` pairs sorted by key and joined by ``,`` (``{"team": "search-infra"}`` ->
    ``team=search-infra``). Raises ValueError for an empty string, a non-string key or value, or
    a key or value holding ``|``, ``,`` or ``=``."""
    if scope is None:
        return GLOBAL_SCOPE
    if isinstance(scope, str):
        if not scope.strip() or "|" in scope:
            raise ValueError(f"scope must be a non-empty string without '|', got {scope!r}")
        return scope
    if not isinstance(scope, Mapping) or not scope:
        raise ValueError(f"scope must be None, a string or a non-empty mapping of strings, got {scope!r}")
    parts = []
    for name, value in sorted(scope.items()):
        for part in (name, value):
            if not isinstance(part, str) or not part or any(c in part for c in "|,="):
                raise ValueError(
                    f"scope {name!r}: keys and values must be non-empty strings without '|', ',' or '=',"
                    f" got {part!r}"
                )
        parts.append(f"{name}={value}")
    return ",".join(parts)


def account_key(kind: str, name: str, scope: str, period: str = "") -> str:
    """The key of one account: ``kind:name[:period]|scope`` (``spend:daily:UTC:2026-12-01|*``,
    ``pool:nightly|team=search-infra``)."""
    head = f"{kind}:{name}:{period}" if period else f"{kind}:{name}"
    return f"{head}|{scope}"


def check_amount(name: str, value: float) -> float:
    """``value`` as a float, or ValueError naming ``name`` unless it is a finite number >= 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)
