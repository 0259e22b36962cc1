"""Acceptance: a stock OTel exporter's spans, sent to `budgetlens collector`, become runs that
`budgetlens baselines` reports correctly (guard runs and foreign any-agent traces alike)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from _collector_helpers import SpanRecorder, anyagent_spans, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

pytestmark = pytest.mark.system


def _baselines(python, db_path) -> dict:
    """All runs (the any-agent traces date from 2025, the guard runs from now)."""
    out = subprocess.run(
        [
            python,
            "-m",
            "budgetlens.cli",
            "baselines",
            "--db",
            str(db_path),
            "--format",
            "json",
            "--window-days",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return {row["task_type"]: row for row in json.loads(out.stdout)}


def test_stock_exporter_spans_become_runs_that_baselines_report(tmp_path, python, realdata):
    db_path = tmp_path / "store.duckdb"
    recorder = SpanRecorder()
    totals = []
    for index in range(24):
        calls = [("gpt-4o-mini", 500 + 137 * index, 40 + index)] * (1 + index % 3)
        recorder.guard_run(f"run-{index}", "code-review", calls, tools=index % 4)
        totals.append(sum(inp + out for _, inp, out in calls))
    frameworks = sorted((realdata / "any-agent-genai-spans").glob("*_trace.json"))
    with collector_process(python, db_path) as (process, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
        assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
        for path in frameworks:
            assert exporter.export(anyagent_spans(path)) == SpanExportResult.SUCCESS
    baselines = _baselines(python, db_path)
    review = baselines["code-review"]
    assert review["n"] == len(totals) and review["low_sample"] is False
    assert review["p50_total_tokens"] == pytest.approx(np.percentile(totals, 50))
    assert review["p95_total_tokens"] == pytest.approx(np.percentile(totals, 95))
    assert review["max_total_tokens"] == max(totals)
    foreign_totals = []
    for path in frameworks:
        spans = json.loads(path.read_text())["spans"]
        foreign_totals.append(
            sum(
                s["attributes"].get("gen_ai.usage.input_tokens", 0)
                + s["attributes"].get("gen_ai.usage.output_tokens", 0)
                for s in spans
                if s["attributes"].get("gen_ai.operation.name") == "call_llm"
            )
        )
    agent = baselines["any_agent"]
    assert agent["n"] == len(frameworks) and agent["low_sample"] is True
    assert agent["p50_total_tokens"] == pytest.approx(np.percentile(foreign_totals, 50))
    assert agent["max_total_tokens"] == max(foreign_totals)
