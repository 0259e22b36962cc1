"""Shared ledgers: spend windows and token pools that many processes and machines draw from.

Chosen by one setting, the ``ledger=`` argument of ``SpendTracker``/``TokenPool``, else
``BUDGETLENS_LEDGER`` (:mod:`budgetlens.config`), else in-process (as without this package):

- unset, ``""`` or ``memory``: in-process (the tracker's own memory, per process);
- ``postgresql://...`` / ``postgres://...``: the fleet ledger (:mod:`.postgres`, extra ``fleet``);
- ``http://host:4318`` / ``https://...``: the collector's ledger (:mod:`.http`; token from
  ``BUDGETLENS_COLLECTOR_TOKEN``);
- ``sqlite:///path/ledger.sqlite3``: a ledger file shared by the processes of one machine.

Leases and offline policy: ``BUDGETLENS_LEDGER_LEASE_S`` (default 30 s) and
``BUDGETLENS_LEDGER_OFFLINE`` (``block``, default, or ``residual:F``); see :mod:`.client`. One
:class:`LedgerClient` per URL per process serves every tracker and pool using it.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from budgetlens.config import (
    ENV_COLLECTOR_TOKEN,
    ENV_LEDGER,
    ENV_LEDGER_LEASE_S,
    ENV_LEDGER_OFFLINE,
    env_value,
    resolve,
)
from budgetlens.guard.ledgers.client import DEFAULT_LEASE_S, LedgerClient, OfflinePolicy, parse_offline
from budgetlens.guard.ledgers.protocol import (
    Balance,
    Ledger,
    LedgerUnavailable,
    Refusal,
    account_key,
    scope_key,
)

__all__ = [
    "Balance",
    "Ledger",
    "LedgerClient",
    "LedgerUnavailable",
    "OfflinePolicy",
    "Refusal",
    "account_key",
    "open_backend",
    "parse_offline",
    "scope_key",
    "shared_client",
]

_IN_PROCESS = ("", "memory")
_clients: dict[str, LedgerClient] = {}
_clients_lock = threading.Lock()


def open_backend(url: str) -> Ledger:
    """The backend for a ledger URL (see the module docstring). Raises ValueError naming
    ``BUDGETLENS_LEDGER`` and the accepted forms for anything else; ImportError naming the
    ``fleet`` extra for PostgreSQL without psycopg."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres"):
        from budgetlens.guard.ledgers.postgres import PostgresLedger

        return PostgresLedger(url)
    if scheme in ("http", "https"):
        from budgetlens.guard.ledgers.http import HttpLedger

        return HttpLedger(url, token=env_value(ENV_COLLECTOR_TOKEN) or None)
    if scheme == "sqlite":
        from budgetlens.guard.ledgers.local import SqliteLedger

        path = url[len("sqlite://") :]
        if not path or path == "/":
            raise ValueError(f"{ENV_LEDGER}: sqlite:///path needs a file path, got {url!r}")
        return SqliteLedger(path)
    raise ValueError(
        f"{ENV_LEDGER} must be empty or 'memory' (in-process), postgresql://..., http(s)://host:port "
        f"(a collector) or sqlite:///path; got {url!r}"
    )


def _lease_s() -> float:
    raw = resolve(None, ENV_LEDGER_LEASE_S, DEFAULT_LEASE_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value < 1e9:
        raise ValueError(f"{ENV_LEDGER_LEASE_S} must be a number of seconds > 0, got {raw!r}")
    return value


def _display(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


def shared_client(ledger: str | Ledger | LedgerClient | None = None) -> LedgerClient | None:
    """The ledger client for ``ledger`` (a URL, a backend or a client), else for
    ``BUDGETLENS_LEDGER``; None for in-process. Clients for a URL are made once per process
    (one renewal thread) and reused. Raises ValueError for a bad URL, lease or offline policy."""
    if isinstance(ledger, LedgerClient):
        return ledger
    if ledger is not None and not isinstance(ledger, str):
        return LedgerClient(
            ledger,
            lease_s=_lease_s(),
            offline=parse_offline(resolve(None, ENV_LEDGER_OFFLINE, "block")),
        )
    url = str(resolve(ledger, ENV_LEDGER, "")).strip()
    if url.lower() in _IN_PROCESS:
        return None
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = LedgerClient(
                open_backend(url),
                lease_s=_lease_s(),
                offline=parse_offline(resolve(None, ENV_LEDGER_OFFLINE, "block")),
                name=f"ledger {_display(url)}",
            )
            _clients[url] = client
        return client
