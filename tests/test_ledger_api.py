"""The collector's ledger endpoint (``budgetlens.ingest.ledger_api``), called as an ASGI app."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from budgetlens.guard.ledgers.local import SqliteLedger
from budgetlens.ingest.ledger_api import ledger_path, ledger_routes

TOKEN = {"Authorization": "Bearer t0ken"}


@pytest.fixture
def client() -> TestClient:
    app = Starlette(
        routes=ledger_routes(
            SqliteLedger(), lambda r: r.headers.get("authorization") == TOKEN["Authorization"]
        )
    )
    return TestClient(app)


def post(client, op, body, headers=TOKEN):
    return client.post(f"/v1/ledger/{op}", json=body, headers=headers)


def test_reserve_settle_and_balances_round_trip(client):
    accounts = [["spend:daily|*", 1.0]]
    assert post(
        client, "reserve", {"call_id": "a", "accounts": accounts, "amount": 0.6, "lease_s": 30}
    ).json() == {"refusal": None}
    refused = post(client, "reserve", {"call_id": "b", "accounts": accounts, "amount": 0.6, "lease_s": 30})
    assert refused.json()["refusal"] == {"key": "spend:daily|*", "limit": 1.0, "spent": 0.0, "held": 0.6}
    assert post(client, "renew", {"call_ids": ["a"], "lease_s": 30}).json() == {"renewed": 1}
    settled = {"call_id": "a", "keys": ["spend:daily|*"], "amount": 0.5}
    assert post(client, "settle", settled).json() == {"spent": {"spend:daily|*": 0.5}}
    assert post(client, "settle", settled).json() == {"spent": None}  # a retry: charged once
    assert post(client, "balances", {"keys": ["spend:daily|*"]}).json() == {
        "balances": {"spend:daily|*": {"spent": 0.5, "held": 0.0}}
    }


def test_a_missing_or_wrong_token_is_401(client):
    assert post(client, "balances", {"keys": []}, headers={}).status_code == 401
    answer = post(client, "balances", {"keys": []}, headers={"Authorization": "Bearer nope"})
    assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "op, body, rule",
    [
        (
            "reserve",
            {"accounts": [["k", 1]], "amount": 1, "lease_s": 1},
            "call_id must be a non-empty string",
        ),
        (
            "reserve",
            {"call_id": "a", "accounts": [], "amount": 1, "lease_s": 1},
            "accounts must be a list of 1 to",
        ),
        (
            "reserve",
            {"call_id": "a", "accounts": [["k"]], "amount": 1, "lease_s": 1},
            "accounts[0] must be a [key, limit]",
        ),
        (
            "reserve",
            {"call_id": "a", "accounts": [["k", 1]], "amount": -1, "lease_s": 1},
            "amount must be >= 0",
        ),
        (
            "reserve",
            {"call_id": "a", "accounts": [["k", 1]], "amount": 1, "lease_s": 0},
            "lease_s must be > 0",
        ),
        (
            "reserve",
            {"call_id": "a", "accounts": [["k", True]], "amount": 1, "lease_s": 1},
            "accounts[0] limit must be a finite",
        ),
        ("settle", {"call_id": "a", "keys": "k", "amount": 1}, "keys must be a list"),
        ("settle", {"call_id": "a", "keys": ["k", ""], "amount": 1}, "keys[1] must be a non-empty string"),
        ("renew", {"call_ids": ["a"]}, "lease_s must be a finite number"),
        ("balances", [], "body must be a JSON object"),
    ],
)
def test_a_malformed_body_is_400_naming_the_field(client, op, body, rule):
    answer = post(client, op, body)
    assert answer.status_code == 400 and rule in answer.json()["error"]


def test_a_body_that_is_not_json_is_400(client):
    answer = client.post("/v1/ledger/settle", content=b"{nope", headers=TOKEN)
    assert answer.status_code == 400 and "body must be a JSON object" in answer.json()["error"]


def test_the_collectors_ledger_file_sits_beside_its_journal(tmp_path):
    assert ledger_path(tmp_path / "budgetlens.duckdb") == tmp_path / "budgetlens.duckdb.ledger.sqlite3"
