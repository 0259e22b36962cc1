"""A collector whose decode workers ran stops on SIGTERM without the resource tracker's
"leaked semaphore objects" warning (new-user finding 11): the pool and its queues' semaphores
are shut down and joined. (After ``kill -9`` no code of ours runs; the tracker then unlinks the
semaphores itself and says so, which is its job.)"""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request

import pytest
from _collector_helpers import collector_process


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.system
def test_sigterm_after_worker_decodes_leaks_no_semaphore(tmp_path, python):
    db = tmp_path / "c.duckdb"
    with collector_process(python, db, 0, "--allow-unauthenticated") as (process, base):
        # over 1 MiB: decoded in a worker; not protobuf, so the worker answers 400
        assert _post(f"{base}/v1/traces", os.urandom(2 << 20)) == 400
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "leaked semaphore" not in err, err
    assert not db.with_name(db.name + ".collector.token").exists()
