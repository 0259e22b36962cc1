"""``budgetlens demo``: sample store + collector + dashboard, one command, Ctrl-C stops both."""

from __future__ import annotations

import argparse
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from budgetlens import config
from budgetlens.cli._common import add_command
from budgetlens.cli.dashboard_cmd import (
    add_server_arguments,
    port_in_use,
    resolve_server,
    streamlit_command,
    url,
)

DEFAULT_COLLECTOR_PORT = 4318
#: The demo's one line on /metrics: its counters count what the collector receives from now on.
METRICS_NOTE = (
    "/metrics counts only runs the collector receives from now on (the sample is in the store, "
    "not in the counters): send runs to see series, e.g. python tests/examples/openai_loop.py"
)
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0

DESCRIPTION = """\
Try budgetlens in one command.

- Builds the store from the committed sample (sample_data/, 14 days of agent
  runs, moved in time to end now) when the store is missing or empty.
- Starts the OTLP/HTTP collector on that store (budgetlens collector) and the
  dashboard (budgetlens dashboard), and prints both addresses.
- Open the dashboard in a browser; point an agent at the collector with
  OTEL_EXPORTER_OTLP_ENDPOINT. New runs show in the dashboard once you turn
  on Auto-refresh in its sidebar (off by default).

Ctrl-C stops both.
"""


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "demo",
        help="sample store + collector + dashboard in one command",
        description=DESCRIPTION,
    )
    add_server_arguments(parser, free_port=True)
    parser.add_argument(
        "--collector-port",
        type=int,
        default=DEFAULT_COLLECTOR_PORT,
        help=f"collector port (default {DEFAULT_COLLECTOR_PORT}, the OTLP/HTTP port; 0 = a free one)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=READY_TIMEOUT_S,
        help=f"seconds to wait for both servers to answer (default {READY_TIMEOUT_S:.0f})",
    )
    parser.set_defaults(func=run)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host if host not in ("0.0.0.0", "") else "127.0.0.1", 0))
        return sock.getsockname()[1]


#: Kept for callers of the old private name; ``dashboard_cmd.port_in_use`` is the one check.
_port_in_use = port_in_use


def _answers(address: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _read_lines(stream, sink: queue.Queue) -> None:
    for line in stream:
        sink.put(line.rstrip("\n"))
    sink.put(None)


def _start_collector(db: Path | str, host: str, port: int, deadline: float):
    """Start ``budgetlens collector``; return (process, endpoint) once it listens."""
    argv = [
        sys.executable,
        "-m",
        "budgetlens.cli",
        "collector",
        "--db",
        str(db),
        "--host",
        host,
        "--port",
        str(port),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, bufsize=1)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if line is None:
            break
        if "listening on " in line:
            return process, line.split("listening on ", 1)[1].split()[0]
    _stop([process])
    raise RuntimeError(
        f"the collector did not start on {host}:{port} (exit code {process.poll()}); is the port in use?"
    )


#: Seconds the dashboard must stay up after its first answer: a Streamlit that lost the race
#: for the port exits within this time, while another server on the port keeps answering.
SETTLE_S = 1.0


def _start_dashboard(db: Path | str, host: str, port: int, deadline: float):
    """Start ``budgetlens dashboard``; return the process once *it* answers its health check.

    Raises RuntimeError naming the dashboard and the port when the port is already taken (by
    another demo, say: its answer must not pass for ours) or the process exits or stays silent.
    """
    if port_in_use(host, port):
        raise RuntimeError(
            f"the dashboard did not start on {host}:{port}: the port is in use "
            "(another dashboard or demo?); pick another with --port"
        )
    argv, env = streamlit_command(db, host, port)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    health = url("127.0.0.1" if host in ("0.0.0.0", "") else host, port) + "/_stcore/health"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _answers(health):
            time.sleep(SETTLE_S)
            if process.poll() is None:
                return process
            break
        time.sleep(0.25)
    _stop([process])
    raise RuntimeError(
        f"the dashboard did not start on {host}:{port} (exit code {process.poll()}); is the port in use?"
    )


def _stop(processes) -> None:
    """SIGTERM each live process, wait, then SIGKILL what is left."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _remove_sidecars(db: Path, collector: subprocess.Popen) -> None:
    """Remove the collector's address and token files beside ``db`` when it did not stop
    cleanly (killed after ``STOP_TIMEOUT_S``, or it crashed): a collector that stops cleanly
    removes them itself. The store, its journal and the spend ledger stay (they are kept across
    restarts); ``.gitignore`` covers them all."""
    from budgetlens.store.readers import sidecar_paths

    if collector.returncode == 0:
        return
    for path in sidecar_paths(db):
        path.unlink(missing_ok=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from budgetlens.sample import ensure_demo_store

    db = config.resolve_db_path(args.db)
    db = db.resolve() if isinstance(db, Path) else db
    host, port = resolve_server(args, free_port=True)
    port = port or _free_port(host)  # --port 0: a free one, printed below with the collector's
    for name, number, flag in (
        ("collector", args.collector_port, "--collector-port"),
        ("dashboard", port, "--port"),
    ):
        if number and port_in_use(host, number):  # before building the store: known now
            print(
                f"budgetlens demo: error: the {name} did not start on {host}:{number}: the port is "
                f"in use (nothing was built; pick another with {flag})",
                file=sys.stderr,
            )
            return 1
    if ensure_demo_store(db):
        print(f"budgetlens demo: loaded the committed sample (14 days ending now) into {db}", flush=True)
    else:
        print(f"budgetlens demo: using the runs already in {db}", flush=True)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # a shell starting the demo in the background (`budgetlens demo &`) ignores SIGINT in it:
    # `kill -INT` stops it as Ctrl-C does
    signal.signal(signal.SIGINT, _raise_interrupt)
    processes: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + args.ready_timeout
        collector, endpoint = _start_collector(db, host, args.collector_port, deadline)
        processes.append(collector)
        dashboard = _start_dashboard(db, host, port, deadline)
        processes.append(dashboard)
        names = {id(collector): "collector", id(dashboard): "dashboard"}
        print(
            f"\n  Dashboard:  {url(host, port)}\n"
            f"  Collector:  {endpoint}   (POST /v1/traces, GET /metrics, GET /healthz)\n"
            f"  Point an agent at it:  export OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}\n"
            f"  Store:      {db}\n"
            f"  {METRICS_NOTE}\n"
            "  Turn on Auto-refresh in the sidebar to watch new runs arrive. Ctrl-C stops both.\n",
            flush=True,
        )
        while all(p.poll() is None for p in processes):
            time.sleep(0.5)
        dead = [p for p in processes if p.poll() is not None]
        print(
            f"budgetlens demo: the {names[id(dead[0])]} exited (code {dead[0].returncode}); stopping",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("budgetlens demo: stopping the collector and the dashboard", flush=True)
        return 0
    except RuntimeError as error:
        print(f"budgetlens demo: error: {error}", file=sys.stderr)
        return 1
    finally:
        _stop(processes)
        if processes and isinstance(db, Path):
            _remove_sidecars(db, processes[0])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
