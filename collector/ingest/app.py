"""The collector's HTTP app (Starlette, served by uvicorn): OTLP/HTTP traces, metrics, health.

Routes:

- ``POST /v1/traces``: OTLP/HTTP, ``application/x-protobuf`` or ``application/json``, optionally
  ``Content-Encoding: gzip``. Answers 200 with an ``ExportTraceServiceResponse`` (in the request's
  encoding; ``partial_success`` when some spans were invalid) only after the valid spans are
  durable: appended to the collector's journal and fsynced (``budgetlens.ingest.queue``; they are
  queryable in DuckDB about 0.25 s later). 400 malformed body, 401 missing/wrong bearer token
  (when one is configured; the scheme ``Bearer`` is case-insensitive), 413 body over
  ``max_body_bytes`` (compressed or inflated), 415 wrong content type or encoding, 503 +
  ``Retry-After`` when the backlog of rows not yet loaded is over its bound, the store cannot be
  written right now, the journal cannot be written (disk full: "journal unavailable"), or the
  collector is shutting down. Error bodies are a ``google.rpc.Status`` (code, message) in the
  request's encoding, as OTLP/HTTP asks (protobuf, or JSON ``{"code": N, "message": "..."}``;
  text/plain when the content type was not OTLP).
- ``GET /metrics``: Prometheus text exposition of ``CollectorMetrics``.
- ``GET /healthz``: ``{"status": "ok", "queue_spans": N, "backlog_spans": N, "loader_lag_s": S,
  "store_error": null}`` (backlog = rows acknowledged, not yet in DuckDB); 503 when the journal
  or loader thread has stopped.
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

from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.ingest.queue import (
    DEFAULT_MAX_QUEUE_SPANS,
    IngestClosed,
    IngestQueue,
    QueueFull,
    StoreUnavailable,
)
from budgetlens.otlp import (
    DEFAULT_MAX_BODY_BYTES,
    JSON,
    PROTOBUF,
    OtlpError,
    SpanMemory,
    decode,
    encode_response,
    map_spans,
)
from budgetlens.otlp.decode import media_type

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
#: HTTP status -> google.rpc.Code of the error body.
_RPC_CODES = {400: 3, 401: 16, 413: 8, 415: 3, 503: 14}


def create_app(
    db_path: str | os.PathLike,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_queue_spans: int = DEFAULT_MAX_QUEUE_SPANS,
    metrics: CollectorMetrics | None = None,
    ingest: IngestQueue | None = None,
) -> Starlette:
    """Build the ASGI app writing to the DuckDB file ``db_path``.

    ``token``: when set, ``/v1/traces`` requires ``Authorization: Bearer <token>``.
    ``max_body_bytes``: cap on the request body, compressed and inflated (bytes).
    ``metrics``/``ingest`` may be injected (tests); the app starts the ingest writer on startup
    and, on shutdown (SIGTERM under uvicorn), commits what is pending before it exits.
    Raises ValueError for ``max_body_bytes`` < 1 or an empty token.
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1 (got {max_body_bytes})")
    if token is not None and not token.strip():
        raise ValueError("token must not be empty (omit it to disable authentication)")
    metrics = metrics or (ingest.metrics if ingest else CollectorMetrics())
    ingest = ingest or IngestQueue(db_path, metrics=metrics, max_queue_spans=max_queue_spans)
    memory = SpanMemory()  # tree rules across requests (see budgetlens.otlp.memory)
    expected = token.encode() if token else None

    async def traces(request: Request) -> Response:
        kind = _request_kind(request.headers.get("content-type"))
        if expected is not None:
            scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
                return _error(kind, 401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        try:
            media_type(request.headers.get("content-type"))
            body = await _read_body(request, max_body_bytes)
            kind, decoded = decode(
                body,
                request.headers.get("content-type"),
                request.headers.get("content-encoding"),
                max_body_bytes,
            )
            try:
                mapped = map_spans(decoded, memory=memory)
            except RecursionError:
                raise OtlpError(400, "request is nested too deeply") from None
        except OtlpError as error:
            return _error(kind, error.status, error.reason)
        metrics.observe_received(mapped.spans, mapped.rejected, mapped.flagged)
        if mapped.rejected:
            log.info("rejected %d of %d spans: %s", mapped.rejected, mapped.spans, mapped.error_message(2))
        if mapped.rows:
            try:
                await asyncio.wrap_future(ingest.submit(mapped))
            except QueueFull as error:
                return _retry_later(kind, f"collector busy: {error}")
            except (IngestClosed, StoreUnavailable) as error:
                return _retry_later(kind, str(error))
            except Exception as error:  # the journal failed; the exporter retries, PK dedupes
                return _retry_later(kind, f"journal unavailable: {type(error).__name__}")
        return Response(encode_response(kind, mapped.rejected, mapped.error_message()), media_type=kind)

    async def metrics_endpoint(request: Request) -> Response:
        metrics.queue_spans.set(ingest.depth)
        metrics.loader_lag.set(ingest.lag_s)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        ok = ingest.alive
        body = {
            "status": "ok" if ok else "writer stopped",
            "queue_spans": ingest.depth,
            "backlog_spans": ingest.depth,
            "loader_lag_s": round(ingest.lag_s, 3),
            "store_error": ingest.store_error,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        ingest.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, ingest.close)

    app = Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.ingest = ingest
    app.state.metrics = metrics
    return app


async def _read_body(request: Request, max_bytes: int) -> bytes:
    """The body, refusing (413) as soon as more than ``max_bytes`` arrive."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise OtlpError(413, f"request body is {declared} bytes; the limit is {max_bytes}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise OtlpError(413, f"request body exceeds the limit of {max_bytes} bytes")
    return bytes(body)


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


def _retry_later(kind: str | None, reason: str) -> Response:
    return _error(kind, 503, reason, {"Retry-After": str(RETRY_AFTER_S)})
