"""The shipped alert rules and Grafana dashboard (issue 24): promtool checks and unit-tests the
rules; the committed dashboard JSON is what the builder makes; against a real Prometheus scraping
a real collector every panel query returns data and the PromQL hit rate equals
``budgetlens hit-rate``."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process, run_cli
from _prometheus import prometheus_config, prometheus_server
from _prometheus import query as _query
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from budgetlens import semconv as sc
from budgetlens.ingest.metrics import TOKEN_BUCKETS

MONITORING = Path(__file__).resolve().parents[1] / "docs" / "monitoring"
RULES = MONITORING / "budgetlens-alerts.yml"
RULE_TESTS = MONITORING / "budgetlens-alerts.test.yml"
DASHBOARD = MONITORING / "budgetlens-grafana.json"
#: The hit rate since the collector started (raw counters: exact, no extrapolation).
HIT_RATE = (
    "sum by (task_type) (budgetlens_budget_hits_total) / sum by (task_type) (budgetlens_budgeted_runs_total)"
)


def test_the_hit_rate_alert_uses_the_products_alarm_line_and_minimum_sample():
    """BudgetlensHitRateHigh is the product's alarm (``split_alarms``): above HIT_RATE_ALARM
    with at least LOW_SAMPLE_RUNS budgeted finished runs; promtool's tests cover both sides."""
    import re

    import yaml

    from budgetlens.analysis.thresholds import HIT_RATE_ALARM, LOW_SAMPLE_RUNS

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alert = next(r for r in rules if r.get("alert") == "BudgetlensHitRateHigh")
    found = re.search(
        r"budgetlens:hit_rate:ratio_1h > ([0-9.]+)\s+and on \(task_type\) budgetlens:budgeted_runs:increase_1h >= (\d+)",
        alert["expr"],
    )
    assert found, alert["expr"]
    assert float(found.group(1)) == HIT_RATE_ALARM and int(found.group(2)) == LOW_SAMPLE_RUNS
    recorded = {r["record"]: r["expr"] for r in rules if "record" in r}
    assert "budgetlens_budgeted_runs_total[1h]" in recorded["budgetlens:budgeted_runs:increase_1h"]


def _builder():
    spec = importlib.util.spec_from_file_location("grafana_dashboard", MONITORING / "grafana_dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_grafana_dashboard_is_what_the_builder_makes():
    builder = _builder()
    assert DASHBOARD.read_text(encoding="utf-8") == builder.render()
    queries = builder.panel_queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 8 and all("budgetlens_" in q for q in queries)


@pytest.mark.system
@pytest.mark.prometheus
def test_promtool_checks_and_unit_tests_the_alert_rules():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by .ci/test (Debian package prometheus)"
    check = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=MONITORING,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    names = {
        "BudgetlensHitRateHigh",
        "BudgetlensSpendWindow80",
        "BudgetlensCollectorBacklog",
        "BudgetlensStoreErrors",
    }
    assert all(name in RULE_TESTS.read_text() for name in names)


def _runs() -> SpanRecorder:
    """Two task types: runs stopped by a budget, completed runs, and runs without any limit
    (which the hit rate leaves out: PromQL must too)."""
    recorder = SpanRecorder(service="triage-bot")
    plan = {
        "triage": [sc.STOP_COMPLETED, sc.STOP_BUDGET_TOKENS, sc.STOP_COMPLETED, sc.STOP_BUDGET_TURNS],
        "code_generation": [sc.STOP_COMPLETED, sc.STOP_COMPLETED, sc.STOP_BUDGET_TOKENS],
    }
    for task_type, stops in plan.items():
        for index, stop in enumerate(stops):
            recorder.guard_run(
                f"{task_type}-{index}", task_type, [("gpt-4o", 100 * (index + 1), 10)], stop_reason=stop
            )
        for index in range(3):  # no limit: not in the hit rate's denominator
            recorder.guard_run(
                f"{task_type}-free-{index}", task_type, [("gpt-4o", 50, 5)], limit_total_tokens=None
            )
    return recorder


@pytest.mark.system
@pytest.mark.prometheus
def test_promql_hit_rate_equals_the_cli_and_every_grafana_panel_returns_data(tmp_path, python):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is installed by .ci/test (Debian package prometheus)"
    db = tmp_path / "store.duckdb"
    queries = _builder().panel_queries(json.loads(DASHBOARD.read_text()))
    with collector_process(python, db) as (_, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
        assert exporter.export(_runs().spans()) == SpanExportResult.SUCCESS
        config = prometheus_config(tmp_path, url, RULES.read_text())
        with prometheus_server(prometheus, config) as base:
            promql, deadline = {}, time.monotonic() + 120
            while len(promql) < 2 and time.monotonic() < deadline:
                time.sleep(1)
                try:
                    promql = {r["metric"]["task_type"]: float(r["value"][1]) for r in _query(base, HIT_RATE)}
                except requests.RequestException:
                    promql = {}
            assert len(promql) == 2, f"Prometheus never returned the hit rate of both task types: {promql}"
            cli = run_cli(
                python, "hit-rate", "--db", str(db), "--window-days", "0", "--format", "json", timeout=300
            )
            assert cli.returncode == 0, cli.stderr
            expected = {row["task_type"]: row["hit_rate"] for row in json.loads(cli.stdout)}
            assert expected == pytest.approx({"triage": 0.5, "code_generation": 1 / 3}, rel=1e-5)
            assert promql == pytest.approx(expected, rel=1e-5)
            # every panel of the shipped Grafana dashboard returns data (increase needs 2 samples)
            empty, deadline = list(queries), time.monotonic() + 60
            while empty and time.monotonic() < deadline:
                time.sleep(1)
                empty = [q for q in empty if not _query(base, q)]
            assert not empty, f"panels without data: {empty}"
            # the histogram P95 is an estimate within the bucket of the exact P95 (the Baselines')
            baselines = run_cli(
                python, "baselines", "--db", str(db), "--window-days", "0", "--format", "json", timeout=300
            )
            assert baselines.returncode == 0, baselines.stderr
            exact = {row["task_type"]: row["p95_total_tokens"] for row in json.loads(baselines.stdout)}
            estimate = {
                r["metric"]["task_type"]: float(r["value"][1])
                for r in _query(
                    base, "histogram_quantile(0.95, sum by (task_type, le) (budgetlens_run_tokens_bucket))"
                )
            }
            assert set(estimate) == set(exact) == {"triage", "code_generation"}
            for task_type, value in exact.items():
                bucket = next(i for i, b in enumerate(TOKEN_BUCKETS) if value <= b)
                low = TOKEN_BUCKETS[bucket - 1] if bucket else 0.0
                assert low <= estimate[task_type] <= TOKEN_BUCKETS[bucket], (task_type, value, estimate)
            service = _query(base, "sum by (service) (budgetlens_budgeted_runs_total)")
            assert [r["metric"]["service"] for r in service] == ["triage-bot"]
