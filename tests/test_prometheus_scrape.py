"""A real Prometheus server scrapes the collector; the hit-rate PromQL returns the expected value."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from _prometheus import prometheus_config, prometheus_server
from _prometheus import query as _query
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens import semconv as sc

pytestmark = pytest.mark.prometheus

HIT_RATE = "sum(budgetlens_budget_hits_total) / sum(budgetlens_budgeted_runs_total)"
#: The alert rule the README shows (hit rate over 20 % for a task type, over 1 h).
ALERT_RULES = """\
groups:
  - name: budgetlens
    rules:
      - alert: BudgetHitRateHigh
        expr: |
          sum by (task_type) (increase(budgetlens_budget_hits_total[1h]))
            / sum by (task_type) (increase(budgetlens_budgeted_runs_total[1h])) > 0.20
        for: 15m
        labels:
          severity: warning
        annotations:
          summary: "Budget hit rate above 20 % for {{ $labels.task_type }}"
"""


def test_prometheus_scrapes_the_collector_and_computes_the_hit_rate(tmp_path, python):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is installed by .ci/test (Debian package prometheus)"
    stops = [
        sc.STOP_COMPLETED,
        sc.STOP_BUDGET_TOKENS,
        sc.STOP_COMPLETED,
        sc.STOP_COMPLETED,
        sc.STOP_BUDGET_TURNS,
    ]
    recorder = SpanRecorder()
    for index, stop in enumerate(stops):
        recorder.guard_run(f"run-{index}", "triage", [("gpt-4o", 100 * (index + 1), 10)], stop_reason=stop)
    expected = sum(stop in sc.BUDGET_STOP_REASONS for stop in stops) / len(stops)

    with collector_process(python, tmp_path / "store.duckdb") as (_, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
        assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
        config = prometheus_config(tmp_path, url, ALERT_RULES)
        check = subprocess.run(
            ["promtool", "check", "config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with prometheus_server(prometheus, config) as base:
            result, deadline = [], time.monotonic() + 90
            while not result and time.monotonic() < deadline:
                time.sleep(1)
                try:
                    result = _query(base, HIT_RATE)
                except requests.RequestException:
                    result = []
            assert result, "Prometheus never returned the hit rate"
            assert float(result[0]["value"][1]) == pytest.approx(expected)
            targets = requests.get(f"{base}/api/v1/targets", timeout=5).json()["data"]
            assert targets["activeTargets"][0]["health"] == "up"
            rules = requests.get(f"{base}/api/v1/rules", timeout=5).json()["data"]["groups"]
            assert rules[0]["rules"][0]["name"] == "BudgetHitRateHigh"
            assert rules[0]["rules"][0]["health"] in ("ok", "unknown")
