"""The collector's ledger endpoint: one machine's processes share windows and pools through the
collector they already send telemetry to (``BUDGETLENS_LEDGER=http://127.0.0.1:4318``).

Routes (JSON POST, same bearer token as ``/v1/traces``; answers JSON):

- ``/v1/ledger/reserve`` ``{"call_id": str, "accounts": [[key, limit], ...], "amount": x,
  "lease_s": s}`` -> ``{"refusal": null | {"key", "limit", "spent", "held"}}``
- ``/v1/ledger/settle`` ``{"call_id": str, "keys": [key, ...], "amount": x}`` ->
  ``{"spent": {key: spent} | null}`` (null: settled before, charged once)
- ``/v1/ledger/renew`` ``{"call_ids": [str, ...], "lease_s": s}`` -> ``{"renewed": n}``
- ``/v1/ledger/balances`` ``{"keys": [key, ...]}`` -> ``{"balances": {key: {"spent", "held"}}}``

400 with ``{"error": "..."}`` naming the field and the rule for a malformed body; 401 for a
missing or wrong token; 503 when the ledger's file cannot be written. The state is the
collector's :class:`budgetlens.guard.ledgers.local.SqliteLedger`: in a file beside its journal
(:func:`ledger_path`), so spend, holds and settled call ids survive a restart.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from budgetlens.guard.ledgers.http import LEDGER_PATH
from budgetlens.guard.ledgers.protocol import Ledger, LedgerUnavailable
from budgetlens.ingest.body_reader import read_capped
from budgetlens.otlp import OtlpError

__all__ = ["ledger_path", "ledger_routes"]
_MAX_KEYS = 64
_MAX_RENEW = 10_000
_MAX_BODY = 256 * 1024


def ledger_path(db_path: str | os.PathLike) -> Path:
    """The collector's ledger file: its journal directory's name with ``.ledger.sqlite3``
    (``budgetlens.duckdb.ledger.sqlite3`` beside ``budgetlens.duckdb.journal/``)."""
    from budgetlens.ingest.queue import journal_dir

    return journal_dir(db_path).with_suffix(".ledger.sqlite3")


class BadRequest(ValueError):
    """A ledger request that breaks a rule (the message names the field)."""


def _text(body: dict, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > 512:
        raise BadRequest(f"{name} must be a non-empty string of at most 512 characters")
    return value


def _number(value: Any, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number")
    if value < 0 or (positive and value == 0):
        raise BadRequest(f"{name} must be {'> 0' if positive else '>= 0'}")
    return float(value)


def _texts(body: dict, name: str, most: int = _MAX_KEYS) -> list[str]:
    value = body.get(name)
    if not isinstance(value, list) or len(value) > most:
        raise BadRequest(f"{name} must be a list of at most {most} strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > 512:
            raise BadRequest(f"{name}[{i}] must be a non-empty string of at most 512 characters")
    return value


def _accounts(body: dict) -> list[tuple[str, float]]:
    value = body.get("accounts")
    if not isinstance(value, list) or not value or len(value) > _MAX_KEYS:
        raise BadRequest(f"accounts must be a list of 1 to {_MAX_KEYS} [key, limit] pairs")
    accounts = []
    for i, item in enumerate(value):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str) or not item[0]:
            raise BadRequest(f"accounts[{i}] must be a [key, limit] pair with a non-empty key")
        accounts.append((item[0], _number(item[1], f"accounts[{i}] limit")))
    return accounts


def _reserve(ledger: Ledger, body: dict) -> dict:
    call_id, accounts = _text(body, "call_id"), _accounts(body)
    amount = _number(body.get("amount"), "amount")
    lease_s = _number(body.get("lease_s"), "lease_s", positive=True)
    refusal = ledger.reserve(call_id, accounts, amount, lease_s)
    if refusal is None:
        return {"refusal": None}
    return {
        "refusal": {"key": refusal.key, "limit": refusal.limit, "spent": refusal.spent, "held": refusal.held}
    }


def _settle(ledger: Ledger, body: dict) -> dict:
    call_id, keys = _text(body, "call_id"), _texts(body, "keys")
    return {"spent": ledger.settle(call_id, keys, _number(body.get("amount"), "amount"))}


def _renew(ledger: Ledger, body: dict) -> dict:
    call_ids = _texts(body, "call_ids", _MAX_RENEW)  # one process renews all its calls at once
    return {"renewed": ledger.renew(call_ids, _number(body.get("lease_s"), "lease_s", positive=True))}


def _balances(ledger: Ledger, body: dict) -> dict:
    found = ledger.balances(_texts(body, "keys"))
    return {"balances": {key: {"spent": b.spent, "held": b.held} for key, b in found.items()}}


def ledger_routes(ledger: Ledger, authorized: Callable[[Request], bool]) -> list[Route]:
    """The four ledger routes over ``ledger``; ``authorized(request)`` checks the bearer token."""

    def endpoint(op: Callable[[Ledger, dict], dict]):
        async def handle(request: Request) -> Response:
            if not authorized(request):
                return JSONResponse(
                    {"error": "missing or wrong bearer token"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            try:
                raw = await read_capped(request, _MAX_BODY)
            except OtlpError:
                return JSONResponse(
                    {"error": f"body must be at most {_MAX_BODY} bytes"},
                    status_code=400,
                    headers={"Connection": "close"},
                )
            except ClientDisconnect:  # the client left mid-body: nothing to do, nobody to answer
                return Response(status_code=400)
            try:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    raise BadRequest(f"body must be a JSON object: {exc}") from None
                if not isinstance(body, dict):
                    raise BadRequest("body must be a JSON object")
                result = await run_in_threadpool(op, ledger, body)
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except LedgerUnavailable as exc:
                return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})
            return JSONResponse(result)

        return handle

    ops = {"reserve": _reserve, "settle": _settle, "renew": _renew, "balances": _balances}
    return [Route(f"{LEDGER_PATH}/{name}", endpoint(op), methods=["POST"]) for name, op in ops.items()]
