"""Large bodies answered within the exporters' timeout, or refused at once (issue 23).

Bodies over the decode pool's ``large_bytes`` (4 MiB; a gzip body counts inflated,
``work_bytes``) are decoded, mapped and journaled one at a
time: a worker needs about 15× a body's size while it decodes it, so two at once would double
the collector's peak. A large body that arrives while others wait for that slot waits for all of
them; an OTel exporter gives up after its 10 s timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``) and sends
the same body again, so the work done for it is wasted and the queue only grows.

``LargeBodyQueue`` holds the rule. A large body's answer is estimated to come after

    (seconds since its request arrived) + (bytes queued ahead) / rate + (its bytes) / rate

where the rate is measured: bytes of large bodies decoded, mapped and journaled per second of
their own time in the slot (an exponential average of the last few, starting from
``DEFAULT_RATE_BYTES_S``), and the body in the slot counts only its estimated remainder. When
that estimate passes ``deadline_s`` and something is queued ahead, the body is refused with
503 + ``Retry-After`` (the seconds until the queue ahead is done, at least 1): before a byte of
it is read when ``Content-Length`` declares it, else as soon as it is read (its bytes dropped at
once). A body with nothing ahead is always admitted, however long it takes alone, so a client
that retries after ``Retry-After`` is stored in the end; a body too large to be answered in time
even alone is the static cap's business (``--max-body-mib``: 413 with a hint), not a guess from a
rate measured on a busy moment (a 413 is final: an exporter drops the batch).

Used from the event loop only (no lock). ``clock``: seconds, monotonic (the request's start
time given to ``check`` and ``slot`` is on the same clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable

#: Latest time a large body's answer may be estimated to come, s after its request arrived: the
#: exporters' default timeout of 10 s less room for the estimate's error and the network.
DEFAULT_ANSWER_DEADLINE_S = 7.0
#: The decode rate assumed until one large body has been measured (bytes/s, on the low side: a
#: 16 MiB protobuf body took 4-5 s on a 2-core machine at rest, about 3.5 MB/s).
DEFAULT_RATE_BYTES_S = 2.0 * 1024 * 1024
#: Weight of the newest measurement in the rate's exponential average.
RATE_WEIGHT = 0.5


#: The shortest gzip member (header and trailer, RFC 1952), bytes.
_GZIP_MIN_BYTES = 18


def work_bytes(body: bytes | bytearray, content_encoding: str | None) -> int:
    """The bytes decoding ``body`` works through (what its time and memory follow): its length,
    or for a gzip body the larger of that and the inflated size its trailer states (ISIZE, RFC
    1952: the last member's, mod 2**32). A trailer that lies only misroutes its own body:
    inflating stays capped at the body limit."""
    size = len(body)
    if (content_encoding or "").strip().lower() == "gzip" and size >= _GZIP_MIN_BYTES:
        size = max(size, int.from_bytes(body[-4:], "little"))
    return size


class TooLate(Exception):
    """A large body would be answered after the deadline; ``retry_after_s``: when to send it
    again (s, >= 1: when the queue ahead is estimated to be done)."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LargeBodyQueue:
    """Bodies over ``large_bytes`` queued for the one large-body slot, and the deadline rule
    (see the module docstring). Raises ValueError for ``deadline_s`` <= 0 or a rate <= 0."""

    def __init__(
        self,
        large_bytes: int,
        deadline_s: float = DEFAULT_ANSWER_DEADLINE_S,
        rate_bytes_s: float = DEFAULT_RATE_BYTES_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if deadline_s <= 0:
            raise ValueError(f"the answer deadline must be > 0 s (got {deadline_s})")
        if rate_bytes_s <= 0:
            raise ValueError(f"the decode rate must be > 0 bytes/s (got {rate_bytes_s})")
        self.large_bytes = large_bytes
        self.deadline_s = deadline_s
        self.rate_bytes_s = rate_bytes_s
        self.clock = clock
        self.queued = 0  # bytes of admitted large bodies not yet answered (the one in the slot too)
        self.serving = 0  # bytes of the body in the slot (0: none)
        self.serving_since = 0.0
        self.refused = 0  # bodies refused by the rule (since start)
        self._slot: asyncio.Lock | None = None  # created on the serving event loop

    def is_large(self, nbytes: int) -> bool:
        """Whether a body of ``nbytes`` goes through the large-body slot."""
        return nbytes > self.large_bytes

    def ahead_s(self) -> float:
        """Estimated seconds until every admitted large body is answered (0 when none is)."""
        left = 0.0
        if self.serving:
            left = max(self.serving / self.rate_bytes_s - (self.clock() - self.serving_since), 0.0)
        return left + (self.queued - self.serving) / self.rate_bytes_s

    def check(self, nbytes: int, started: float) -> None:
        """Raise TooLate when a large body of ``nbytes`` whose request arrived at ``started``
        would be answered past the deadline behind the bodies queued now; admit (return) when
        nothing is queued or the estimate is within it. Nothing is reserved."""
        if not self.queued or not self.is_large(nbytes):
            return
        ahead = self.ahead_s()
        answer_s = (self.clock() - started) + ahead + nbytes / self.rate_bytes_s
        if answer_s <= self.deadline_s:
            return
        self.refused += 1
        retry = max(1, math.ceil(ahead))
        raise TooLate(
            f"{self.queued} bytes of large bodies queued ahead; this one would be answered in about "
            f"{answer_s:.1f} s, past the answer deadline of {self.deadline_s:g} s (decoding at "
            f"{self.rate_bytes_s / 1e6:.1f} MB/s); retry in {retry} s",
            retry,
        )

    @contextlib.asynccontextmanager
    async def slot(self, nbytes: int, started: float) -> AsyncIterator[None]:
        """Admit a body of ``nbytes`` (``check``; raises TooLate) and hold the large-body slot
        while the caller decodes and journals it; a body that is not large passes straight
        through. The time it held the slot updates the measured rate when the caller's block
        ends without an exception."""
        if not self.is_large(nbytes):
            yield
            return
        self.check(nbytes, started)
        if self._slot is None:
            self._slot = asyncio.Lock()
        self.queued += nbytes
        try:
            async with self._slot:
                self.serving, self.serving_since = nbytes, self.clock()
                try:
                    yield
                    # a refused body (400, 413, 503) says nothing of the decode rate
                    self.measured(nbytes, self.clock() - self.serving_since)
                finally:
                    self.serving = 0
        finally:
            self.queued -= nbytes

    def measured(self, nbytes: int, seconds: float) -> None:
        """Fold one large body's time in the slot (``nbytes`` in ``seconds``) into the rate."""
        if seconds <= 0:
            return
        self.rate_bytes_s += RATE_WEIGHT * (nbytes / seconds - self.rate_bytes_s)
