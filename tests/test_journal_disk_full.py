"""A journal that cannot be written (disk full) is named in the 503 and in ``/healthz``, never
an "ok" beside refused requests (breaker finding F4). The disk fills for real: the collector
subprocess runs under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored), so its journal writes
fail with EFBIG as they would with ENOSPC."""

from __future__ import annotations

import errno
import resource
import signal
import subprocess

import httpx
import pytest

from budgetlens.ingest.health import health, journal_failure
from tests._collector_helpers import SpanRecorder, otlp_protobuf
from tests.test_health import _Ingest

_LIMIT_BYTES = 3 * 1024 * 1024


def test_a_journal_failure_is_503_with_its_errno_and_no_path():
    reason = journal_failure(OSError(errno.ENOSPC, "No space left on device", "/secret/place.seg"))
    assert reason == "OSError ENOSPC (No space left on device)"
    body, status = health(_Ingest(), journal_error=reason)
    assert status == 503 and body["status"] == f"journal unavailable: {reason}"
    assert body["journal_error"] == reason
    assert health(_Ingest())[0]["journal_error"] is None


def _small_disk():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (_LIMIT_BYTES, _LIMIT_BYTES))


@pytest.mark.system  # reason: a real collector subprocess writes its journal until the limit
def test_a_full_journal_is_named_in_the_answer_and_in_healthz(tmp_path, python):
    process = subprocess.Popen(
        [python, "-m", "budgetlens.cli", "collector", "--db", str(tmp_path / "s.duckdb"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=_small_disk,
    )
    try:
        url = process.stdout.readline().rsplit(" ", 1)[1].strip()
        recorder = SpanRecorder(service="s" * 200)
        refused = None
        with httpx.Client(timeout=60) as client:
            for batch in range(60):
                recorder.memory.clear()
                body = otlp_protobuf(recorder.chat_calls(200, first_input_tokens=batch * 1000))
                answer = client.post(
                    f"{url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
                )
                if answer.status_code == 503:
                    refused = answer
                    break
                assert answer.status_code == 200
            assert refused is not None, "the journal never filled"
            health_answer = client.get(f"{url}/healthz")
        assert b"journal unavailable: OSError EFBIG (File too large)" in refused.content
        assert health_answer.status_code == 503
        assert health_answer.json()["status"] == "journal unavailable: OSError EFBIG (File too large)"
    finally:
        process.kill()
        process.wait(30)
