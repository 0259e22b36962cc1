"""The collector's ledger over HTTP (``BUDGETLENS_LEDGER=http://127.0.0.1:4318``).

The collector serves its ledger (:mod:`budgetlens.ingest.ledger_api`) beside ``/v1/traces``,
with the same bearer token (``BUDGETLENS_COLLECTOR_TOKEN``). Requests are JSON POSTs to
``/v1/ledger/{reserve,settle,renew,balances}``; each thread keeps one persistent connection. A
connection error, a timeout or a 5xx answer is retried once on a new connection (safe: every
operation is idempotent by call id), then raised as LedgerUnavailable; a 401 (wrong token) is
LedgerUnavailable too, logged once as an error; another 4xx is a bug and raises ValueError.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from budgetlens.guard.ledgers.protocol import Balance, LedgerUnavailable, Refusal

log = logging.getLogger(__name__)

__all__ = ["HttpLedger", "LEDGER_PATH"]

#: Path prefix of the ledger routes on the collector.
LEDGER_PATH = "/v1/ledger"


class HttpLedger:
    """A :class:`budgetlens.guard.ledgers.protocol.Ledger` served by a collector at ``url``
    (``http://host:port``, optional path prefix). ``token``: the collector's bearer token (None:
    no auth). ``timeout_s``: per request. Raises ValueError for a URL that is not http(s)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"ledger URL must be http://host:port or https://..., got {url!r}")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._prefix = parts.path.rstrip("/") + LEDGER_PATH
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout_s
        self._local = threading.local()
        self._auth_logged = False
        self._pid = os.getpid()

    def _connection(self) -> http.client.HTTPConnection:
        if self._pid != os.getpid():  # a forked child opens its own connections
            self._pid, self._local = os.getpid(), threading.local()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = kind(self._host, self._port, timeout=self._timeout)
            conn.connect()
            # http.client sends the headers and the body in two writes: without TCP_NODELAY the
            # body waits for the server's delayed ACK (about 40 ms a request)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._local.conn = conn
        return conn

    def _post(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body).encode()
        for attempt in (1, 2):
            conn = None
            try:
                conn = self._connection()
                conn.request("POST", f"{self._prefix}/{op}", payload, self._headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise LedgerUnavailable(f"collector ledger unreachable: {exc!r}") from exc
                continue
            if response.status >= 500 and attempt == 1:
                continue
            if response.status >= 500:
                raise LedgerUnavailable(f"collector ledger answered {response.status}: {data[:200]!r}")
            if response.status == 401:
                if not self._auth_logged:
                    log.error("collector ledger refused the bearer token (BUDGETLENS_COLLECTOR_TOKEN)")
                    self._auth_logged = True
                raise LedgerUnavailable("collector ledger refused the bearer token (401)")
            if response.status != 200:
                raise ValueError(f"collector ledger refused {op}: {response.status} {data[:300]!r}")
            return json.loads(data)
        raise AssertionError("unreachable")  # pragma: no cover

    def reserve(
        self, call_id: str, accounts: Sequence[tuple[str, float]], amount: float, lease_s: float
    ) -> Refusal | None:
        body = {
            "call_id": call_id,
            "accounts": [[key, limit] for key, limit in accounts],
            "amount": amount,
            "lease_s": lease_s,
        }
        refusal = self._post("reserve", body)["refusal"]
        return None if refusal is None else Refusal(**refusal)

    def settle(self, call_id: str, keys: Sequence[str], amount: float) -> dict[str, float] | None:
        return self._post("settle", {"call_id": call_id, "keys": list(keys), "amount": amount})["spent"]

    def renew(self, call_ids: Sequence[str], lease_s: float) -> int:
        return int(self._post("renew", {"call_ids": list(call_ids), "lease_s": lease_s})["renewed"])

    def balances(self, keys: Sequence[str]) -> dict[str, Balance]:
        found = self._post("balances", {"keys": list(keys)})["balances"]
        return {key: Balance(value["spent"], value["held"]) for key, value in found.items()}

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
