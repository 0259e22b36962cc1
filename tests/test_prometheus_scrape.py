"""A real Prometheus server scrapes the collector; the hit-rate PromQL returns the expected value."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from conftest import find_free_port
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


def _query(base: str, promql: str):
    response = requests.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5)
    response.raise_for_status()
    return response.json()["data"]["result"]


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
        target = url.removeprefix("http://")
        (tmp_path / "alerts.yml").write_text(ALERT_RULES)
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - alerts.yml\n"
            f"scrape_configs:\n  - job_name: budgetlens\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        check = subprocess.run(
            ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        port = find_free_port()
        server = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        base = f"http://127.0.0.1:{port}"
        try:
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
        finally:
            server.terminate()
            server.wait(30)
