"""``budgetlens collector``: the OTLP/HTTP collector (uvicorn serving ``budgetlens.ingest.app``)."""

from __future__ import annotations

import argparse

from budgetlens.cli._common import add_db_argument, positive_float, positive_int, tcp_port

DESCRIPTION = """\
Receive OpenTelemetry traces over OTLP/HTTP and store budget telemetry in
DuckDB.

Endpoints: POST /v1/traces (application/x-protobuf or application/json, gzip
allowed), GET /metrics (Prometheus), GET /healthz.

A request is answered 200 only after its spans are durable: appended to the
journal <db>.journal/ and fsynced; they are in DuckDB about 0.25 s later.
Point an agent at it with
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
and, when a token is set,
  OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20<token>"

SIGTERM or Ctrl-C loads everything journaled into DuckDB, then exits; after
kill -9 the next start replays the journal. Binds 127.0.0.1 unless --host says
otherwise. A port in use (or an address that cannot be bound) is reported in
one line, exit status 1, before the journal is opened.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "collector",
        help="run the OTLP/HTTP collector (traces -> DuckDB, /metrics)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_db_argument(parser)
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address (default 127.0.0.1; 0.0.0.0 exposes it to the network)",
    )
    parser.add_argument(
        "--port",
        type=tcp_port,
        default=4318,
        help="TCP port (default 4318, the OTLP/HTTP port; 0 picks a free one)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on /v1/traces "
        "(default: $BUDGETLENS_COLLECTOR_TOKEN, else no authentication)",
    )
    parser.add_argument(
        "--max-body-mib",
        type=positive_float,
        default=16.0,
        help="request body limit in MiB, compressed and inflated (default 16)",
    )
    parser.add_argument(
        "--max-queue-spans",
        type=positive_int,
        default=200_000,
        help="rows acknowledged but not yet in DuckDB before answering 503 (default 200000)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys

    import pyarrow as pa
    import uvicorn

    from budgetlens.config import ENV_COLLECTOR_TOKEN, resolve, resolve_db_path
    from budgetlens.ingest.app import create_app
    from budgetlens.ingest.journal import JournalError

    # the system allocator hands freed Arrow buffers back to the OS: keeps the RSS of a
    # long-running collector near its working set (mimalloc keeps ~40 MB more under load)
    pa.set_memory_pool(pa.system_memory_pool())
    db_path = resolve_db_path(args.db)
    token = resolve(args.token, ENV_COLLECTOR_TOKEN, None)
    try:  # bind first: a port in use must not leave a journal (or a lock) behind
        sock = bind_socket(args.host, args.port)
    except OSError as error:
        reason = error.strerror or str(error)
        print(
            f"budgetlens collector: cannot listen on {args.host} port {args.port}: {reason}", file=sys.stderr
        )
        return 1
    with sock:
        app = create_app(
            db_path,
            token=token,
            max_body_bytes=int(args.max_body_mib * 1024 * 1024),
            max_queue_spans=args.max_queue_spans,
        )
        try:  # open (and lock) the journal and replay it before serving; lifespan start no-op
            app.state.ingest.start()
        except (JournalError, OSError) as error:
            print(f"budgetlens collector: cannot start: {error}", file=sys.stderr)
            return 2
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="on"
        )
        server = _announcing_server(config, db_path=db_path, token_set=bool(token))
        server.run(sockets=[sock])
    return 0 if server.started else 1


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
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _announcing_server(config, *, db_path, token_set):
    """A uvicorn.Server that prints the endpoint once the socket is bound.

    The first line is ``budgetlens collector listening on http://HOST:PORT`` (``demo`` parses it).
    """
    import uvicorn

    from budgetlens.store.location import display

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if not self.started:
                return
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            endpoint = f"http://{host}:{port}"
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

    return Server(config)
