"""The collector's HTTP app (Starlette, served by uvicorn): OTLP/HTTP traces, metrics, health.

Routes:

- ``POST /v1/traces``: OTLP/HTTP, ``application/x-protobuf`` or ``application/json``, optionally
  ``Content-Encoding: gzip``. Answers 200 with an ``ExportTraceServiceResponse`` (in the request's
  encoding; ``partial_success`` when some spans were invalid) only after the valid spans are
  durable: appended to the collector's journal and fsynced (``budgetlens.ingest.queue``; they are
  queryable in DuckDB about 0.25 s later). Bodies over 256 KiB are decoded and mapped in worker
  processes (``budgetlens.ingest.decode_pool``), so the event loop keeps answering. 400 malformed
  body, 401 missing/wrong bearer token (when one is configured; the scheme ``Bearer`` is
  case-insensitive), 408 body not received within ``body_timeout_s``, 413 body over
  ``max_body_bytes`` (compressed or inflated), 415 wrong content type or encoding, 503 +
  ``Retry-After`` when the journal backlog is at its disk budget, more than
  ``max_inflight_bytes`` of request bodies are held, the journal cannot be written (disk full:
  "journal unavailable"), or the collector is shutting down. A body refused for the in-flight
  cap is read and dropped (kept nowhere) so the connection serves the retry; a stalled upload
  (408, or that 503 when its body does not arrive in time) has its connection closed. Error bodies are a ``google.rpc.Status`` (code,
  message) in the request's encoding, as OTLP/HTTP asks (protobuf, or JSON
  ``{"code": N, "message": "..."}``; text/plain when the content type was not OTLP).
- ``POST /v1/ledger/{reserve,settle,renew,balances}``: the shared ledger of spend windows and
  token pools for the processes of this machine (same bearer token;
  ``budgetlens.ingest.ledger_api``).
- ``GET /metrics``: Prometheus text exposition of ``CollectorMetrics``.
- ``GET /healthz``: ``{"status": "ok", "queue_spans": N, "backlog_spans": N, "backlog_bytes": B,
  "journal_budget_bytes": B, "loader_lag_s": S, "store_error": null, "inflight_bytes": B}``
  (backlog = rows acknowledged, not yet in DuckDB; lag = age of the oldest of them, s;
  store_error = why the last load attempt failed); 503 when the journal or loader thread has
  stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os

from google.rpc.status_pb2 import Status
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from budgetlens.guard.ledgers.local import SqliteLedger
from budgetlens.guard.ledgers.protocol import Ledger
from budgetlens.ingest.decode_pool import DecodePool, DecodeUnavailable, Prepared
from budgetlens.ingest.ledger_api import ledger_routes
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import (
    DEFAULT_MAX_JOURNAL_BYTES,
    DEFAULT_MAX_QUEUE_SPANS,
    IngestClosed,
    IngestQueue,
    QueueFull,
)
from budgetlens.otlp import DEFAULT_MAX_BODY_BYTES, JSON, PROTOBUF, OtlpError, SpanMemory, encode_response
from budgetlens.otlp.decode import media_type

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
#: Default cap on request body bytes held at once, read or being decoded (2 full bodies).
DEFAULT_MAX_INFLIGHT_BYTES = 2 * DEFAULT_MAX_BODY_BYTES
#: Default time a client has to send a whole request body (s); a stalled upload is dropped.
DEFAULT_BODY_TIMEOUT_S = 30.0
#: HTTP status -> google.rpc.Code of the error body.
_RPC_CODES = {400: 3, 401: 16, 408: 4, 413: 8, 415: 3, 503: 14}


class Busy(Exception):
    """More request body bytes are in flight than the collector's cap allows."""


class ByteBudget:
    """Request body bytes held at once (read, or waiting for their decode), capped at ``limit``.

    Used from the event loop only (no lock). ``take`` refuses once ``limit`` would be passed,
    except when nothing is held (so one body up to the body limit always fits).
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def take(self, nbytes: int) -> bool:
        """Reserve ``nbytes``; False (nothing reserved) when that would pass ``limit``."""
        if self.used and self.used + nbytes > self.limit:
            return False
        self.used += nbytes
        return True

    def give(self, nbytes: int) -> None:
        """Release ``nbytes`` reserved earlier."""
        self.used -= nbytes


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
        body_timeout_s: float,
    ):
        self.ingest = ingest
        self.pool = pool
        self.metrics = metrics
        self.expected = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.budget = budget
        self.body_timeout_s = body_timeout_s

    def authorized(self, request: Request) -> bool:
        if self.expected is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.expected)

    async def traces(self, request: Request) -> Response:
        content_type = request.headers.get("content-type")
        kind = _request_kind(content_type)
        if not self.authorized(request):
            return _error(kind, 401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        held = [0]  # bytes reserved in ``budget`` for this request
        try:
            media_type(content_type)
            body = await self._read_body(request, held)
            prepared = await self.pool.prepare(
                body, content_type, request.headers.get("content-encoding"), self.max_body_bytes
            )
            del body
        except OtlpError as error:  # 408: a stalled upload, close its connection
            stalled = {"Connection": "close"} if error.status == 408 else None
            return _error(kind, error.status, error.reason, stalled)
        except Busy as error:
            received = await self._discard_body(request, started=held[0] > 0)
            return _retry_later(kind, f"collector busy: {error}", close=not received)
        except DecodeUnavailable as error:
            return _retry_later(kind, f"collector busy: {error}")
        finally:
            self.budget.give(held[0])
        return await self._store(prepared)

    async def _read_body(self, request: Request, held: list[int]) -> bytearray:
        """The body, refusing 413 past ``max_body_bytes``, 408 when it takes longer than
        ``body_timeout_s``, Busy when the byte budget is spent (the declared length is
        reserved up front, the rest as it arrives; ``held`` counts what was reserved)."""
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        length = int(declared) if declared and declared.isdigit() else None
        if length is not None:
            if length > limit:
                raise OtlpError(413, f"request body is {declared} bytes; the limit is {limit}")
            self._reserve(length, held)
        # one copy of the body: filled in place when its length is declared
        body = bytearray(length or 0)
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                async for chunk in request.stream():
                    end = size + len(chunk)
                    if end > limit:
                        raise OtlpError(413, f"request body exceeds the limit of {limit} bytes")
                    if end > held[0]:
                        self._reserve(end - held[0], held)
                    if end <= len(body):
                        body[size:end] = chunk
                    else:
                        del body[size:]
                        body += chunk
                    size = end
        except TimeoutError:
            raise OtlpError(408, f"request body not received within {self.body_timeout_s:g} s") from None
        del body[size:]  # a body shorter than declared
        return body

    async def _discard_body(self, request: Request, started: bool) -> bool:
        """Read and drop the body of a request refused for the byte cap (nothing is kept), so
        the connection stays usable for the client's retry. False when it cannot be: the body
        was partly read already, or did not arrive within ``body_timeout_s`` (a stalled upload;
        the caller closes the connection then)."""
        if started:
            return False
        try:
            async with asyncio.timeout(self.body_timeout_s):
                async for _ in request.stream():
                    pass
        except TimeoutError:
            return False
        return True

    def _reserve(self, nbytes: int, held: list[int]) -> None:
        if not self.budget.take(nbytes):
            raise Busy(f"{self.budget.used} request bytes in flight (the cap is {self.budget.limit})")
        held[0] += nbytes

    async def _store(self, prepared: Prepared) -> Response:
        """Journal the prepared rows (answering once they are durable) and build the response."""
        kind = prepared.kind
        self.metrics.observe_received(prepared.spans, prepared.rejected, prepared.flagged)
        if prepared.rejected:
            log.info("rejected %d of %d spans: %s", prepared.rejected, prepared.spans, prepared.log_message)
        if prepared.encoded is not None:
            try:
                await asyncio.wrap_future(self.ingest.submit(prepared.encoded))
            except QueueFull as error:
                return _retry_later(kind, f"collector busy: {error}")
            except IngestClosed as error:
                return _retry_later(kind, str(error))
            except Exception as error:  # the journal failed; the exporter retries, PK dedupes
                return _retry_later(kind, f"journal unavailable: {type(error).__name__}")
        return Response(encode_response(kind, prepared.rejected, prepared.error_message), media_type=kind)

    async def metrics_endpoint(self, request: Request) -> Response:
        self.metrics.queue_spans.set(self.ingest.depth)
        self.metrics.loader_lag.set(self.ingest.lag_s)
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(self, request: Request) -> Response:
        ingest = self.ingest
        ok = ingest.alive
        body = {
            "status": "ok" if ok else "writer stopped",
            "queue_spans": ingest.depth,
            "backlog_spans": ingest.depth,
            "backlog_bytes": ingest.backlog_bytes,
            "journal_budget_bytes": ingest.max_journal_bytes,
            "loader_lag_s": round(ingest.lag_s, 3),
            "store_error": ingest.store_error,
            "inflight_bytes": self.budget.used,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

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


def create_app(
    db_path: str | os.PathLike,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
    max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    metrics: CollectorMetrics | None = None,
    ingest: IngestQueue | None = None,
    decode_pool: DecodePool | None = None,
    ledger: Ledger | None = None,
) -> Starlette:
    """Build the ASGI app writing to the DuckDB file ``db_path``.

    ``token``: when set, ``/v1/traces`` requires ``Authorization: Bearer <token>``.
    ``max_body_bytes``: cap on the request body, compressed and inflated (bytes).
    ``max_queue_spans``: rows waiting for the loader held in memory; ``max_journal_bytes``: the
    journal backlog at which intake answers 503 (``budgetlens.ingest.queue``).
    ``max_inflight_bytes``: cap on request body bytes held at once (503 + Retry-After beyond);
    ``body_timeout_s``: time to receive a whole body (408 after it).
    ``ledger``: the state behind ``/v1/ledger/*`` (default: a SQLite ledger in memory; the
    ``collector`` command keeps it in a file next to the journal).
    ``metrics``/``ingest``/``decode_pool`` may be injected (tests); the app starts the ingest
    writer and the decode workers on startup and, on shutdown (SIGTERM under uvicorn), commits
    what is pending before it exits.
    Raises ValueError for ``max_body_bytes`` < 1, ``max_inflight_bytes`` < ``max_body_bytes``,
    ``body_timeout_s`` <= 0 or an empty token.
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1 (got {max_body_bytes})")
    if max_inflight_bytes < max_body_bytes:
        raise ValueError(
            f"max_inflight_bytes ({max_inflight_bytes}) must be >= max_body_bytes ({max_body_bytes})"
        )
    if body_timeout_s <= 0:
        raise ValueError(f"body_timeout_s must be > 0 (got {body_timeout_s})")
    if token is not None and not token.strip():
        raise ValueError("token must not be empty (omit it to disable authentication)")
    metrics = metrics or (ingest.metrics if ingest else CollectorMetrics())
    ingest = ingest or IngestQueue(
        db_path, metrics=metrics, max_queue_spans=max_queue_spans, max_journal_bytes=max_journal_bytes
    )
    receiver = _Receiver(
        ingest,
        decode_pool or DecodePool(memory=SpanMemory()),
        metrics,
        token=token,
        max_body_bytes=max_body_bytes,
        budget=ByteBudget(max_inflight_bytes),
        body_timeout_s=body_timeout_s,
    )
    app = Starlette(
        routes=[
            Route("/v1/traces", receiver.traces, methods=["POST"]),
            Route("/metrics", receiver.metrics_endpoint, methods=["GET"]),
            Route("/healthz", receiver.healthz, methods=["GET"]),
            *ledger_routes(ledger if ledger is not None else SqliteLedger(), receiver.authorized),
        ],
        lifespan=receiver.lifespan,
    )
    app.state.ingest = ingest
    app.state.metrics = metrics
    app.state.decode_pool = receiver.pool
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


def _retry_later(kind: str | None, reason: str, close: bool = False) -> Response:
    """503 + Retry-After; ``close`` also ends the connection (the request body was not read)."""
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    if close:
        headers["Connection"] = "close"
    return _error(kind, 503, reason, headers)
