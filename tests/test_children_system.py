"""Sub-agent runs through real parts (issue 21): the guard's spans sent by the OTel SDK's OTLP
exporter to a real ``budgetlens collector`` subprocess keep the parent/child link in DuckDB, the
CLI shows the tree, the Runs page links parent and children, and fan-out reads the P50 from a store."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from _collector_helpers import collector_process, run_cli
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from streamlit.testing.v1 import AppTest

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens.config import ENV_DB
from budgetlens.ingest.exporter import DuckDBSpanExporter

pytestmark = pytest.mark.system

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def _tree_spans():
    """lead -> (research-1 -> check-1, research-2): gpt-4o calls, tokens by hand below."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    lead = RunBudget(max_total_tokens=50_000, run_id="lead", task_type="lead", tracer=tracer)
    lead.record(Usage(1_000, 100), model="gpt-4o")
    first = lead.child(task_type="research", run_id="research-1", limits={"max_total_tokens": 10_000})
    res = first.reserve(5_000)
    first.record(Usage(4_000, 500), model="gpt-4o", reservation=res)
    check = first.child(task_type="check", run_id="check-1")
    check.record(Usage(2_000, 0), model="gpt-4o")
    check.finish()
    first.finish()
    second = lead.child(task_type="research", run_id="research-2", limits={"max_total_tokens": 1_000})
    with pytest.raises(BudgetExceeded):
        second.reserve(2_000)
    second.finish()
    lead.finish()
    assert lead.used_tokens == 1_100 + 4_500 + 2_000
    return memory.get_finished_spans()


def _token_counters(url: str) -> dict[str, float]:
    """``budgetlens_tokens_total`` summed per token type (input, output) from the collector's
    /metrics, once the batch is committed (the collector acknowledges at its journal, loads after)."""
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            families = list(text_string_to_metric_families(response.read().decode()))
        tokens = {
            kind: sum(
                s.value
                for family in families
                if family.name == "budgetlens_tokens"
                for s in family.samples
                if s.name == "budgetlens_tokens_total" and s.labels["token_type"] == kind
            )
            for kind in ("input", "output")
        }
        if tokens["input"] or time.monotonic() > deadline:
            return tokens
        time.sleep(0.2)


def _cli(python, *argv) -> list[dict]:
    out = run_cli(python, *argv, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_parent_run_id_round_trips_through_a_real_collector_and_the_cli_shows_the_tree(tmp_path, python):
    db = tmp_path / "store.duckdb"
    with collector_process(python, db) as (_, url):
        assert OTLPSpanExporter(endpoint=f"{url}/v1/traces").export(_tree_spans()) == SpanExportResult.SUCCESS
        tokens = _token_counters(url)
    # the counters add model calls, each once: input 1,000 + 4,000 + 2,000; output 100 + 500 + 0
    assert tokens == {"input": 7_000, "output": 600}
    runs = {r["run_id"]: r for r in _cli(python, "runs", "--db", str(db), "--window-days", "0")}
    assert {k: v["parent_run_id"] for k, v in runs.items()} == {
        "lead": None,
        "research-1": "lead",
        "check-1": "research-1",
        "research-2": "lead",
    }
    assert runs["research-2"]["stop_reason"] == "budget_tokens"  # the child's stop is its own
    tree = _cli(python, "runs", "--db", str(db), "--tree", "lead")
    assert [(r["depth"], r["run_id"]) for r in tree] == [
        (0, "lead"),
        (1, "research-1"),
        (2, "check-1"),
        (1, "research-2"),
    ]
    # one ledger: a run's totals include its children's (its limit covered them)
    assert [r["total_tokens"] for r in tree[:3]] == [1_100 + 4_500 + 2_000, 4_500 + 2_000, 2_000]
    table = subprocess.run(
        [python, "-m", "budgetlens.cli", "runs", "--db", str(db), "--tree", "research-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0 and "  check-1" in table.stdout
    missing = subprocess.run(
        [python, "-m", "budgetlens.cli", "runs", "--db", str(db), "--tree", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode != 0 and "nope" in missing.stderr


@pytest.fixture(scope="module")
def tree_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tree") / "tree.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.export(_tree_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    return path


def test_the_runs_page_links_the_parent_and_lists_the_children(tree_store, monkeypatch):
    monkeypatch.setenv(ENV_DB, str(tree_store))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page("app_pages/runs.py")
    at.query_params["run"] = "research-1"
    at.run()
    assert not at.exception
    texts = " ".join(m.value for m in at.markdown)
    assert "Parent run" in texts and "lead" in texts and "Child runs" in texts
    children = [df.value for df in at.dataframe if "depth" in df.value.columns]
    assert children and list(children[0]["depth"]) == [1]


def test_fan_out_reads_the_p50_of_the_child_task_type_from_the_store(tree_store):
    # research runs in the store: 6,500 (its child's 2,000 included) and 0 tokens (research-2 was
    # refused before a call): P50 = (0 + 6,500) / 2 = 3,250.
    parent = RunBudget(max_total_tokens=13_000)
    with pytest.raises(BudgetExceeded) as caught:
        parent.fan_out(5, "research", db=tree_store)  # 5 × 3,250 = 16,250 > 13,000
    assert caught.value.requested == pytest.approx(16_250)
    assert len(parent.fan_out(4, "research", db=tree_store)) == 4  # 13,000 fits exactly
