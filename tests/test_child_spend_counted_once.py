"""Sums over runs count a child's spend once (issue 21): a parent's stored totals include its
children's (``RunBudget.child``: one ledger), so every sum over runs reads each run's own use
(``spend_queries.SPEND``), while per-run figures (baselines) stay inclusive. Figures by hand below."""

from __future__ import annotations

import json

import pytest
from _collector_helpers import run_cli
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetlens import RunBudget, Usage
from budgetlens.analysis.filters import Filters
from budgetlens.analysis.replay import Budget, replay
from budgetlens.analysis.runaways import runaways
from budgetlens.analysis.spenders import spend_by
from budgetlens.analysis.views import baselines, cost_by_period, overview
from budgetlens.ingest.exporter import DuckDBSpanExporter
from budgetlens.store.connection import read_connection

# gpt-4o: $2.50 per million input tokens, $10 per million output tokens
LEAD_OWN_USD = 1_000 * 2.5e-6 + 100 * 10e-6  # 0.0035
FIRST_USD = 4_000 * 2.5e-6 + 500 * 10e-6  # 0.015
SECOND_USD = 2_000 * 2.5e-6  # 0.005
ALL_USD = 0.0235  # spent once: 0.0035 + 0.015 + 0.005
ALL_TOKENS = 1_100 + 4_500 + 2_000  # 7,600 (the parent's stored total; the runs' totals add to 14,100)


def _spans():
    """lead (1,000 + 100 tokens of its own) with two research children (4,000 + 500; 2,000 + 0)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    lead = RunBudget(max_total_tokens=50_000, run_id="lead", task_type="lead", tracer=tracer, team="ops")
    lead.record(Usage(1_000, 100), model="gpt-4o")
    first = lead.child(task_type="research", run_id="research-1")
    first.record(Usage(4_000, 500), model="gpt-4o")
    first.finish()
    second = lead.child(task_type="research", run_id="research-2")
    second.record(Usage(2_000, 0), model="gpt-4o")
    second.finish()
    result = lead.finish()
    assert result.used_tokens == ALL_TOKENS and result.cost_usd == pytest.approx(ALL_USD)
    return memory.get_finished_spans()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("spend") / "spend.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.export(_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    return path


def test_overview_totals_and_per_task_count_each_token_and_dollar_once(store):
    with read_connection(store) as conn:
        ov = overview(conn, Filters())
        only_research = overview(conn, Filters(task_types=("research",)))
    assert ov.runs == 3 and ov.cost_usd == pytest.approx(ALL_USD)
    assert ov.input_tokens == 7_000 and ov.output_tokens == 600
    per_task = ov.per_task.set_index("task_type")["cost_usd"].to_dict()
    assert per_task == pytest.approx({"lead": LEAD_OWN_USD, "research": FIRST_USD + SECOND_USD})
    assert only_research.cost_usd == pytest.approx(FIRST_USD + SECOND_USD)
    assert only_research.input_tokens == 6_000


def test_cost_page_by_task_and_by_model_add_up_to_the_spend_once(store):
    with read_connection(store) as conn:
        by_task = cost_by_period(conn, Filters(), period="day", by="task_type")
        by_model = cost_by_period(conn, Filters(), period="day", by="model")
    assert by_task.groupby("key")["cost_usd"].sum().to_dict() == pytest.approx(
        {"lead": LEAD_OWN_USD, "research": FIRST_USD + SECOND_USD}
    )
    assert by_model["cost_usd"].sum() == pytest.approx(ALL_USD)


def test_spend_by_team_runaways_and_what_if_count_the_children_once(store):
    with read_connection(store) as conn:
        team = spend_by(conn, Filters(), by="team").set_index("team").loc["ops"]
        found = runaways(conn, Filters(), k=1e-9)  # every run is "above" a tiny multiple of its P95
        whatif = replay(conn, Filters(), Budget.uniform())
    assert team["runs"] == 3 and team["cost_usd"] == pytest.approx(ALL_USD)
    assert team["total_tokens"] == ALL_TOKENS
    assert (
        found.count == 3 and found.cost_usd == pytest.approx(ALL_USD) and found.cost_share == pytest.approx(1)
    )
    assert "own_cost_usd" not in found.runs.columns
    assert whatif.summary["spent_tokens"].sum() == ALL_TOKENS
    assert whatif.summary["spent_cost_usd"].sum() == pytest.approx(ALL_USD)


def test_a_parents_baseline_stays_inclusive_its_budget_covered_its_children(store):
    with read_connection(store) as conn:
        frame = baselines(conn, Filters()).set_index("task_type")
    assert frame.loc["lead", "p50_total_tokens"] == ALL_TOKENS
    assert frame.loc["research", "p50_total_tokens"] == (4_500 + 2_000) / 2


@pytest.mark.system
def test_the_spend_cli_counts_the_children_once(store, python):
    out = run_cli(python, "spend", "--db", str(store), "--window-days", "0", "--format", "json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["team"] == "ops" and row["runs"] == 3
    assert row["cost_usd"] == pytest.approx(ALL_USD) and row["total_tokens"] == ALL_TOKENS


@pytest.mark.system  # store writes: seconds
def test_a_parent_still_running_has_only_its_own_calls_and_nothing_is_taken_off(tmp_path):
    # before the parent's record lands, its stored totals are its own calls' (1,000 + 100)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lead = RunBudget(run_id="lead", task_type="lead", tracer=provider.get_tracer("agent"))
    lead.record(Usage(1_000, 100), model="gpt-4o")
    child = lead.child(task_type="research", run_id="research-1")
    child.record(Usage(4_000, 500), model="gpt-4o")
    child.finish()  # the lead is not finished: no run record of it yet
    exporter = DuckDBSpanExporter(tmp_path / "open.duckdb")
    assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    with read_connection(tmp_path / "open.duckdb") as conn:
        ov = overview(conn, Filters())
    assert ov.input_tokens == 5_000 and ov.output_tokens == 600
    assert ov.cost_usd == pytest.approx(LEAD_OWN_USD + FIRST_USD)
