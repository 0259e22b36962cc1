"""The collector's listening socket and its uvicorn server (``budgetlens collector``): binding,
loopback checks, and the server that announces its endpoint and publishes the read endpoint
next to a file store."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _local_url(host: str, port: int) -> str:
    """The URL a reader on this machine uses for a server bound to ``host``:``port``."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_loopback(host: str) -> bool:
    """True when ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1); a name
    or any other address (0.0.0.0, ::, a LAN address) is reachable from other machines."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_socket(host: str, port: int):
    """A TCP socket bound to ``host``:``port`` (0 = a free port), not yet listening.

    IPv6 when ``host`` is an IPv6 address; SO_REUSEADDR as uvicorn sets it. Raises OSError
    (``socket.gaierror`` for a host that does not resolve, EADDRINUSE for a port in use).
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: a response's headers and body are separate writes,
        # and without it the body waits for the client's delayed ACK (about 40 ms a request)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def announcing_server(config, *, db_path, token_set, read_token):
    """A uvicorn.Server that prints the endpoint once the socket is bound, and on a file store
    publishes its read endpoint next to the store (``budgetlens.store.readers``).

    The first line is ``budgetlens collector listening on http://HOST:PORT`` (``demo`` parses it).
    """
    import asyncio
    import contextlib
    import signal

    import uvicorn

    from budgetlens.config import is_lake_location
    from budgetlens.ingest.connections import limit_accept_errors
    from budgetlens.store.location import display
    from budgetlens.store.readers import publish

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            limit_accept_errors(asyncio.get_running_loop())
            await super().startup(sockets=sockets)
            if not self.started:
                return
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            endpoint = f"http://{host}:{port}"
            if not is_lake_location(db_path):
                try:
                    publish(db_path, _local_url(host, port), read_token)
                except OSError as error:  # readers then fall back to the file (locked: they wait)
                    log.warning("cannot publish the read endpoint next to %s: %s", db_path, error)
            print(f"budgetlens collector listening on {endpoint}", flush=True)
            print(
                f"  OTLP/HTTP traces: {endpoint}/v1/traces   metrics: {endpoint}/metrics"
                f"   health: {endpoint}/healthz",
                flush=True,
            )
            print(
                f"  store: {display(db_path)}   auth: {'bearer token' if token_set else 'none'}", flush=True
            )
            print(f"  export OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}", flush=True)

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                # the drain finished: exit 0 instead of re-raising SIGTERM (status 143) or
                # SIGINT (a KeyboardInterrupt traceback, status 130)
                stops = (signal.SIGTERM, signal.SIGINT)
                self._captured_signals[:] = [sig for sig in self._captured_signals if sig not in stops]

    return Server(config)
