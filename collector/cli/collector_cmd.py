"""``budgetlens collector``: the OTLP/HTTP collector (uvicorn serving ``budgetlens.ingest.app``)."""

from __future__ import annotations

import logging

from budgetlens.cli._common import add_command, non_negative_float, positive_float, positive_int, tcp_port
from budgetlens.cli.collector_checks import connection_limits, lake_unreachable, open_ledger, store_problem
from budgetlens.cli.collector_server import announcing_server, bind_socket, is_loopback

log = logging.getLogger(__name__)

MIB = 1024 * 1024

DESCRIPTION = """\
Receive OpenTelemetry traces over OTLP/HTTP and store budget telemetry in
DuckDB.

Endpoints: POST /v1/traces (application/x-protobuf or application/json, gzip
allowed), GET /metrics (Prometheus), GET /healthz, POST /v1/store/query
(read-only SQL on the store, Arrow IPC out; bearer token: --token, else the
one written to <db>.collector.token, readable only by you).

A request is answered 200 only after its spans are durable: appended to the
journal <db>.journal/ and fsynced; they are in DuckDB about 0.25 s later (on
a DuckLake about 2 s later: staged once a second, folded once a second).
Point an agent at it with
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
and, when a token is set,
  OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20<token>"

On a file store the collector holds the file open while it runs (one
connection, checkpointed by --checkpoint-interval / --checkpoint-wal-mib) and
publishes <db>.collector.json: the dashboard and the CLI then query through
it; other tools use `budgetlens store sql "SELECT ..."` or /v1/store/query.
If another process holds the file at start, the journal keeps acknowledging
(up to --max-journal-mib) and the loader retries; /healthz shows the backlog
and its age. Bodies over 64 KiB are decoded in worker processes.

Connections: a request's line and headers must arrive within --header-timeout
(10 s, pausing at most --idle-timeout); at most --max-connections (1024) are
open, --max-client-connections (256) from one address. Past a cap the oldest
connection waiting for a request is closed; when all are serving, the new one
gets 503. The soft open-file limit is raised to the hard one at start.

Body caps (compressed and inflated; 413 beyond, with a hint to lower the
exporter's batch size): 16 MiB for protobuf (--max-body-mib), 4 MiB for
OTLP/JSON (--max-json-body-mib), whose decoder is slow enough that a larger
body would not be acknowledged within the exporters' 10 s default timeout.

SIGTERM or Ctrl-C loads what is journaled into DuckDB for up to 30 s, then
exits (the rest stays in the journal); after kill -9 the next start replays
the journal, while it already serves and journals new requests. Binds
127.0.0.1 unless --host says otherwise. A port in use (or an address that
cannot be bound) is reported in one line, exit status 1, before the journal
is opened.
"""


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "collector",
        help="run the OTLP/HTTP collector (traces -> DuckDB, /metrics)",
        description=DESCRIPTION,
    )
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
        "(default: $BUDGETLENS_COLLECTOR_TOKEN, else no authentication; an empty or "
        "blank token is refused)",
    )
    parser.add_argument(
        "--read-token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' on the read endpoint /v1/store/* (whole-store "
        "SQL; default: $BUDGETLENS_COLLECTOR_READ_TOKEN, else the --token, else a random one "
        "local readers find next to the store); give senders --token and readers this one",
    )
    parser.add_argument(
        "--read-timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="stop a read query (/v1/store/query) still running after this long and answer 504 "
        "(default 30), so no query holds one of the 4 read slots for longer",
    )
    parser.add_argument(
        "--max-body-mib",
        type=positive_float,
        default=16.0,
        help="request body limit in MiB, compressed and inflated (default 16; OTLP/JSON "
        "bodies have the lower --max-json-body-mib); larger bodies get 413",
    )
    parser.add_argument(
        "--max-json-body-mib",
        type=positive_float,
        default=None,
        help="OTLP/JSON request body limit in MiB, compressed and inflated (default 4, or "
        "--max-body-mib when lower; at most --max-body-mib): a larger JSON body is not "
        "acknowledged within the exporters' 10 s timeout",
    )
    parser.add_argument(
        "--max-queue-spans",
        type=positive_int,
        default=50_000,
        help="rows waiting for DuckDB kept in memory; older ones are read back from the "
        "journal (default 50000)",
    )
    parser.add_argument(
        "--max-journal-mib",
        type=positive_float,
        default=1024.0,
        help="journal bytes acknowledged but not yet in DuckDB before answering 503, in MiB "
        "(default 1024): how much a store held by other processes can fall behind",
    )
    parser.add_argument(
        "--max-inflight-mib",
        type=positive_float,
        default=32.0,
        help="request body bytes held at once (being received or decoded) before answering "
        "503, in MiB (default 32, at least --max-body-mib)",
    )
    parser.add_argument(
        "--body-timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="time a client has to send a whole request body before 408 (default 30)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="longest pause between two pieces of a request's headers or body before 408 (default 5)",
    )
    parser.add_argument(
        "--min-body-rate-kib",
        type=non_negative_float,
        default=16.0,
        metavar="KIB_PER_S",
        help="slowest average a request body may arrive at once --idle-timeout has passed, in "
        "KiB/s (default 16; 0: no minimum): a client trickling bytes gets 408 and its "
        "connection closed, as with Apache's mod_reqtimeout MinRate",
    )
    parser.add_argument(
        "--answer-deadline",
        type=positive_float,
        default=7.0,
        metavar="SECONDS",
        help="a body over 4 MiB that would be answered later than this after it arrived, behind "
        "the large bodies queued ahead (estimated at the measured decode rate), gets 503 + "
        "Retry-After at once (default 7: within the exporters' 10 s timeout)",
    )
    parser.add_argument(
        "--header-timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="time a client has to send a request's line and headers before its connection "
        "is closed (408 when part of them arrived; default 10); pauses between their pieces "
        "are capped by --idle-timeout",
    )
    parser.add_argument(
        "--max-connections",
        type=positive_int,
        default=1024,
        metavar="N",
        help="open connections at once (default 1024, lowered to the open-file limit minus "
        "256); past it the oldest connection waiting for a request is closed, or, when every "
        "one is serving a request, the new one gets 503",
    )
    parser.add_argument(
        "--max-client-connections",
        type=positive_int,
        default=256,
        metavar="N",
        help="open connections from one client address (default 256, at most "
        "--max-connections); past it that client's oldest waiting connection is closed, or "
        "the new one gets 503",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="checkpoint the store file this often while its WAL holds anything (default 60); "
        "the collector holds the file open while it runs",
    )
    parser.add_argument(
        "--checkpoint-wal-mib",
        type=positive_float,
        default=16.0,
        help="checkpoint as soon as the store's WAL passes this size, in MiB (default 16)",
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve on a non-loopback --host without a token (refused otherwise: anyone who "
        "can reach the port could write spans)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys

    import pyarrow as pa
    import uvicorn

    from budgetlens.config import ENV_COLLECTOR_READ_TOKEN, is_lake_location, resolve_db_path
    from budgetlens.ingest.app import DEFAULT_MAX_JSON_BODY_BYTES, create_app
    from budgetlens.ingest.connections import ConnectionGuard, guarded_protocol
    from budgetlens.ingest.journal import JournalError
    from budgetlens.store.readers import unpublish

    # the system allocator hands freed Arrow buffers back to the OS: keeps the RSS of a
    # long-running collector near its working set (mimalloc keeps ~40 MB more under load)
    pa.set_memory_pool(pa.system_memory_pool())
    db_path = resolve_db_path(args.db)
    token, problem = _token(args.token)
    read_token, read_problem = _token(args.read_token, "--read-token", ENV_COLLECTOR_READ_TOKEN)
    if problem or read_problem:
        print(f"budgetlens collector: {problem or read_problem}", file=sys.stderr)
        return 2
    if token is not None and read_token in (None, token) and not is_loopback(args.host):
        print(
            f"budgetlens collector: warning: the ingest token also reads the whole store "
            f"(/v1/store/query) on {args.host}: set --read-token (or ${ENV_COLLECTOR_READ_TOKEN}) "
            "to a different token so that senders cannot read it",
            file=sys.stderr,
        )
    if token is None and not is_loopback(args.host):
        if not args.allow_unauthenticated:
            print(
                f"budgetlens collector: --host {args.host} is reachable from other machines and no "
                "token is set: set --token (or $BUDGETLENS_COLLECTOR_TOKEN), or pass "
                "--allow-unauthenticated to serve without one",
                file=sys.stderr,
            )
            return 2
        print(
            f"budgetlens collector: warning: serving {args.host} without a token "
            "(--allow-unauthenticated): anyone who can reach the port can write spans",
            file=sys.stderr,
        )
    max_body_bytes = int(args.max_body_mib * MIB)
    max_inflight_bytes = int(args.max_inflight_mib * MIB)
    json_mib = args.max_json_body_mib
    max_json_body_bytes = min(DEFAULT_MAX_JSON_BODY_BYTES, max_body_bytes)
    if json_mib is not None:
        max_json_body_bytes = int(json_mib * MIB)
    if max_json_body_bytes > max_body_bytes:
        print(
            f"budgetlens collector: --max-json-body-mib ({json_mib:g}) must be at "
            f"most --max-body-mib ({args.max_body_mib:g})",
            file=sys.stderr,
        )
        return 2
    if max_inflight_bytes < max_body_bytes:
        print(
            f"budgetlens collector: --max-inflight-mib ({args.max_inflight_mib:g}) must be at "
            f"least --max-body-mib ({args.max_body_mib:g})",
            file=sys.stderr,
        )
        return 2
    limits, problem = connection_limits(args)
    if problem:
        print(f"budgetlens collector: {problem}", file=sys.stderr)
        return 2
    guard = ConnectionGuard(limits)
    try:  # bind first: a port in use must not leave a journal (or a lock) behind
        sock = bind_socket(args.host, args.port)
    except OSError as error:
        reason = error.strerror or str(error)
        print(
            f"budgetlens collector: cannot listen on {args.host} port {args.port}: {reason}", file=sys.stderr
        )
        return 1
    with sock:
        problem = store_problem(db_path)
        if problem and is_lake_location(db_path) and lake_unreachable(problem):
            # the lake's catalog server is down (an outage, not a wrong store): listen and
            # journal, /healthz answers 503 with the reason, the rows load when it is back
            print(
                f"budgetlens collector: warning: the lake is unreachable, journaling: {problem}",
                file=sys.stderr,
            )
            problem = None
        if problem:  # a text file, a directory, a lake that cannot be attached: refuse, one line
            print(f"budgetlens collector: cannot start: {problem}", file=sys.stderr)
            return 2
        ledger = open_ledger(db_path)
        app = create_app(
            db_path,
            token=token,
            read_token=read_token,
            read_timeout_s=args.read_timeout,
            max_body_bytes=max_body_bytes,
            max_json_body_bytes=max_json_body_bytes,
            max_queue_spans=args.max_queue_spans,
            max_journal_bytes=int(args.max_journal_mib * MIB),
            max_inflight_bytes=max_inflight_bytes,
            body_timeout_s=args.body_timeout,
            ledger=ledger,
            idle_timeout_s=args.idle_timeout,
            min_body_rate_bytes_s=args.min_body_rate_kib * 1024,
            answer_deadline_s=args.answer_deadline,
            checkpoint_interval_s=args.checkpoint_interval,
            checkpoint_wal_bytes=int(args.checkpoint_wal_mib * MIB),
            connections=guard,
        )
        try:  # open (and lock) the journal before serving; its batches load while it serves
            app.state.ingest.start(replay_in_background=True)
        except (JournalError, OSError) as error:
            print(f"budgetlens collector: cannot start: {error}", file=sys.stderr)
            return 2
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            http=guarded_protocol(guard),
        )
        server = announcing_server(
            config, db_path=db_path, token_set=bool(token), read_token=app.state.read_token
        )
        try:
            server.run(sockets=[sock])
        finally:
            if not is_lake_location(db_path):
                unpublish(db_path)
    return 0 if server.started else 1


def _token(
    argument: str | None, flag: str = "--token", env: str | None = None
) -> tuple[str | None, str | None]:
    """(token, problem): the bearer token from ``flag`` (``argument``) or the variable ``env``
    (default ``$BUDGETLENS_COLLECTOR_TOKEN``; the flag wins), None when neither is set. A set but
    empty or blank token is a problem, never "no authentication": unset the variable (or omit
    the flag) to run without a token."""
    from budgetlens.config import ENV_COLLECTOR_TOKEN, env_value

    env = env or ENV_COLLECTOR_TOKEN
    configured = env_value(env)
    if argument is not None:
        source, token = flag, argument
    elif configured is not None:
        source, token = env, configured
    else:
        return None, None
    if not token.strip():
        return None, (f"{source} is set but empty; set a token, or unset it to run without authentication")
    if token != token.strip():
        return None, (
            f"{source} starts or ends with whitespace, which no Authorization header can carry; remove it"
        )
    return token, None
