"""The collector's connections (issue 23): a header-read timeout, caps on open connections in
all and per client address, a rate-limited accept-error log, and the open-file limit.

``ConnectionGuard`` holds the counts; ``guarded_protocol(guard)`` is the uvicorn HTTP protocol
class (uvicorn's h11 protocol, extended) that asks it before serving a connection. A
connection is *waiting* while no request of it is being served: from accept until its request
head is read, and between two requests (keep-alive). Waiting connections are the ones the caps
close first, oldest first, so that a flood of stalled connections makes room for new ones
instead of locking them out; only when every connection is serving a request is a new one
refused, at once, with 503 + ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

#: Default time a client has to send a request head (request line and headers), s.
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Default longest pause between two pieces of a request head, s (the body's idle timeout).
DEFAULT_HEADER_IDLE_TIMEOUT_S = 5.0
#: Default cap on open connections.
DEFAULT_MAX_CONNECTIONS = 1024
#: Default cap on one client address's open connections.
DEFAULT_MAX_CLIENT_CONNECTIONS = 256
#: File descriptors kept for the collector's own files (journal, store, ledger, decode
#: workers' pipes) beyond the connection cap.
RESERVED_FDS = 256
#: One log line per this many seconds for a repeated connection problem, s.
LOG_INTERVAL_S = 10.0
#: The message asyncio reports when ``accept()`` fails for EMFILE, ENFILE, ENOBUFS or ENOMEM.
ACCEPT_ERROR = "socket.accept() out of system resource"


@dataclass(frozen=True)
class ConnectionLimits:
    """``header_timeout_s``: time to send a request head; ``header_idle_timeout_s``: longest
    pause between two of its pieces (s; both > 0). ``max_connections``: open connections in
    all, ``max_client_connections``: per client address (both >= 1, the second at most the
    first). Raises ValueError otherwise."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    header_idle_timeout_s: float = DEFAULT_HEADER_IDLE_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_client_connections: int = DEFAULT_MAX_CLIENT_CONNECTIONS

    def __post_init__(self):
        if self.header_timeout_s <= 0 or self.header_idle_timeout_s <= 0:
            raise ValueError(
                f"header timeouts must be > 0 (got {self.header_timeout_s}, {self.header_idle_timeout_s})"
            )
        if not 1 <= self.max_client_connections <= self.max_connections:
            raise ValueError(
                f"max_client_connections ({self.max_client_connections}) must be from 1 to "
                f"max_connections ({self.max_connections})"
            )


class RateLimitedLog:
    """A warning logged at most once per ``interval_s`` per key: the first at once, the
    repeats counted and reported in one line when the interval ends (scheduled on the running
    event loop; without one, with the next repeat). ``clock``: seconds, monotonic."""

    def __init__(self, logger: logging.Logger, interval_s: float = LOG_INTERVAL_S, clock=time.monotonic):
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._unlogged: dict[str, tuple[int, str]] = {}  # key -> (repeats, latest message)
        self._scheduled: set[str] = set()

    def warning(self, key: str, message: str) -> None:
        now = self.clock()
        last = self._last.get(key)
        if last is None or now - last >= self.interval_s:
            self._emit(key, message, now, occurrence=True)
            return
        repeats, _ = self._unlogged.get(key, (0, message))
        self._unlogged[key] = (repeats + 1, message)
        if key not in self._scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._scheduled.add(key)
            loop.call_later(last + self.interval_s - now, self._flush, key)

    def _flush(self, key: str) -> None:
        self._scheduled.discard(key)
        if key in self._unlogged:
            self._emit(key, self._unlogged[key][1], self.clock(), occurrence=False)

    def _emit(self, key: str, message: str, now: float, occurrence: bool) -> None:
        """Log ``message``; with the count of the repeats since the last line (plus this one
        when ``occurrence``: a new failure rather than the interval's end)."""
        repeats, _ = self._unlogged.pop(key, (0, message))
        last = self._last.get(key)
        self._last[key] = now
        if repeats and last is not None:
            count = repeats + occurrence
            self.logger.warning("%s (%d times in the last %.0f s)", message, count, now - last)
        else:
            self.logger.warning("%s", message)


class ConnectionGuard:
    """Open connections, in all and per client address, and the waiting ones oldest first.

    Used from the event loop only (no lock). ``refused`` / ``evicted`` / ``timed_out`` count
    connections answered 503 at accept, closed to make room, and closed by the header timeout.
    """

    def __init__(self, limits: ConnectionLimits | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or ConnectionLimits()
        self.clock = clock
        self.open = 0  # connections counted in (not refused, not yet closed)
        self.by_client: dict[str, int] = {}
        self.waiting: OrderedDict[_GuardedConnection, None] = OrderedDict()
        self.waiting_by_client: dict[str, OrderedDict[_GuardedConnection, None]] = {}
        self.refused = 0
        self.evicted = 0
        self.timed_out = 0
        self.log = RateLimitedLog(log)

    def admit(self, connection: _GuardedConnection) -> bool:
        """Count ``connection`` in (True), closing the oldest waiting connection of its client
        (or of all) when a cap is reached; False, counting nothing, when no waiting one is left
        to close."""
        client, limits = connection.client_host, self.limits
        full = self.by_client.get(client, 0) >= limits.max_client_connections
        if full and not self._evict(self.waiting_by_client.get(client), f"client {client}'s cap"):
            return self._refuse(f"{client} holds {self.by_client[client]} connections (the cap)")
        if self.open >= limits.max_connections and not self._evict(self.waiting, "the connection cap"):
            return self._refuse(f"{self.open} connections open (the cap)")
        self.by_client[client] = self.by_client.get(client, 0) + 1
        self.open += 1
        return True

    def wait(self, connection: _GuardedConnection) -> None:
        """``connection`` serves no request now: it may be closed to make room (newest last)."""
        self.waiting[connection] = None
        self.waiting_by_client.setdefault(connection.client_host, OrderedDict())[connection] = None

    def serve(self, connection: _GuardedConnection) -> None:
        """``connection``'s request head was read: it is not closed to make room."""
        self.waiting.pop(connection, None)
        mine = self.waiting_by_client.get(connection.client_host)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self.waiting_by_client[connection.client_host]

    def forget(self, connection: _GuardedConnection) -> None:
        """``connection`` is closed: count it out."""
        self.serve(connection)
        client = connection.client_host
        self.open -= 1
        left = self.by_client.get(client, 0) - 1
        if left > 0:
            self.by_client[client] = left
        else:
            self.by_client.pop(client, None)

    def _evict(self, candidates: OrderedDict[_GuardedConnection, None] | None, cap: str) -> bool:
        if not candidates:
            return False
        oldest = next(iter(candidates))
        self.evicted += 1
        self.log.warning(
            "evict", f"closed a waiting connection from {oldest.client_host} to make room ({cap})"
        )
        oldest.drop("closed to make room for a new connection")
        return True

    def _refuse(self, reason: str) -> bool:
        self.refused += 1
        self.log.warning("refuse", f"refused a connection with 503: {reason}, none waiting")
        return False


def _raw_response(status: str, message: str, headers: str = "") -> bytes:
    body = message.encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n{headers}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class _GuardedConnection(H11Protocol):
    """uvicorn's h11 protocol, counted in ``guard``: refused with 503 at accept when
    ``guard.admit`` says so, timed out while its request head does not arrive."""

    guard: ConnectionGuard

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client_host = ""
        self._counted = False
        self._head_started = False  # a byte of the current request head arrived
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        peer = transport.get_extra_info("peername")
        self.client_host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.guard.admit(self):
            transport.write(
                _raw_response(
                    "503 Service Unavailable", "collector busy: too many connections", "retry-after: 1\r\n"
                )
            )
            transport.close()
            return
        self._counted = True
        super().connection_made(transport)
        self.guard.wait(self)
        self._start_head(self.guard.limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return
        if not self._serving() and not self._head_started:
            self._head_started = True
            if self._timer is None:  # after a keep-alive pause: the head's time starts now
                self._start_head(self.guard.limits.header_timeout_s)
        if self._timer is not None:
            self._arm()
        super().data_received(data)
        if self._counted and self._serving():
            self._stop_timer()
            self.guard.serve(self)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._counted and not self._serving() and not self.transport.is_closing():
            self._head_started = False  # keep-alive: uvicorn's timeout closes it when idle
            self.guard.wait(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._stop_timer()
        self._counted = False
        self.guard.forget(self)
        super().connection_lost(exc)

    def drop(self, reason: str) -> None:
        """Close now, counted out at once; 408 first when part of a request head arrived."""
        self._stop_timer()
        if self._head_started:
            self.transport.write(_raw_response("408 Request Timeout", reason))
        if self._counted:
            self._counted = False
            self.guard.forget(self)
            super().connection_lost(None)  # uvicorn's bookkeeping; closes the transport
        self.transport.close()

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _start_head(self, total_s: float) -> None:
        self._deadline = self.loop.time() + total_s
        self._arm()

    def _arm(self) -> None:
        self._stop_timer()
        left = self._deadline - self.loop.time()
        wait = min(self.guard.limits.header_idle_timeout_s, max(left, 0.0))
        self._timer = self.loop.call_later(wait, self._timed_out)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if not self._counted or self._serving():
            return
        limits = self.guard.limits
        if self._deadline - self.loop.time() <= 0:
            reason = f"request headers not received within {limits.header_timeout_s:g} s"
        else:
            reason = f"request headers paused for more than {limits.header_idle_timeout_s:g} s"
        self.guard.timed_out += 1
        self.guard.log.warning("timeout", f"closed a connection from {self.client_host}: {reason}")
        self.drop(reason)


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """The uvicorn HTTP protocol class (``uvicorn.Config(http=...)``) counted in ``guard``."""
    return type("GuardedH11Protocol", (_GuardedConnection,), {"guard": guard})


def limit_accept_errors(loop: asyncio.AbstractEventLoop, interval_s: float = LOG_INTERVAL_S) -> None:
    """Log ``loop``'s failed ``accept()`` calls (out of file descriptors or memory) once per
    ``interval_s`` with a count, instead of once per failure; other errors go to the default
    handler. asyncio itself stops accepting for 1 s after such a failure (no spinning)."""
    limiter = RateLimitedLog(log, interval_s)

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        if context.get("message") != ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        error = context.get("exception")
        limiter.warning("accept", f"{ACCEPT_ERROR}: {error}; new connections wait (accept retried in 1 s)")

    loop.set_exception_handler(handler)


def raise_open_file_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go's runtime and systemd's advice
    for servers do: the soft default of 1024 exists for select(), which asyncio does not use).
    Returns (soft, hard) after, or None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard
