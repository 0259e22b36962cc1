"""Telemetry in one step (issue 24): a guarded agent with only the OpenTelemetry SDK's standard
environment reaches a real collector; ``budgetlens.configure()`` does the same in one call."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import pytest
from _collector_helpers import collector_process

from budgetlens.store import connect

pytestmark = pytest.mark.system

AGENT = textwrap.dedent(
    """
    import sys
    from budgetlens import RunBudget

    run = RunBudget(max_total_tokens=50_000, task_type="triage", run_id=sys.argv[1])
    run.before_turn()
    run.record({"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}, model="gpt-4o")
    print(run.finish().stop_reason)
    """
)
CONFIGURED_AGENT = textwrap.dedent(
    """
    import sys
    import budgetlens
    from budgetlens import RunBudget

    budgetlens.configure(endpoint=sys.argv[2], service_name="configured-agent")
    run = RunBudget(max_total_tokens=50_000, task_type="triage", run_id=sys.argv[1])
    run.before_turn()
    run.record({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}, model="gpt-4o")
    print(run.finish().stop_reason)
    """
)


def _stored_run(db, run_id: str, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists():
            with connect(db) as conn:
                row = conn.execute(
                    "SELECT service_name, total_tokens, stop_reason FROM runs WHERE run_id = ?", [run_id]
                ).fetchone()
            if row:
                return row
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} never reached the collector's store")


def _clean_env(**extra: str) -> dict[str, str]:
    """No OTEL_* or BUDGETLENS_* variable but the ones given."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BUDGETLENS_"))}
    return {**keep, **extra}


def test_a_guarded_agent_with_only_the_standard_otel_environment_reaches_the_collector(tmp_path, python):
    db = tmp_path / "store.duckdb"
    with collector_process(python, db) as (_, url):
        env = _clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=url,
            OTEL_SERVICE_NAME="env-agent",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
            OTEL_EXPORTER_OTLP_HEADERS="x-team=platform",
        )
        done = subprocess.run(
            [python, "-c", AGENT, "env-run-1"], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "completed"
        service, tokens, stop = _stored_run(db, "env-run-1")
    assert (service, tokens, stop) == ("env-agent", 1500, "completed")


def test_one_configure_call_sends_the_spans(tmp_path, python):
    db = tmp_path / "store.duckdb"
    with collector_process(python, db) as (_, url):
        done = subprocess.run(
            [python, "-c", CONFIGURED_AGENT, "configured-run-1", url],
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        service, tokens, _ = _stored_run(db, "configured-run-1")
    assert (service, tokens) == ("configured-agent", 120)


def test_without_the_endpoint_nothing_is_configured(monkeypatch):
    from budgetlens.guard import otel_setup

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setattr(otel_setup, "_auto_checked", False)
    assert otel_setup.auto_configure() is False
    assert otel_setup._traces_url("http://h:4318/") == "http://h:4318/v1/traces"
    assert otel_setup._traces_url("http://h:4318/v1/traces") == "http://h:4318/v1/traces"
