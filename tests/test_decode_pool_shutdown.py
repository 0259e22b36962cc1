"""A collector whose decode workers ran stops on SIGTERM without the resource tracker's
"leaked semaphore objects" warning (new-user finding 11): the pool and its queues' semaphores
are shut down and joined. (After ``kill -9`` no code of ours runs; the tracker then unlinks the
semaphores itself and says so, which is its job.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.system
def test_sigterm_after_worker_decodes_leaks_no_semaphore(tmp_path, free_port):
    db = tmp_path / "c.duckdb"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "budgetlens.cli",
            "collector",
            "--db",
            str(db),
            "--port",
            str(free_port),
            "--allow-unauthenticated",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{free_port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1).close()
                break
            except OSError:
                time.sleep(0.25)
        else:
            pytest.fail("the collector did not start")
        # over 1 MiB: decoded in a worker; not protobuf, so the worker answers 400
        assert _post(f"{base}/v1/traces", os.urandom(2 << 20)) == 400
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "leaked semaphore" not in err, err
    assert not db.with_name(db.name + ".collector.token").exists()
