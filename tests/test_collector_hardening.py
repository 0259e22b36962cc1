"""The collector's smaller defences: tokens refused at start when no header could carry them and
compared as UTF-8 bytes, no unauthenticated start on a reachable address without saying so, exit
0 after a clean SIGTERM drain, and a quiet exit 0 after a Ctrl-C to the process group."""

from __future__ import annotations

import signal
import subprocess

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process, live_collector, otlp_protobuf

from budgetlens.cli.collector_cmd import _token, is_loopback
from budgetlens.ingest.app import create_app
from budgetlens.otlp import PROTOBUF


@pytest.mark.parametrize("token", [" secret", "secret ", "\tsecret\n"])
def test_a_token_with_surrounding_whitespace_is_refused_at_start(token, db_path):
    value, problem = _token(token)
    assert value is None and "whitespace" in problem
    with pytest.raises(ValueError, match="whitespace"):
        create_app(db_path, token=token)


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("collector.internal", False),
    ],
)
def test_only_loopback_binds_count_as_unreachable_from_other_machines(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.system
def test_a_reachable_bind_without_a_token_is_refused_unless_allowed(python, db_path):
    command = [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--host", "0.0.0.0"]
    refused = subprocess.run(command + ["--port", "0"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--allow-unauthenticated" in refused.stderr
    assert not db_path.exists()
    with collector_process(python, db_path, 0, "--host", "0.0.0.0", "--allow-unauthenticated") as (
        process,
        _,
    ):
        pass
    assert "warning: serving 0.0.0.0 without a token" in process.stderr.read()


@pytest.mark.system
def test_a_non_ascii_token_matches_when_sent_as_utf8(db_path, free_port):
    token = "pässwörd-ключ"
    recorder = SpanRecorder()
    recorder.guard_run("run-t", "triage", [("gpt-4o", 1, 1)])
    body = otlp_protobuf(recorder.spans())
    with live_collector(db_path, free_port, token=token) as live:

        def post(header: bytes) -> int:
            headers = {"Content-Type": PROTOBUF, "Authorization": header}
            return requests.post(f"{live.url}/v1/traces", data=body, headers=headers, timeout=30).status_code

        assert post(f"Bearer {token}".encode()) == 200
        assert post(f"bearer {token}".encode()) == 200
        assert post(b"Bearer " + token.encode("utf-8")[:-1]) == 401
        assert post(b"Bearer p\xe4ssw\xf6rd") == 401


@pytest.mark.system
def test_sigterm_after_a_clean_drain_exits_0(python, db_path):
    with collector_process(python, db_path, 0) as (process, url):
        assert requests.get(f"{url}/healthz", timeout=30).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


@pytest.mark.system
def test_ctrl_c_to_the_process_group_stops_the_collector_and_its_workers_quietly(python, db_path):
    """Issue 23: a Ctrl-C reaches every process of the terminal's group; the decode workers
    ignore it (no KeyboardInterrupt traceback from each), the collector drains and exits 0."""
    import os

    from benchmarks.ingest import make_body

    process = subprocess.Popen(
        [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        line = process.stdout.readline()
        assert "listening on" in line, line + process.stderr.read()
        url = line.rsplit(" ", 1)[1].strip()
        body = make_body(1) + make_body(2)  # concatenated requests merge: over 1 MiB, a worker's
        assert len(body) > 1024 * 1024
        response = requests.post(
            f"{url}/v1/traces", data=body, headers={"Content-Type": PROTOBUF}, timeout=60
        )
        assert response.status_code == 200
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert process.returncode == 0, stderr
