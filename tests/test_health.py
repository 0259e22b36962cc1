"""A health check that tells the truth (issue 24): a store the collector cannot write is refused
at start in one line, and ``/healthz`` answers 503 with the reason while loads fail."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import duckdb
import pytest

from budgetlens.ingest.app import health
from budgetlens.store import StoreError


@dataclass
class _Ingest:
    """The parts of ``IngestQueue`` that ``health`` reads."""

    error: BaseException | None = None
    alive: bool = True
    depth: int = 40
    backlog_bytes: int = 1_000
    max_journal_bytes: int = 4_000
    lag_s: float = 10.0

    @property
    def store_error(self):
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"


def test_health_is_ok_with_no_store_error():
    body, status = health(_Ingest())
    assert status == 200 and body["status"] == "ok" and body["refused_in_s"] is None
    assert body["journal_used_pct"] == 25.0


def test_a_store_that_cannot_be_written_is_503_with_the_reason_and_when_intake_stops():
    body, status = health(_Ingest(error=StoreError("x.duckdb: not a valid DuckDB database file")))
    assert status == 503 and body["status"].startswith("store unavailable: StoreError: x.duckdb")
    # 1,000 bytes in 10 s; 3,000 bytes free -> refused in 30 s at that rate
    assert body["refused_in_s"] == 30.0


def test_another_process_holding_the_file_is_503_too_while_the_journal_absorbs_it():
    # nothing new becomes queryable meanwhile: the status never says ok beside a store error
    lock = StoreError("x.duckdb: still locked by another process after 2 s")
    lock.__cause__ = duckdb.IOException("Could not set lock on file x.duckdb")
    body, status = health(_Ingest(error=lock))
    assert status == 503 and body["status"] == f"store unavailable: {body['store_error']}"
    assert body["store_error"].startswith("StoreError: x.duckdb: still locked")


def test_a_stopped_writer_is_503():
    assert health(_Ingest(alive=False))[1] == 503


@pytest.mark.system
def test_collector_refuses_a_store_that_is_not_duckdb_in_one_line(tmp_path):
    store = tmp_path / "notdb.duckdb"
    store.write_text("not a database\n")
    done = subprocess.run(
        [sys.executable, "-m", "budgetlens.cli", "collector", "--db", str(store), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot start" in lines[0] and "not a valid DuckDB database" in lines[0]
