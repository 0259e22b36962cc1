"""Paid tools (issue 21 item 4): a tool's fee counts in max_cost_usd, the spend windows and the
run's cost, kept apart from model cost in the result, the events, the store and the metrics."""

from __future__ import annotations

import json
import time

import pytest
import requests
from _collector_helpers import SpanRecorder, live_collector
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from budgetlens import BudgetExceeded, RunBudget
from budgetlens import semconv as sc
from budgetlens.guard.spend import SpendTracker
from budgetlens.guard.tool_prices import ToolPrice, check_tool_prices, load_tool_prices, tool_fee
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.store import connect

PRICES = {"browser": {"per_call_usd": 0.01, "per_unit_usd": 0.002, "unit": "second"}}


def test_a_tool_fee_from_the_price_table_stops_the_run_at_max_cost_usd():
    events = []
    run = RunBudget(max_cost_usd=0.10, tool_prices=PRICES, on_event=events.append)
    run.before_tool_call("browser", units=30)  # 0.01 + 0.002 x 30 = 0.07
    run.before_tool_call("grep")  # not in the table: free
    with pytest.raises(BudgetExceeded) as refused:
        run.before_tool_call("browser", units=30)  # 0.07 + 0.07 = 0.14 > 0.10
    assert refused.value.reason == sc.STOP_BUDGET_COST and refused.value.detail == "tool browser"
    assert refused.value.used == pytest.approx(0.07) and refused.value.requested == pytest.approx(0.07)
    result = run.finish()
    assert result.stop_reason == sc.STOP_BUDGET_COST
    assert result.tool_calls == 2  # the refused call is not counted
    assert result.tool_cost_usd == pytest.approx(0.07) and result.cost_usd == pytest.approx(0.07)
    tool_events = [e for e in events if e.name == sc.EVENT_TOOL_CALL]
    assert [e.tool_cost_usd for e in tool_events] == [pytest.approx(0.07), None]
    assert tool_events[0].percent == 70.0  # 0.07 of 0.10


def test_an_explicit_fee_adds_to_model_cost_and_blocks_the_next_reservation():
    run = RunBudget(max_cost_usd=1.0, model_chain=["gpt-4o-mini"], provider="openai")
    run.before_tool_call("web_search", cost_usd=0.999)
    # gpt-4o-mini: 1,000,000 input tokens cost $0.15, far more than the $0.001 left
    with pytest.raises(BudgetExceeded) as refused:
        run.reserve(1_000_000)
    assert refused.value.reason == sc.STOP_BUDGET_COST
    assert refused.value.used == pytest.approx(0.999)
    assert run.stats().cost_usd == pytest.approx(0.999)


def test_tool_fees_count_in_the_spend_windows():
    tracker = SpendTracker({"daily": 1.0})
    run = RunBudget(spend=tracker)
    run.before_tool_call("paid_api", cost_usd=0.6)
    other = RunBudget(spend=tracker)
    with pytest.raises(BudgetExceeded) as refused:
        other.before_tool_call("paid_api", cost_usd=0.6)  # 0.6 + 0.6 > 1.0
    assert refused.value.detail.startswith("daily spend window ")  # the window and its day
    assert tracker.spent("daily") == pytest.approx(0.6) and tracker.reserved("daily") == 0


def test_tool_price_file_and_bad_prices(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(
        "budgetlens_tool_prices: 1\ntools:\n  web_search: {per_call_usd: 0.01}\n"
        "  browser: {per_unit_usd: 0.002, unit: second}\n"
    )
    prices = load_tool_prices(path)
    assert prices == {"web_search": ToolPrice(0.01, 0.0, None), "browser": ToolPrice(0.0, 0.002, "second")}
    assert tool_fee(prices, "browser", None, 100) == pytest.approx(0.2)  # 0.002 x 100
    assert tool_fee(prices, "browser", 0.5, 100) == 0.5  # a given fee wins
    run = RunBudget(tool_prices=str(path))
    run.before_tool_call("web_search")
    assert run.finish().tool_cost_usd == pytest.approx(0.01)
    with pytest.raises(ValueError, match=r"tool_prices\['x'\].per_call_usd must be a finite number >= 0"):
        check_tool_prices({"x": {"per_call_usd": -1}})
    with pytest.raises(ValueError, match="unknown keys"):
        check_tool_prices({"x": {"per_search": 1}})
    with pytest.raises(ValueError, match="cost_usd must be"):
        RunBudget().before_tool_call("x", cost_usd=-0.1)
    (tmp_path / "bad.json").write_text(json.dumps({"tools": {}}))
    with pytest.raises(ValueError, match="budgetlens_tool_prices: 1"):
        load_tool_prices(tmp_path / "bad.json")


def test_tool_spend_metric_counts_fees_by_task_type():
    metrics = CollectorMetrics()
    events = [
        {"run_id": "r1", "name": sc.EVENT_TOOL_CALL, "tool_cost_usd": 0.25},
        {"run_id": "r1", "name": sc.EVENT_TOOL_CALL, "tool_cost_usd": None},
        {"run_id": "r1", "name": sc.EVENT_TOOL_CALL, "tool_cost_usd": 0.5},
    ]
    metrics.observe_commit((), events, (), {"r1": "research"})
    value = metrics.registry.get_sample_value("budgetlens_tool_cost_usd_total", {"task_type": "research"})
    assert value == pytest.approx(0.75)


@pytest.mark.system
def test_tool_cost_round_trips_through_a_real_collector(tmp_path, free_port):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    db_path = tmp_path / "store.duckdb"
    with live_collector(db_path, free_port) as live:
        recorder = SpanRecorder()
        recorder.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{live.url}/v1/traces")))
        run = RunBudget(run_id="paid", task_type="research", tracer=recorder.tracer, tool_prices=PRICES)
        run.before_tool_call("browser", units=10)  # 0.01 + 0.002 x 10 = 0.03
        run.before_tool_call("web_search", cost_usd=0.05)
        run.before_tool_call("grep")
        run.finish()
        recorder.provider.shutdown()
        deadline = time.monotonic() + 30
        while requests.get(f"{live.url}/healthz", timeout=5).json()["backlog_spans"]:
            assert time.monotonic() < deadline, "the collector did not load the spans"
            time.sleep(0.05)
        metrics = requests.get(f"{live.url}/metrics", timeout=5).text
    with connect(db_path) as conn:
        runs = conn.execute("SELECT run_id, tool_calls, cost_usd, tool_cost_usd FROM runs").fetchall()
        fees = conn.execute(
            "SELECT tool_name, tool_cost_usd FROM budget_events WHERE name = ? ORDER BY ts_utc",
            [sc.EVENT_TOOL_CALL],
        ).fetchall()
    assert runs == [("paid", 3, 0.0, pytest.approx(0.08))]  # no model call: model cost 0
    assert fees == [("browser", pytest.approx(0.03)), ("web_search", 0.05), ("grep", None)]
    assert 'budgetlens_tool_cost_usd_total{task_type="research"} 0.08' in metrics
