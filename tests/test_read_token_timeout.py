"""The collector's read endpoint (whole-store SQL) has its own token (``--read-token``,
defaulting to the ingest token) and stops a statement past ``--read-timeout`` (504), so four
slow queries cannot hold every read slot: a real collector subprocess."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from _collector_helpers import collector_process

from budgetlens.config import ENV_COLLECTOR_READ_TOKEN

pytestmark = pytest.mark.system

SLOW = "select count(*) from range(12000000000)"


def _query(url: str, token: str, sql: str = "SELECT 1 AS one") -> requests.Response:
    return requests.post(
        f"{url}/v1/store/query", json={"sql": sql}, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )


def _runs(python: str, db_path) -> subprocess.CompletedProcess:
    """``budgetlens runs`` on the (empty) store: it read through the collector when it says
    the store has no runs yet."""
    return subprocess.run(
        [python, "-m", "budgetlens.cli", "runs", "--db", str(db_path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_read_endpoint_takes_the_read_token_not_the_ingest_token(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path, 0, "--token", "ingest-secret", "--read-token", "read-secret") as (
        _,
        url,
    ):
        assert _query(url, "ingest-secret").status_code == 401
        assert _query(url, "read-secret").status_code == 200
        sent = requests.post(
            f"{url}/v1/traces",
            data=b"",
            headers={"Authorization": "Bearer read-secret", "Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert sent.status_code == 401  # the read token does not write
        local = _runs(python, db_path)  # local readers find the read token next to the store
        assert "the store has no runs yet" in local.stderr, local.stderr


def test_the_read_token_defaults_to_the_ingest_token(tmp_path, python, monkeypatch):
    monkeypatch.delenv(ENV_COLLECTOR_READ_TOKEN, raising=False)
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path, 0, "--token", "one-secret") as (_, url):
        assert _query(url, "one-secret").status_code == 200


def test_the_read_token_from_the_environment(tmp_path, python, monkeypatch):
    monkeypatch.setenv(ENV_COLLECTOR_READ_TOKEN, "env-read")
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path, 0, "--token", "ingest-secret") as (_, url):
        assert _query(url, "env-read").status_code == 200
        assert _query(url, "ingest-secret").status_code == 401


def test_one_token_for_both_on_a_network_bind_is_warned_about(tmp_path, python, monkeypatch, free_port):
    monkeypatch.delenv(ENV_COLLECTOR_READ_TOKEN, raising=False)
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path, free_port, "--host", "0.0.0.0", "--token", "same") as (
        process,
        _,
    ):
        pass
    warning = process.stderr.read()
    assert "warning: the ingest token also reads the whole store" in warning
    assert "--read-token" in warning


def test_slow_queries_are_stopped_and_the_cli_is_answered(tmp_path, python):
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path, 0, "--read-token", "r", "--read-timeout", "1") as (_, url):
        with ThreadPoolExecutor(4) as pool:
            slow = [pool.submit(_query, url, "r", SLOW) for _ in range(4)]
            runs = _runs(python, db_path)  # waits for a slot: freed once a slow query is stopped
            answers = [future.result() for future in slow]
        assert [a.status_code for a in answers] == [504] * 4
        reason = answers[0].json()["error"]
        assert (
            reason
            == "the query ran past the read timeout of 1 s and was stopped (the collector's --read-timeout)"
        )
        assert "the store has no runs yet" in runs.stderr, runs.stderr
        assert _query(url, "r").status_code == 200  # the slots are free again
