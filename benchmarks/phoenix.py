"""Arize Phoenix as the ingest benchmark's reference: persisted spans/s for the same bodies.

Phoenix is not a dependency: it runs from a separate virtualenv whose interpreter is given by
``--phoenix-python`` or ``$BUDGETLENS_BENCH_PHOENIX_PYTHON`` (``python -m venv /tmp/phoenix &&
/tmp/phoenix/bin/pip install arize-phoenix``). ``phoenix_python`` says why the column is skipped
when it is not usable. ``persisted_spans_per_s`` starts ``phoenix serve`` on a free port with a
fresh working directory (its SQLite database there), posts the bodies to its OTLP/HTTP endpoint
with ``clients`` keep-alive clients, and counts the rows of its ``spans`` table until all are
persisted or the wait ends (the rate then comes from the partial count).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests

#: The interpreter of a virtualenv with ``arize-phoenix`` installed.
ENV_PHOENIX_PYTHON = "BUDGETLENS_BENCH_PHOENIX_PYTHON"
#: Seconds after the first post the persisted spans are counted for, at most.
DEFAULT_WAIT_S = 120.0


def post_bodies(url: str, bodies: list[bytes], clients: int) -> list[int]:
    """POST each OTLP protobuf body to ``url``/v1/traces, spread over ``clients`` concurrent
    keep-alive sessions (threads); returns the status codes of the answers other than 200."""
    failures: list[int] = []

    def client(share: list[bytes]) -> None:
        session = requests.Session()
        for body in share:
            response = session.post(
                f"{url}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
            )
            if response.status_code != 200:
                failures.append(response.status_code)

    threads = [threading.Thread(target=client, args=(bodies[i::clients],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def phoenix_python(given: str | None) -> tuple[str | None, str]:
    """(interpreter, "") when ``given`` (else ``$BUDGETLENS_BENCH_PHOENIX_PYTHON``) imports
    ``phoenix``; (None, the reason) otherwise."""
    python = given or os.environ.get(ENV_PHOENIX_PYTHON)
    if not python:
        return None, f"no Phoenix interpreter given (--phoenix-python or ${ENV_PHOENIX_PYTHON})"
    try:
        probe = subprocess.run(
            [python, "-c", "import phoenix; print(phoenix.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except OSError as error:
        return None, f"{python}: cannot run: {error}"
    if probe.returncode != 0:
        return None, f"{python}: `import phoenix` failed: {probe.stderr.strip().splitlines()[-1:]}"
    return python, ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _count_spans(database: Path) -> int:
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT count(*) FROM spans").fetchone()[0])
    except sqlite3.Error:
        return 0


def persisted_spans_per_s(
    python: str, bodies: list[bytes], spans: int, clients: int = 4, wait_s: float = DEFAULT_WAIT_S
) -> dict:
    """Post ``bodies`` (``spans`` spans in all) to a fresh Phoenix; persisted spans/s and
    acknowledged spans/s. The persisted rate is the rows of its ``spans`` table over the time
    from the first post until it holds them all or ``wait_s`` seconds have passed, whichever
    comes first: from the partial count when Phoenix is still behind (``persisted`` says how
    many of ``spans``; a slow machine persisted 21,607 of 40,000 within 120 s). Raises
    RuntimeError when Phoenix does not start, refuses requests or persists none."""
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": tmp,
            "PHOENIX_PORT": str(port),
            "PHOENIX_HOST": "127.0.0.1",
        }
        process = subprocess.Popen(
            [python, "-m", "phoenix.server.main", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Phoenix did not start: {process.stderr.read()[-500:]!r}")
                time.sleep(0.5)
            started = time.perf_counter()
            failures = post_bodies(url, bodies, clients)
            acknowledged = time.perf_counter() - started
            database = Path(tmp) / "phoenix.db"
            deadline = time.monotonic() + wait_s
            persisted_spans = _count_spans(database)
            while persisted_spans < spans and time.monotonic() < deadline:
                time.sleep(0.2)
                persisted_spans = _count_spans(database)
            persisted = time.perf_counter() - started
        finally:
            process.terminate()
            process.wait(60)
    if failures:
        raise RuntimeError(f"Phoenix refused {len(failures)} requests: {sorted(set(failures))}")
    if not persisted_spans:
        raise RuntimeError(f"Phoenix persisted none of {spans} spans within {wait_s:g} s")
    return {
        "spans_per_s": persisted_spans / persisted,
        "acknowledged_spans_per_s": spans / acknowledged,
        "persisted": persisted_spans,
        "spans": spans,
    }
