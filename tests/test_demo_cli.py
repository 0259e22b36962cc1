"""``budgetlens dashboard`` and ``budgetlens demo``: arguments, the streamlit command line, and
the demo end to end (sample store, a real collector an OTel exporter can send to at once, the
dashboard, Ctrl-C stopping both)."""

from __future__ import annotations

import argparse
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from budgetlens import config
from budgetlens import semconv as sc
from budgetlens.analysis import views as analysis
from budgetlens.cli import build_parser, dashboard_cmd
from budgetlens.cli.demo import METRICS_NOTE
from budgetlens.store import connect

pytestmark = pytest.mark.system

READY_S = 90


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "command, words",
    [
        ("dashboard", ["--db", "--port", "--host", "Overview", "read-only"]),
        ("demo", ["--db", "--port", "--collector-port", "OTEL_EXPORTER_OTLP_ENDPOINT", "Ctrl-C"]),
    ],
)
def test_help_explains_the_command(capsys, command, words):
    text = _help(capsys, command).replace("-\n", "-")  # argparse may wrap at a hyphen
    text = " ".join(text.split())
    missing = [word for word in words if word not in text]
    assert not missing, text


def _server_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"host": None, "port": None, **kw})


def test_dashboard_port_comes_from_flag_then_environment_then_default(monkeypatch):
    monkeypatch.delenv(config.ENV_DASHBOARD_PORT, raising=False)
    monkeypatch.delenv(config.ENV_DASHBOARD_HOST, raising=False)
    assert dashboard_cmd.resolve_server(_server_args()) == ("127.0.0.1", 8501)
    monkeypatch.setenv(config.ENV_DASHBOARD_PORT, "9000")
    monkeypatch.setenv(config.ENV_DASHBOARD_HOST, "0.0.0.0")
    assert dashboard_cmd.resolve_server(_server_args()) == ("0.0.0.0", 9000)
    assert dashboard_cmd.resolve_server(_server_args(port=9100, host="::1")) == ("::1", 9100)


@pytest.mark.parametrize(
    "value, message",
    [
        ("eighty", "dashboard port must be an integer, got 'eighty'"),
        ("70000", "dashboard port must be in 1..65535, got 70000"),
    ],
)
def test_a_bad_dashboard_port_is_named(monkeypatch, value, message):
    monkeypatch.setenv(config.ENV_DASHBOARD_PORT, value)
    with pytest.raises(ValueError, match=message):
        dashboard_cmd.resolve_server(_server_args())


def test_port_zero_is_a_free_port_for_the_demo_only(monkeypatch):
    monkeypatch.delenv(config.ENV_DASHBOARD_PORT, raising=False)
    assert dashboard_cmd.resolve_server(_server_args(port=0), free_port=True)[1] == 0
    with pytest.raises(ValueError, match="dashboard port must be in 1..65535, got 0"):
        dashboard_cmd.resolve_server(_server_args(port=0))


def test_streamlit_runs_the_entrypoint_headless_with_the_store_in_the_environment(tmp_path):
    argv, env = dashboard_cmd.streamlit_command(tmp_path / "x.duckdb", "127.0.0.1", 8765)
    assert argv[1:4] == ["-m", "streamlit", "run"]
    assert Path(argv[4]) == dashboard_cmd.ENTRYPOINT and dashboard_cmd.ENTRYPOINT.exists()
    options = dict(zip(argv[5::2], argv[6::2]))
    assert options["--server.port"] == "8765"
    assert options["--server.headless"] == "true"
    assert options["--browser.gatherUsageStats"] == "false"
    assert env[config.ENV_DB] == str((tmp_path / "x.duckdb").resolve())


def _lines(process) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _addresses(lines: queue.Queue, process) -> dict[str, str]:
    found, deadline = {}, time.monotonic() + READY_S
    while len(found) < 3:
        assert process.poll() is None, f"demo exited with {process.returncode}"
        assert time.monotonic() < deadline, f"demo printed no addresses: {found}"
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        for label in ("Dashboard:", "Collector:"):
            if line.strip().startswith(label):
                found[label.rstrip(":").lower()] = line.split(label, 1)[1].split()[0]
        if line.strip().startswith("/metrics"):
            found["metrics_note"] = line.strip()
    return found


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def _send_run(endpoint: str, run_id: str) -> None:
    """Send one agent run through the real OTel SDK and OTLP/HTTP exporter to ``endpoint``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "demo-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("tests.demo")
    with tracer.start_as_current_span("invoke_agent demo_task") as run:
        run.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
                sc.BUDGET_RUN_ID: run_id,
                sc.BUDGET_TASK_TYPE: "demo_task",
                sc.BUDGET_LIMIT_TOTAL_TOKENS: 10_000,
            }
        )
        with tracer.start_as_current_span("chat gpt-4.1-mini", kind=SpanKind.CLIENT) as call:
            call.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                    sc.GEN_AI_PROVIDER_NAME: "openai",
                    sc.GEN_AI_REQUEST_MODEL: "gpt-4.1-mini",
                    sc.GEN_AI_USAGE_INPUT_TOKENS: 1200,
                    sc.GEN_AI_USAGE_OUTPUT_TOKENS: 300,
                    sc.BUDGET_RUN_ID: run_id,
                    sc.BUDGET_TASK_TYPE: "demo_task",
                    sc.BUDGET_TURN: 1,
                }
            )
        run.set_attributes({sc.BUDGET_STOP_REASON: sc.STOP_COMPLETED, sc.BUDGET_TURNS: 1})
    provider.shutdown()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_demo_serves_the_sample_and_a_collector_an_agent_can_send_to(tmp_path):
    # --port 0 and --collector-port 0: both pick a free port and print it
    db = tmp_path / "demo.duckdb"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetlens.cli",
            "demo",
            "--db",
            str(db),
            "--port",
            "0",
            "--collector-port",
            "0",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # as a shell's `budgetlens demo &` starts it: SIGINT ignored; `kill -INT` still stops it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        found = _addresses(_lines(process), process)
        free_port = int(found["dashboard"].rsplit(":", 1)[1])
        assert found["dashboard"] == f"http://127.0.0.1:{free_port}" and free_port > 0
        # the sample is in the store, not in the collector's counters: the demo says so
        assert found["metrics_note"] == METRICS_NOTE
        assert _get(found["dashboard"] + "/_stcore/health") == (200, b"ok")
        assert _get(found["collector"] + "/healthz")[0] == 200
        with connect(db) as conn:
            sample_runs = analysis.data_extent(conn)[2]
        assert sample_runs > 1000  # the committed sample was loaded

        _send_run(found["collector"], "demo-run-0001")
        deadline = time.monotonic() + 10  # acknowledged = journaled; in DuckDB within ~1 s
        while True:
            with connect(db) as conn:
                detail = analysis.run_detail(conn, "demo-run-0001")
                total = analysis.data_extent(conn)[2]
            if detail is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert detail is not None and detail.run["total_tokens"] == 1500
        assert total == sample_runs + 1

        collector_port = int(found["collector"].rsplit(":", 1)[1])
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert not _port_open(free_port) and not _port_open(collector_port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _demo_on_port(tmp_path, port: int) -> subprocess.CompletedProcess:
    """``budgetlens demo`` with its dashboard on ``port`` and store ``tmp_path/d.duckdb`` (run in a
    subprocess, output captured)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetlens.cli",
            "demo",
            "--db",
            str(tmp_path / "d.duckdb"),
            "--port",
            str(port),
            "--collector-port",
            "0",
            "--ready-timeout",
            "60",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_stops_the_collector_and_says_why_when_the_dashboard_port_is_taken(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _demo_on_port(tmp_path, port)
    assert result.returncode == 1
    assert f"the dashboard did not start on 127.0.0.1:{port}: the port is in use" in result.stderr
    assert not (tmp_path / "d.duckdb").exists()  # failed before building the store (issue 24)


def test_another_dashboard_answering_on_the_port_is_not_taken_for_the_demos_own(tmp_path):
    """A second demo must not print its banner because the first demo's dashboard answered."""
    import http.server

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    try:
        result = _demo_on_port(tmp_path, port)
    finally:
        other.shutdown()
        other.server_close()
    assert result.returncode == 1
    assert "Dashboard:" not in result.stdout  # no banner pointing at someone else's server
    assert f"the dashboard did not start on 127.0.0.1:{port}: the port is in use" in result.stderr


def _dashboard(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "budgetlens.cli", "dashboard", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dashboard_fails_naming_the_port_before_printing_an_address_when_it_is_taken(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _dashboard(tmp_path, "--db", str(tmp_path / "none.duckdb"), "--port", str(port))
    assert result.returncode == 1
    assert "http://" not in result.stdout  # no address that is not ours
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and f"port {port} is in use" in lines[0]


@pytest.mark.parametrize("content", [b"run_id,task_type\nr1,qa\n", b"\x00" * 4096])
def test_dashboard_refuses_a_file_that_is_not_a_duckdb_store_in_one_line(tmp_path, free_port, content):
    path = tmp_path / "runs.csv"
    path.write_bytes(content)
    result = _dashboard(tmp_path, "--db", str(path), "--port", str(free_port))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a budgetlens store" in lines[0] and str(path) in lines[0]
