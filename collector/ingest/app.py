"""The collector's HTTP app (Starlette, served by uvicorn): OTLP/HTTP traces, metrics, health.

Routes:

- ``POST /v1/traces``: OTLP/HTTP, ``application/x-protobuf`` or ``application/json``, optionally
  ``Content-Encoding: gzip``. Answers 200 with an ``ExportTraceServiceResponse`` (in the request's
  encoding; ``partial_success`` when some spans were invalid) only after the valid spans are
  durable: appended to the collector's journal and fsynced (``budgetlens.ingest.queue``; they are
  queryable in DuckDB about 0.25 s later). Every body over 64 KiB is decoded and mapped in a
  worker process (``budgetlens.ingest.decode_pool``; a protobuf body that finds the workers idle
  in both, by trace), so the event loop keeps answering. 400 malformed
  body, 401 missing/wrong bearer token (when one is configured; the scheme ``Bearer`` is
  case-insensitive), 408 body not received within ``body_timeout_s`` (or paused past
  ``idle_timeout_s``, or slower than ``min_body_rate_bytes_s``), 413 body over
  ``max_body_bytes`` (compressed or inflated), 415 wrong content type or encoding, 503 +
  ``Retry-After`` when the journal backlog is at its disk budget, more than
  ``max_inflight_bytes`` of request bodies are held, a body over 4 MiB would be answered past
  ``answer_deadline_s`` behind the large bodies queued ahead (``Retry-After``: when they are
  done; ``budgetlens.ingest.admission``), the journal cannot be written (disk full:
  "journal unavailable"), or the collector is shutting down. A body refused for the in-flight
  cap or the deadline is read and dropped (kept nowhere) so the connection serves the retry; a
  stalled upload (408, or that 503 when its body does not arrive in time) has its connection
  closed, and so has every 413, 415 or 408 answered before the body was read (answered from
  the headers, the connection closed at once: not at the keep-alive timeout). Error bodies are a ``google.rpc.Status`` (code,
  message) in the request's encoding, as OTLP/HTTP asks (protobuf, or JSON
  ``{"code": N, "message": "..."}``; text/plain when the content type was not OTLP).
- ``POST /v1/ledger/{reserve,settle,renew,balances}``: the shared ledger of spend windows and
  token pools for the processes of this machine (same bearer token;
  ``budgetlens.ingest.ledger_api``).
- ``POST /v1/store/query``, ``/v1/store/session``: read-only SQL on the store this collector
  holds, Arrow IPC out (``budgetlens.ingest.store_api``; the read token).
- ``GET /metrics``: Prometheus text exposition of ``CollectorMetrics``.
- ``GET /healthz``: ``{"status": "ok", "queue_rows": N, "backlog_rows": N, "backlog_spans": N,
  "backlog_bytes": B, "journal_budget_bytes": B, "journal_used_pct": P, "refused_in_s": S|null,
  "loader_lag_s": S, "store_error": null, "journal_error": null, "inflight_bytes": B,
  "connections": N}`` (``health``;
  ``connections`` only when served by the ``collector`` command, which counts them: backlog = store
  rows acknowledged, not yet in DuckDB, not spans; ``backlog_spans`` is its former name; lag = age of the oldest of them, s; store_error = why the last load attempt
  failed); 503 with the reason in ``status`` while the store cannot be written
  (``"store unavailable: ..."``, with ``refused_in_s``: when, at the backlog's growth so far,
  new spans will be refused), while the journal cannot be written (``"journal unavailable:
  OSError ENOSPC (No space left on device)"``, cleared by the next write that succeeds) or when
  the journal or loader thread has stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import logging
import os
import secrets
import time

from google.rpc.status_pb2 import Status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from budgetlens.guard.ledgers.local import SqliteLedger
from budgetlens.guard.ledgers.protocol import Ledger
from budgetlens.ingest.admission import DEFAULT_ANSWER_DEADLINE_S, LargeBodyQueue, TooLate, work_bytes
from budgetlens.ingest.body_reader import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MIN_BODY_RATE,
    BodyReader,
    BodyTimeouts,
)
from budgetlens.ingest.budget import Busy, ByteBudget
from budgetlens.ingest.connections import ConnectionGuard
from budgetlens.ingest.decode_pool import DecodePool, DecodeUnavailable, Prepared
from budgetlens.ingest.health import health, journal_failure
from budgetlens.ingest.ledger_api import ledger_routes
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import (
    DEFAULT_MAX_JOURNAL_BYTES,
    DEFAULT_MAX_QUEUE_SPANS,
    IngestClosed,
    IngestQueue,
    QueueFull,
)
from budgetlens.ingest.store_api import DEFAULT_READ_TIMEOUT_S, StoreApi
from budgetlens.otlp import DEFAULT_MAX_BODY_BYTES, JSON, PROTOBUF, OtlpError, SpanMemory, encode_response
from budgetlens.otlp.decode import media_type
from budgetlens.store.host import DEFAULT_CHECKPOINT_INTERVAL_S, DEFAULT_CHECKPOINT_WAL_BYTES

log = logging.getLogger(__name__)

__all__ = ["ByteBudget", "create_app", "health"]

RETRY_AFTER_S = 1
#: Default cap on request body bytes held at once, read or being decoded (2 full bodies).
DEFAULT_MAX_INFLIGHT_BYTES = 2 * DEFAULT_MAX_BODY_BYTES
#: Default cap on an OTLP/JSON body (bytes, compressed and inflated): the JSON decoder is slow
#: enough that a larger one is not acknowledged within the exporters' 10 s default timeout, so
#: it gets an early 413 that says to lower the batch size instead of a retried timeout.
DEFAULT_MAX_JSON_BODY_BYTES = 4 * 1024 * 1024
#: What a 413 suggests (the OTel SDK's batch span processor setting).
BATCH_HINT = "lower the exporter's batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE) or send protobuf"
#: What a 413 on a protobuf body suggests ("send protobuf" would make no sense there).
PROTOBUF_BATCH_HINT = (
    "lower the exporter's batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE) or raise --max-body-mib"
)
#: HTTP status -> google.rpc.Code of the error body.
_RPC_CODES = {400: 3, 401: 16, 408: 4, 413: 8, 415: 3, 503: 14}


class _Receiver:
    """The routes' state: ingest queue, decode pool, metrics, limits (see ``create_app``)."""

    def __init__(
        self,
        ingest: IngestQueue,
        pool: DecodePool,
        metrics: CollectorMetrics,
        *,
        token: str | None,
        max_body_bytes: int,
        budget: ByteBudget,
        timeouts: BodyTimeouts,
        max_json_body_bytes: int = DEFAULT_MAX_JSON_BODY_BYTES,
        connections: ConnectionGuard | None = None,
        answer_deadline_s: float = DEFAULT_ANSWER_DEADLINE_S,
    ):
        self.connections = connections
        self.large = LargeBodyQueue(pool.large_bytes, answer_deadline_s)
        self.ingest = ingest
        self.pool = pool
        self.metrics = metrics
        self.expected = token.encode("utf-8") if token else None
        self.max_body_bytes = max_body_bytes
        self.budget = budget
        self.bodies = BodyReader(budget, timeouts)
        self.max_json_body_bytes = max_json_body_bytes
        #: why the last journal write failed (``journal_failure``), None once one succeeds
        self.journal_error: str | None = None

    def authorized(self, request: Request) -> bool:
        if self.expected is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        # the server decoded the header as latin-1: back to the bytes the client sent, which
        # are compared with the token's UTF-8 bytes (a non-ASCII token sent as UTF-8 matches)
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("latin-1", "replace"), self.expected
        )

    async def traces(self, request: Request) -> Response:
        started = time.monotonic()  # the clock of ``self.large``
        content_type = request.headers.get("content-type")
        kind = _request_kind(content_type)
        if not self.authorized(request):
            return _error(kind, 401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        held = [0]  # bytes reserved in ``budget`` for this request
        client = request.client.host if request.client else ""
        try:
            is_json = media_type(content_type) == JSON
            limit = self.max_json_body_bytes if is_json else self.max_body_bytes
            hint = BATCH_HINT if is_json else PROTOBUF_BATCH_HINT
            declared = request.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) <= limit:
                self.large.check(int(declared), started)  # TooLate before a byte is read
            body = await self.bodies.read(request, held, client, limit, hint)
        except OtlpError as error:
            # 415, 413 or 408 with the body not (all) read: close the connection, so the client
            # has its answer now, not when the keep-alive timeout closes it
            self.budget.give(held[0], client)
            return _error(kind, error.status, error.reason, {"Connection": "close"})
        except Busy as error:
            self.budget.give(held[0], client)
            received = await self.bodies.discard(request, started=held[0] > 0)
            return _retry_later(kind, f"collector busy: {error}", close=not received)
        except TooLate as error:
            received = await self.bodies.discard(request, started=False)
            return _retry_later(kind, f"collector busy: {error}", not received, error.retry_after_s)
        except ClientDisconnect:
            # the client closed its connection mid-body (its exporter's timeout, a dropped
            # network): nobody is left to answer, and its bytes go back to the budget at once
            self.budget.give(held[0], client)
            log.debug("client %s disconnected after %d body bytes; nothing stored", client, held[0])
            return Response(status_code=400)
        try:
            # a large body: admitted by the deadline rule now that its size is known, then
            # decoded and journaled in the one large-body slot (``budgetlens.ingest.admission``)
            encoding = request.headers.get("content-encoding")
            work = work_bytes(body, encoding)  # a gzip body counts inflated
            async with self.large.slot(work, started):
                prepared = await self.pool.prepare(body, content_type, encoding, limit, work)
                del body
                self.budget.give(held[0], client)
                held[0] = 0
                return await self._store(prepared)
        except OtlpError as error:
            return _error(kind, error.status, error.reason)
        except TooLate as error:  # its bytes are dropped as the handler returns
            return _retry_later(kind, f"collector busy: {error}", retry_after_s=error.retry_after_s)
        except DecodeUnavailable as error:
            return _retry_later(kind, f"collector busy: {error}")
        finally:
            self.budget.give(held[0], client)

    async def _store(self, prepared: Prepared) -> Response:
        """Journal the prepared rows (answering once they are durable) and build the response."""
        kind = prepared.kind
        self.metrics.observe_received(prepared.spans, prepared.rejected, prepared.flagged)
        if prepared.rejected:
            log.info("rejected %d of %d spans: %s", prepared.rejected, prepared.spans, prepared.log_message)
            if prepared.rejected == prepared.spans:  # nothing accepted: the spec allows a 400
                return _error(kind, 400, f"no valid span in the request: {prepared.error_message}")
        if prepared.encoded is not None:
            try:
                await _journaled([self.ingest.submit(payload) for payload in prepared.payloads])
            except QueueFull as error:
                return _retry_later(kind, f"collector busy: {error}")
            except IngestClosed as error:
                return _retry_later(kind, str(error))
            except Exception as error:  # the journal failed; the exporter retries, PK dedupes
                self.journal_error = journal_failure(error)
                return _retry_later(kind, f"journal unavailable: {self.journal_error}")
            self.journal_error = None
        return Response(encode_response(kind, prepared.rejected, prepared.error_message), media_type=kind)

    async def metrics_endpoint(self, request: Request) -> Response:
        self.metrics.queue_spans.set(self.ingest.depth)
        self.metrics.loader_lag.set(self.ingest.lag_s)
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(self, request: Request) -> Response:
        guard = self.connections
        return JSONResponse(
            *health(self.ingest, self.budget.used, guard.open if guard else None, self.journal_error)
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        loop = asyncio.get_running_loop()
        self.ingest.start()
        await loop.run_in_executor(None, self.pool.start)
        try:
            yield
        finally:
            await loop.run_in_executor(None, self.pool.close)
            await loop.run_in_executor(None, self.ingest.close)


async def _journaled(futures: list[concurrent.futures.Future]) -> None:
    """Wait for every payload of a body to be journaled; raise the first failure."""
    if len(futures) == 1:
        await asyncio.wrap_future(futures[0])
        return
    done = await asyncio.gather(*map(asyncio.wrap_future, futures), return_exceptions=True)
    for result in done:
        if isinstance(result, BaseException):
            raise result


def create_app(
    db_path: str | os.PathLike,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
    max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
    min_body_rate_bytes_s: float = DEFAULT_MIN_BODY_RATE,
    max_client_inflight_bytes: int | None = None,
    max_json_body_bytes: int = DEFAULT_MAX_JSON_BODY_BYTES,
    answer_deadline_s: float = DEFAULT_ANSWER_DEADLINE_S,
    metrics: CollectorMetrics | None = None,
    ingest: IngestQueue | None = None,
    decode_pool: DecodePool | None = None,
    ledger: Ledger | None = None,
    read_token: str | None = None,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
    checkpoint_wal_bytes: int = DEFAULT_CHECKPOINT_WAL_BYTES,
    connections: ConnectionGuard | None = None,
) -> Starlette:
    """Build the ASGI app writing to the DuckDB file ``db_path``.

    ``token``: when set, ``/v1/traces`` requires ``Authorization: Bearer <token>``.
    ``max_body_bytes``: cap on the request body, compressed and inflated (bytes).
    ``max_queue_spans``: rows waiting for the loader held in memory; ``max_journal_bytes``: the
    journal backlog at which intake answers 503 (``budgetlens.ingest.queue``).
    ``max_inflight_bytes``: cap on request body bytes held at once (503 + Retry-After beyond);
    ``body_timeout_s``: time to receive a whole body, ``idle_timeout_s``: longest pause between
    two of its pieces, ``min_body_rate_bytes_s``: slowest average after that grace (0: none;
    ``budgetlens.ingest.body_reader``; 408 after any; s, bytes/s). ``max_client_inflight_bytes``: one client's (address)
    share of the in-flight cap (default ``max_body_bytes``: one body, the rest is the others').
    ``max_json_body_bytes``: cap on an OTLP/JSON body (compressed and inflated; at most
    ``max_body_bytes``), so any accepted body is acknowledged within the exporters' 10 s.
    ``answer_deadline_s``: a body over the decode pool's ``large_bytes`` estimated to be answered
    later than this after its request arrived, behind the large bodies queued ahead, gets 503 +
    ``Retry-After`` at once (``budgetlens.ingest.admission``; s, > 0).
    ``ledger``: the state behind ``/v1/ledger/*`` (default: a SQLite ledger in memory; the
    ``collector`` command keeps it in a file next to the journal).
    ``read_token``: the bearer token of the read endpoint ``/v1/store/*``
    (``budgetlens.ingest.store_api``; default ``token``, else a random one, in
    ``app.state.read_token``); ``read_timeout_s``: a read statement running longer is
    stopped (504). ``checkpoint_interval_s`` / ``checkpoint_wal_bytes``: when the
    store file is checkpointed (``budgetlens.store.host``). ``connections``: the server's
    connection guard (``budgetlens.ingest.connections``), whose open count ``/healthz`` reports.
    ``metrics``/``ingest``/``decode_pool`` may be injected (tests); the app starts the ingest
    writer and the decode workers on startup and, on shutdown (SIGTERM under uvicorn), commits
    what is pending before it exits.
    Raises ValueError for ``max_body_bytes`` < 1, ``max_inflight_bytes`` < ``max_body_bytes``,
    a client share below ``max_body_bytes`` or above ``max_inflight_bytes``, a timeout or answer
    deadline <= 0, a minimum body rate < 0, or
    a token that is empty or has surrounding whitespace.
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1 (got {max_body_bytes})")
    if max_inflight_bytes < max_body_bytes:
        raise ValueError(
            f"max_inflight_bytes ({max_inflight_bytes}) must be >= max_body_bytes ({max_body_bytes})"
        )
    timeouts = BodyTimeouts(body_timeout_s, idle_timeout_s, min_body_rate_bytes_s)
    share = max_body_bytes if max_client_inflight_bytes is None else max_client_inflight_bytes
    if not max_body_bytes <= share <= max_inflight_bytes:
        raise ValueError(
            f"max_client_inflight_bytes ({share}) must be from max_body_bytes ({max_body_bytes}) "
            f"to max_inflight_bytes ({max_inflight_bytes})"
        )
    if token is not None and not token.strip():
        raise ValueError("token must not be empty (omit it to disable authentication)")
    if token is not None and token != token.strip():
        raise ValueError("token must not start or end with whitespace (a header value cannot carry it)")
    metrics = metrics or (ingest.metrics if ingest else CollectorMetrics())
    ingest = ingest or IngestQueue(
        db_path,
        metrics=metrics,
        max_queue_spans=max_queue_spans,
        max_journal_bytes=max_journal_bytes,
        checkpoint_interval_s=checkpoint_interval_s,
        checkpoint_wal_bytes=checkpoint_wal_bytes,
    )
    read_token = read_token or token or secrets.token_urlsafe(32)
    store_api = StoreApi(ingest.store_host, read_token, read_timeout_s)
    receiver = _Receiver(
        ingest,
        decode_pool or DecodePool(memory=SpanMemory()),
        metrics,
        token=token,
        max_body_bytes=max_body_bytes,
        budget=ByteBudget(max_inflight_bytes, share),
        timeouts=timeouts,
        max_json_body_bytes=min(max_json_body_bytes, max_body_bytes),
        connections=connections,
        answer_deadline_s=answer_deadline_s,
    )
    app = Starlette(
        routes=[
            Route("/v1/traces", receiver.traces, methods=["POST"]),
            Route("/metrics", receiver.metrics_endpoint, methods=["GET"]),
            Route("/healthz", receiver.healthz, methods=["GET"]),
            *ledger_routes(ledger if ledger is not None else SqliteLedger(), receiver.authorized),
            *store_api.routes(),
        ],
        lifespan=receiver.lifespan,
    )
    app.state.ingest = ingest
    app.state.metrics = metrics
    app.state.decode_pool = receiver.pool
    app.state.read_token = read_token
    return app


def _request_kind(content_type: str | None) -> str | None:
    """``PROTOBUF`` or ``JSON`` for an OTLP content type, else None (errors then go as text)."""
    try:
        return media_type(content_type)
    except OtlpError:
        return None


def _error(kind: str | None, status: int, message: str, headers: dict | None = None) -> Response:
    """An error response: ``google.rpc.Status`` in the request's encoding (OTLP/HTTP), or
    text/plain when the request's content type is not OTLP."""
    code = _RPC_CODES.get(status, 2)
    if kind == PROTOBUF:
        body = Status(code=code, message=message).SerializeToString()
        return Response(body, status_code=status, media_type=PROTOBUF, headers=headers)
    if kind == JSON:
        return JSONResponse({"code": code, "message": message}, status_code=status, headers=headers)
    return PlainTextResponse(message, status_code=status, headers=headers)


def _retry_later(
    kind: str | None, reason: str, close: bool = False, retry_after_s: int = RETRY_AFTER_S
) -> Response:
    """503 + Retry-After (``retry_after_s``); ``close`` also ends the connection (the request
    body was not read)."""
    headers = {"Retry-After": str(retry_after_s)}
    if close:
        headers["Connection"] = "close"
    return _error(kind, 503, reason, headers)
