"""Fair intake against a real ``budgetlens collector`` subprocess and real sockets: stalled and
dripping uploads from one address, reconnecting as an attacker would, never take the in-flight
budget from the other clients; the byte budget charges bytes as they arrive and per client."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import requests
from _collector_helpers import collector_process

from benchmarks.ingest import make_body
from budgetlens.ingest.app import ByteBudget
from budgetlens.otlp import PROTOBUF

MIB = 1024 * 1024
ATTACKER = "127.0.0.2"  # another loopback address: the collector tells the clients apart by it


def test_one_clients_share_leaves_the_rest_of_the_budget_to_others():
    budget = ByteBudget(32 * MIB, 16 * MIB)
    assert budget.take(10 * MIB, "attacker") and budget.take(6 * MIB, "attacker")
    assert not budget.take(1, "attacker")  # its share is spent
    assert budget.take(15 * MIB, "honest")  # the other half is the others'
    assert not budget.take(2 * MIB, "third")  # the whole budget is spent
    budget.give(16 * MIB, "attacker")
    assert budget.by_client == {"honest": 15 * MIB} and budget.used == 15 * MIB
    assert budget.take(2 * MIB, "third")


def test_a_share_outside_one_byte_to_the_limit_is_refused():
    with pytest.raises(ValueError, match="per-client share"):
        ByteBudget(10, 11)


def _stall(host: str, port: int, drip: bool, stop: threading.Event, answers: list, slot: int = 0) -> None:
    """One attacker slot: declare a 16 MiB body, send nothing (or 1 MiB, then a byte a second),
    wait for the answer, reconnect; until ``stop``. Answers go to ``answers`` as
    ``(slot, status line)``."""
    while not stop.is_set():
        sock = socket.create_connection((host, port), source_address=(ATTACKER, 0))
        sock.settimeout(1.0)
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
            f"Content-Length: {16 * MIB}\r\n\r\n"
        ).encode()
        try:
            sock.sendall(head + (b"\n" * MIB if drip else b""))
            while not stop.is_set():
                try:
                    answer = sock.recv(64)
                except TimeoutError:
                    if drip:
                        sock.sendall(b"\n")
                    continue
                answers.append((slot, answer.split(b"\r\n")[0]))
                break
        except OSError:
            pass
        finally:
            sock.close()


def _honest(url: str, body: bytes, stop: threading.Event, statuses: list) -> None:
    while not stop.is_set():
        try:  # a generous timeout: the point is the status, not the speed of a loaded machine
            response = requests.post(
                f"{url}/v1/traces", data=body, headers={"Content-Type": PROTOBUF}, timeout=30
            )
        except requests.RequestException as error:
            statuses.append(type(error).__name__)
        else:
            statuses.append(response.status_code)


@pytest.mark.system
def test_twenty_stalled_uploads_without_a_token_leave_every_honest_client_served(tmp_path, python):
    with collector_process(python, tmp_path / "store.duckdb", 0) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        stop = threading.Event()
        answers: list = []
        statuses: list = []
        attackers = [
            threading.Thread(target=_stall, args=(host, int(port), i % 2 == 1, stop, answers, i))
            for i in range(20)
        ]
        for thread in attackers:
            thread.start()
        time.sleep(1.5)  # the attacker's uploads are in flight first
        honest = [
            threading.Thread(target=_honest, args=(url, make_body(i), stop, statuses)) for i in range(3)
        ]
        for thread in honest:
            thread.start()
        time.sleep(15)
        inflight = requests.get(f"{url}/healthz", timeout=5).json()["inflight_bytes"]
        stop.set()
        for thread in honest + attackers:
            thread.join(30)
    assert statuses and set(statuses) == {200}, statuses
    assert len(statuses) >= 6
    # Every upload that sends nothing is answered and dropped by the idle timeout (5 s) within
    # the window, then reconnects. 408 when its declared length fit the attacker's share as its
    # head was read; 503 (refused for the share, its body then read and dropped until it stalls)
    # when a dripping upload of the same address already held bytes: which comes first is the
    # scheduler's, so either status is right and neither is required.
    assert {status.split(b" ")[1] for _, status in answers} <= {b"408", b"503"}, answers[:5]
    assert {slot for slot, _ in answers} >= set(range(0, 20, 2)), answers
    assert inflight <= 32 * MIB


def _drop_mid_body(
    host: str, port: int, source: str, sent: int, path: str = "/v1/traces", kind: str = PROTOBUF
) -> None:
    """Declare a 2 MiB body to ``path`` from ``source``, send ``sent`` bytes of it and close the
    connection (an exporter giving up on its timeout, a dropped network)."""
    with socket.create_connection((host, port), source_address=(source, 0)) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {2 * MIB}\r\n\r\n"
        ).encode()
        sock.sendall(head + b"\n" * sent)
        time.sleep(0.2)  # the collector has read and charged what was sent


@pytest.mark.system
def test_uploads_dropped_mid_body_give_their_bytes_back(tmp_path, python):
    """Twenty uploads from one address each send 1 MiB of a 2 MiB body and close: 20 MiB, more
    than the address's 16 MiB share if a dropped body kept its bytes. Every byte comes back to
    the in-flight budget, the same address is then served, and nothing is logged as an error
    (nor for the read and ledger endpoints' JSON bodies dropped the same way)."""
    with collector_process(python, tmp_path / "store.duckdb", 0) as (process, url):
        host, port = url.removeprefix("http://").split(":")
        for _ in range(20):
            _drop_mid_body(host, int(port), "127.0.0.1", MIB)  # the address requests uses below
        for path in ("/v1/store/query", "/v1/ledger/reserve"):  # the JSON endpoints alike
            _drop_mid_body(host, int(port), "127.0.0.1", 1024, path, "application/json")
        for _ in range(50):  # the collector sees each close on its next read
            inflight = requests.get(f"{url}/healthz", timeout=5).json()["inflight_bytes"]
            if inflight == 0:
                break
            time.sleep(0.1)
        honest = requests.post(
            f"{url}/v1/traces", data=make_body(0), headers={"Content-Type": PROTOBUF}, timeout=60
        )
    assert inflight == 0
    assert honest.status_code == 200, honest.text
    assert "Exception in ASGI application" not in process.stderr.read()


def _trickle(host: str, port: int, source: str, results: dict) -> None:
    """Declare a 1 MiB body and send 1 KiB every 0.25 s (4 KiB/s, never pausing as long as the
    idle timeout) until answered; the answer goes to ``results[source]``."""
    with socket.create_connection((host, port), source_address=(source, 0)) as sock:
        sock.settimeout(0.25)
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: {PROTOBUF}\r\n"
            f"Content-Length: {MIB}\r\n\r\n"
        ).encode()
        sock.sendall(head)
        answer = b""
        for _ in range(400):  # 100 s at most: far past the rule's deadline
            try:
                piece = sock.recv(4096)
            except TimeoutError:
                if b"\r\n\r\n" in answer:
                    break  # answered: its body came with it or is not coming
                try:
                    sock.sendall(b"\n" * 1024)
                except OSError:
                    break
                continue
            if not piece:
                break  # closed by the collector (after its answer)
            answer += piece
        results[source] = answer


@pytest.mark.system
def test_bodies_trickling_below_the_minimum_rate_from_many_addresses_are_refused(tmp_path, python):
    """Eight addresses each trickle a body at 4 KiB/s, within the idle timeout and the (long)
    total one: the minimum rate (16 KiB/s after a 2 s grace) answers each 408 and closes it,
    while an honest client's body is stored."""
    args = ("--idle-timeout", "2", "--body-timeout", "120", "--min-body-rate-kib", "16")
    with collector_process(python, tmp_path / "store.duckdb", 0, *args) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        results: dict = {}
        sources = [f"127.0.0.{i}" for i in range(3, 11)]
        threads = [threading.Thread(target=_trickle, args=(host, int(port), s, results)) for s in sources]
        for thread in threads:
            thread.start()
        honest = requests.post(
            f"{url}/v1/traces", data=make_body(0), headers={"Content-Type": PROTOBUF}, timeout=60
        )
        for thread in threads:
            thread.join(120)
    assert honest.status_code == 200
    assert sorted(results) == sorted(sources)
    for source, answer in results.items():
        assert answer.startswith(b"HTTP/1.1 408"), (source, answer[:200])
        assert b"below the minimum of 16384 bytes/s" in answer, (source, answer[:300])


def test_a_negative_minimum_body_rate_is_refused_naming_the_field():
    from budgetlens.ingest.body_reader import BodyTimeouts

    with pytest.raises(ValueError, match="min_rate_bytes_s must be >= 0"):
        BodyTimeouts(30.0, 5.0, -1.0)
    with pytest.raises(ValueError, match="body_timeout_s and idle_timeout_s must be > 0"):
        BodyTimeouts(0.0, 5.0)
