"""The collector's read endpoint: read-only SQL on the store it holds, Arrow IPC on the wire.

While a collector runs on a file store it holds the file (``budgetlens.store.host``), so
readers (the dashboard, the CLI, a notebook) query through it:

- ``POST /v1/store/query`` with JSON ``{"sql": "SELECT ...", "params": [..] | {..},
  "session": "<id>"}`` (``params`` and ``session`` optional) answers 200 with the result as an
  Arrow IPC stream (``application/vnd.apache.arrow.stream``). ``sql`` must be exactly one
  SELECT (``WITH ... SELECT``, ``FROM ...``) as DuckDB's parser classifies it; in a session also
  CREATE/DROP of temp tables. Each statement runs in a READ ONLY transaction, with DuckDB's
  external file access off. Parameter values are JSON values; a datetime is
  ``{"$datetime": "<ISO 8601>"}``, a date ``{"$date": "<ISO 8601>"}``
  (``budgetlens.store.wire``).
- ``POST /v1/store/session`` → ``{"session": "<id>"}``; ``DELETE /v1/store/session/<id>``.

Every route needs ``Authorization: Bearer <token>``: the collector's ``--read-token`` when
set, else its ``--token`` (one token for both, as before), else the read token the collector generates at start and writes, readable only by its owner,
next to the store (``budgetlens.store.readers``). Errors are JSON ``{"error": "..."}``: 400
for a refused or failing statement (the reason names the rule), 401 for a missing or wrong
token, 404 for an unknown session, 503 when the store cannot be opened or no store is held (a
DuckLake: read it directly), 504 for a statement stopped after the read timeout
(``--read-timeout``, default ``DEFAULT_READ_TIMEOUT_S``: no query holds one of the
``MAX_CONCURRENT_QUERIES`` slots for longer).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import duckdb
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from budgetlens.ingest.body_reader import read_capped
from budgetlens.otlp import OtlpError
from budgetlens.store.host import NotReadOnly, QueryTimeout, StoreHost
from budgetlens.store.wire import ARROW_STREAM, decode_params, to_ipc

log = logging.getLogger(__name__)

#: Queries running at once (each holds a thread and one DuckDB thread's worth of CPU).
MAX_CONCURRENT_QUERIES = 4
#: Seconds a read statement may run before it is interrupted (``--read-timeout``).
DEFAULT_READ_TIMEOUT_S = 30.0
#: Largest request body of the read endpoint (bytes).
MAX_QUERY_BYTES = 1024 * 1024


def _refuse(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class StoreApi:
    """The read routes over ``host`` (None: no file store is held, every query answers 503),
    guarded by the bearer ``token`` (required, non-empty); a statement running past
    ``timeout_s`` seconds is stopped and answered 504."""

    def __init__(self, host: StoreHost | None, token: str, timeout_s: float = DEFAULT_READ_TIMEOUT_S):
        if not token:
            raise ValueError("the read endpoint needs a token")
        if not timeout_s > 0:
            raise ValueError(f"the read timeout must be > 0 seconds, got {timeout_s!r}")
        self.host = host
        self.timeout_s = timeout_s
        self.expected = token.encode("utf-8")
        self._running: asyncio.Semaphore | None = None

    def authorized(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("latin-1", "replace"), self.expected
        )

    async def _run(self, function: Callable[[], Any]) -> Any:
        if self._running is None:
            self._running = asyncio.Semaphore(MAX_CONCURRENT_QUERIES)
        async with self._running:
            return await asyncio.get_running_loop().run_in_executor(None, function)

    def _gate(self, request: Request) -> JSONResponse | None:
        if not self.authorized(request):
            return _refuse(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        if self.host is None:
            return _refuse(503, "this collector holds no store file (a DuckLake: read it directly)")
        return None

    async def query(self, request: Request) -> Response:
        refused = self._gate(request)
        if refused is not None:
            return refused
        assert self.host is not None
        try:
            body = await read_capped(request, MAX_QUERY_BYTES)
        except OtlpError as error:
            return _refuse(error.status, error.reason, {"Connection": "close"})
        except ClientDisconnect:  # the client left before its query arrived: nobody to answer
            return Response(status_code=400)
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("the body must be a JSON object")
            sql = payload.get("sql")
            if not isinstance(sql, str) or not sql.strip():
                raise ValueError("sql: required, a non-empty string")
            params = decode_params(payload.get("params"))
            if params is not None and not isinstance(params, (list, dict)):
                raise ValueError("params: a JSON list or object")
            session = payload.get("session")
            if session is not None and not isinstance(session, str):
                raise ValueError("session: a string")
        except (ValueError, TypeError) as error:
            return _refuse(400, f"bad request: {error}")
        host = self.host
        try:
            table = await self._run(
                lambda: host.query(sql, params, session=session, timeout_s=self.timeout_s)
            )
        except QueryTimeout as error:
            return _refuse(504, f"{error} (the collector's --read-timeout)")
        except NotReadOnly as error:
            return _refuse(400, str(error))
        except KeyError as error:
            return _refuse(404, str(error.args[0]) if error.args else "unknown session")
        except duckdb.Error as error:
            return _refuse(400, f"query failed: {type(error).__name__}: {error}")
        except Exception as error:  # the store cannot be opened (StoreError): retry later
            log.warning("read endpoint: %s", error)
            return _refuse(503, f"store unavailable: {error}", {"Retry-After": "1"})
        return Response(to_ipc(table), media_type=ARROW_STREAM)

    async def open_session(self, request: Request) -> Response:
        refused = self._gate(request)
        if refused is not None:
            return refused
        assert self.host is not None
        try:
            session = await self._run(self.host.open_session)
        except Exception as error:
            return _refuse(503, f"store unavailable: {error}", {"Retry-After": "1"})
        return JSONResponse({"session": session})

    async def close_session(self, request: Request) -> Response:
        refused = self._gate(request)
        if refused is not None:
            return refused
        assert self.host is not None
        self.host.close_session(request.path_params["session"])
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/store/query", self.query, methods=["POST"]),
            Route("/v1/store/session", self.open_session, methods=["POST"]),
            Route("/v1/store/session/{session}", self.close_session, methods=["DELETE"]),
        ]
