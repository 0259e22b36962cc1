"""The collector's byte budget: request body bytes held at once, in all and per client
(issue 23's fair intake)."""

from __future__ import annotations


class Busy(Exception):
    """More request body bytes are in flight than the collector's cap allows."""


class ByteBudget:
    """Request body bytes held at once (received, or waiting for their decode), capped at
    ``limit`` in all and at ``share`` per client (its address), so one client's big or stalled
    bodies leave ``limit - share`` bytes to the others.

    Bytes are charged as they arrive, never as a ``Content-Length`` declares. Used from the
    event loop only (no lock). ``take`` refuses once either cap would be passed, except that a
    client holding nothing may always take up to ``share`` while the total stays within
    ``limit`` (so one body up to the body limit always fits). Raises ValueError for
    ``share`` < 1 or ``share`` > ``limit``.
    """

    def __init__(self, limit: int, share: int | None = None):
        share = limit if share is None else share
        if not 1 <= share <= limit:
            raise ValueError(f"the per-client share ({share}) must be from 1 to the limit ({limit})")
        self.limit = limit
        self.share = share
        self.used = 0
        self.by_client: dict[str, int] = {}

    def take(self, nbytes: int, client: str = "") -> bool:
        """Reserve ``nbytes`` for ``client``; False (nothing reserved) when that would pass the
        client's share or the total limit."""
        mine = self.by_client.get(client, 0)
        if mine + nbytes > self.share:
            return False
        if self.used and self.used + nbytes > self.limit:
            return False
        self.used += nbytes
        self.by_client[client] = mine + nbytes
        return True

    def fits(self, nbytes: int, client: str = "") -> bool:
        """Whether ``take(nbytes, client)`` would succeed now (nothing is reserved)."""
        mine = self.by_client.get(client, 0)
        return mine + nbytes <= self.share and not (self.used and self.used + nbytes > self.limit)

    def give(self, nbytes: int, client: str = "") -> None:
        """Release ``nbytes`` reserved earlier by ``client``."""
        if not nbytes:
            return
        self.used -= nbytes
        left = self.by_client.get(client, 0) - nbytes
        if left > 0:
            self.by_client[client] = left
        else:
            self.by_client.pop(client, None)
