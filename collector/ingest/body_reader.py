"""Reading an OTLP request body fairly: bytes charged to the in-flight budget as they arrive,
a cap on the whole body, a total and an idle timeout, and a minimum data rate.

The minimum rate is the slowloris rule (as Apache's ``mod_reqtimeout`` ``MinRate``): a body
has ``idle_timeout_s`` of grace, and then one more second for every ``min_rate_bytes_s`` bytes
received. A client that trickles bytes just often enough to pass the idle timeout is answered
408 and its connection closed, so many slow clients (from many addresses, each within its
share) cannot keep request slots and budget for the whole ``body_timeout_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request

from budgetlens.ingest.budget import Busy, ByteBudget
from budgetlens.otlp import OtlpError

#: Total time to receive a body (s).
DEFAULT_BODY_TIMEOUT_S = 30.0
#: Longest pause between two pieces of a body (s); also the minimum rate's grace.
DEFAULT_IDLE_TIMEOUT_S = 5.0
#: Slowest average a body may arrive at after its grace, bytes per second (16 KiB/s: a 1 MiB
#: body over a 0.13 Mbit/s link); 0 turns the rule off.
DEFAULT_MIN_BODY_RATE = 16 * 1024


@dataclass(frozen=True)
class BodyTimeouts:
    """``body_timeout_s``, ``idle_timeout_s`` (s, > 0) and ``min_rate_bytes_s`` (bytes/s, >= 0;
    0: no minimum rate). Raises ValueError naming the field otherwise."""

    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    min_rate_bytes_s: float = DEFAULT_MIN_BODY_RATE

    def __post_init__(self) -> None:
        if self.body_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError(
                f"body_timeout_s and idle_timeout_s must be > 0 (got {self.body_timeout_s}, "
                f"{self.idle_timeout_s})"
            )
        if self.min_rate_bytes_s < 0:
            raise ValueError(f"min_rate_bytes_s must be >= 0 (got {self.min_rate_bytes_s})")


class BodyReader:
    """Reads request bodies into memory under ``budget`` (``ByteBudget``) and ``timeouts``."""

    def __init__(self, budget: ByteBudget, timeouts: BodyTimeouts):
        self.budget = budget
        self.timeouts = timeouts

    async def read(self, request: Request, held: list[int], client: str, limit: int, hint: str) -> bytearray:
        """The body, refusing 413 past ``limit`` bytes (at once when ``Content-Length`` declares
        more; ``hint`` says what to change), 408 when it is too slow (``chunks``), Busy when the
        client's share or the whole byte budget is spent. Bytes are charged as they arrive
        (``held[0]`` counts them, for the caller to give back), never as declared."""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise OtlpError(413, f"request body is {declared} bytes; the limit is {limit}: {hint}")
        if declared and declared.isdigit() and not self.budget.fits(int(declared), client):
            self.reserve(int(declared), [0], client)  # raises Busy: refused before a byte is read
        body = bytearray()
        async for chunk in self.chunks(request):
            if len(body) + len(chunk) > limit:
                raise OtlpError(413, f"request body exceeds the limit of {limit} bytes: {hint}")
            self.reserve(len(chunk), held, client)
            body += chunk
        return body

    async def chunks(self, request: Request) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive; OtlpError 408 past ``body_timeout_s`` in all,
        ``idle_timeout_s`` between two pieces, or below the minimum rate after the grace."""
        t = self.timeouts
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + t.body_timeout_s
        received = 0
        stream = request.stream().__aiter__()
        while True:
            now = loop.time()
            # the rate rule's deadline: the grace, then one second per min_rate bytes received
            slow_at = (
                started + t.idle_timeout_s + received / t.min_rate_bytes_s if t.min_rate_bytes_s else deadline
            )
            wait = min(t.idle_timeout_s, deadline - now, slow_at - now)
            try:
                async with asyncio.timeout(max(wait, 0)):
                    chunk = await anext(stream)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise self._too_slow(loop.time(), started, deadline, slow_at, received) from None
            if chunk:
                received += len(chunk)
                yield chunk

    def _too_slow(
        self, now: float, started: float, deadline: float, slow_at: float, received: int
    ) -> OtlpError:
        t = self.timeouts
        now += 0.001  # a timer may fire up to the clock's resolution early
        if now >= deadline:
            return OtlpError(408, f"request body not received within {t.body_timeout_s:g} s")
        if now >= slow_at and slow_at < deadline:
            rate = received / max(now - started, 1e-9)
            return OtlpError(
                408,
                f"request body arriving at {rate:.0f} bytes/s, below the minimum of "
                f"{t.min_rate_bytes_s:.0f} bytes/s after {t.idle_timeout_s:g} s (minimum rate)",
            )
        return OtlpError(408, f"request body paused for more than {t.idle_timeout_s:g} s (idle timeout)")

    async def discard(self, request: Request, started: bool) -> bool:
        """Read and drop the body of a request refused for the byte cap (nothing is kept), so
        the connection stays usable for the client's retry. False when it cannot be: the body
        was partly read already, it was too slow (the caller closes the connection then) or the
        client closed its connection."""
        if started:
            return False
        try:
            async for _ in self.chunks(request):
                pass
        except (OtlpError, ClientDisconnect):
            return False
        return True

    def reserve(self, nbytes: int, held: list[int], client: str) -> None:
        """Charge ``nbytes`` to ``client`` (adding them to ``held[0]``); Busy when they do not fit."""
        budget = self.budget
        if not budget.take(nbytes, client):
            mine = budget.by_client.get(client, 0)
            raise Busy(
                f"{budget.used} request bytes in flight, {mine} of them this client's (the cap is "
                f"{budget.limit}, {budget.share} per client)"
            )
        held[0] += nbytes


async def read_capped(request: Request, limit: int) -> bytes:
    """The whole body of a small request (the read and ledger endpoints' JSON), refused once it
    passes ``limit`` bytes: by a declared ``Content-Length`` before a byte is read, else as soon
    as what arrived passes it, so an endless body is never held in memory. Raises OtlpError 413
    naming the limit past it; Starlette's ClientDisconnect when the client closed first."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise OtlpError(413, f"request body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise OtlpError(413, f"request body exceeds the limit of {limit} bytes")
    return bytes(body)
