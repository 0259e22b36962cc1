"""``/metrics`` label values never carry a control character or a bidi override from the wire
(issue 24): a real collector scraped over HTTP, parsed by prometheus-client's parser and by
promtool."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, collector_process
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from budgetlens.ingest.metrics import LabelCap
from budgetlens.unsafe_text import UNSAFE

pytestmark = pytest.mark.prometheus

#: (task type, model) as a client sent them -> as the label shows them. A model name with a C0
#: control character or DEL is refused by the mapping (``partial_success``); C1 and bidi pass it.
HOSTILE = {
    ("nul\x00task", "lre\u202amodel"): ("nul\ufffdtask", "lre\ufffdmodel"),
    ("esc\x1b[2Jtask", "bidi\u202eledom"): ("esc\ufffd[2Jtask", "bidi\ufffdledom"),
    ("cr\rtask\x7f", "iso\u2066model\u2069"): ("cr\ufffdtask\ufffd", "iso\ufffdmodel\ufffd"),
    ("tab\ttask\x1f\x1c", "csi\x9bmodel\u200f"): ("tab\ufffdtask\ufffd\ufffd", "csi\ufffdmodel\ufffd"),
    ("sep\u2028task\x85", "alm\u061cmodel\u2029"): ("sep\ufffdtask\ufffd", "alm\ufffdmodel\ufffd"),
    # the exposition's own escaping: backslash, double quote and newline come back as sent
    ('quote"back\\slash\nline', 'gpt"4\\o'): ('quote"back\\slash\nline', 'gpt"4\\o'),
}


def _scrape_when_counted(url: str, runs: int) -> str:
    deadline = time.monotonic() + 30
    while True:
        text = requests.get(f"{url}/metrics", timeout=5).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        counted = sum(s.value for s in families["budgetlens_runs"].samples if s.name.endswith("_total"))
        if counted >= runs or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_label_values_from_the_wire_reach_the_scrape_without_control_or_bidi_characters(tmp_path, python):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by .ci/test (Debian package prometheus)"
    recorder = SpanRecorder(service="svc\x1b]0;title\x07")
    for index, (task, model) in enumerate(HOSTILE):
        recorder.guard_run(f"run-{index}", task, [(model, 100, 10)], warnings=1)
    with collector_process(python, tmp_path / "store.duckdb") as (_, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
        assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
        text = _scrape_when_counted(url, len(HOSTILE))

    labels = [
        (sample.name, sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    values = {value for _, sample_labels in labels for value in sample_labels.values()}
    for value in values:
        assert not UNSAFE.search(value.replace("\n", "")), repr(value)
    for task, model in HOSTILE.values():
        calls = [ls for name, ls in labels if name == "budgetlens_model_calls_total"]
        assert {"task_type": task, "model": model, "usage_status": "reported"} in calls, (task, model)
        assert any(ls.get("task_type") == task for name, ls in labels if name == "budgetlens_runs_total")
        assert any(
            ls.get("task_type") == task for name, ls in labels if name == "budgetlens_interventions_total"
        )
    assert "svc\ufffd]0;title\ufffd" in values
    # nothing raw in the exposition itself (the newline is there only escaped, as \n)
    assert not UNSAFE.search(text.replace("\n", "")), "a control character reached the exposition"

    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == ""


def test_label_cap_replaces_control_and_bidi_characters_and_keeps_the_rest():
    cap = LabelCap()
    assert cap("task_type", "a\x00b\x1b\x7f\x9f\u202e\u2028c") == "a\ufffdb\ufffd\ufffd\ufffd\ufffd\ufffdc"
    assert cap("model", "line\nbreak") == "line\nbreak"  # prometheus-client escapes it
    assert cap("model", 'naïve 模型 "q" \\') == 'naïve 模型 "q" \\'
    assert cap("model", "\x00" * 101) == "other" and cap("model", "") == "unknown"
