"""Attribution end to end (issue 19): the guard's runs through a stock OTLP exporter into a real
``budgetlens collector`` process, filtered by the CLI; the dashboard's team/user filters and
the Cost page's "Who spent it" (Streamlit AppTest)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from _collector_helpers import collector_process, run_cli
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from streamlit.testing.v1 import AppTest

from budgetlens import RunBudget, Usage
from budgetlens import semconv as sc
from budgetlens.config import ENV_DB
from budgetlens.ingest.exporter import DuckDBSpanExporter

pytestmark = pytest.mark.system

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"
#: (run id, team, user, tags, input tokens, output tokens) of gpt-4o calls: $2.50/M in, $10/M out.
RUNS = (
    ("a1", "search-infra", "alice", {"env": "prod"}, 10_000, 1_000),  # $0.035
    ("a2", "search-infra", "bob", {"env": "dev"}, 20_000, 0),  # $0.05
    ("b1", "ml-platform", "alice", {}, 40_000, 0),  # $0.10
)


def _spans():
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "worker"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    for run_id, team, user, tags, inp, out in RUNS:
        with RunBudget(
            max_total_tokens=100_000,
            run_id=run_id,
            task_type="triage",
            tracer=tracer,
            team=team,
            user=user,
            tags=tags,
        ) as run:
            run.record(Usage(inp, out), model="gpt-4o")
    return memory.get_finished_spans()


def _values(array) -> list:
    """A Plotly JSON array as a list (Plotly 6 sends numpy arrays as base64 ``bdata``)."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _cli(python, *argv) -> list[dict]:
    out = run_cli(python, *argv, "--window-days", "0", "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_guard_runs_through_a_real_collector_are_filtered_by_team_user_and_tag(tmp_path, python):
    db = tmp_path / "store.duckdb"
    with collector_process(python, db) as (_, url):
        assert OTLPSpanExporter(endpoint=f"{url}/v1/traces").export(_spans()) == SpanExportResult.SUCCESS
    runs = _cli(python, "runs", "--db", str(db), "--team", "search-infra")
    assert sorted(r["run_id"] for r in runs) == ["a1", "a2"]
    assert {r["run_id"]: (r["team"], r["user_id"]) for r in runs}["a2"] == ("search-infra", "bob")
    assert [r["run_id"] for r in _cli(python, "runs", "--db", str(db), "--tag", "env=prod")] == ["a1"]
    by_team = {r["team"]: r for r in _cli(python, "spend", "--db", str(db))}
    assert by_team["search-infra"]["cost_usd"] == pytest.approx(0.085)
    assert by_team["ml-platform"]["cost_usd"] == pytest.approx(0.10) and by_team["ml-platform"]["runs"] == 1
    by_user = {r["user"]: r["cost_usd"] for r in _cli(python, "spend", "--db", str(db), "--by", "user")}
    assert by_user == pytest.approx({"alice": 0.135, "bob": 0.05})
    alice = _cli(python, "baselines", "--db", str(db), "--user", "alice")
    assert alice[0]["n"] == 2 and alice[0]["max_total_tokens"] == 40_000


@pytest.fixture(scope="module")
def team_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("teams") / "teams.duckdb"
    exporter = DuckDBSpanExporter(path)
    assert exporter.export(_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    return path


def test_dashboard_team_filter_narrows_every_page_and_the_cost_page_says_who_spent_it(
    team_store, monkeypatch
):
    monkeypatch.setenv(ENV_DB, str(team_store))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert at.multiselect(key="app_teams").options == ["ml-platform", "search-infra"]
    assert {m.label: m.value for m in at.metric}["Runs"] == "3"
    at.multiselect(key="app_teams").set_value(["search-infra"]).run()
    assert {m.label: m.value for m in at.metric}["Runs"] == "2"
    assert at.query_params.get("team") in ("search-infra", ["search-infra"])
    at.switch_page("app_pages/cost.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.radio(key="cost_who_by").set_value("user").run()
    who = at.dataframe[[i for i, d in enumerate(at.dataframe) if "user" in d.value.columns][0]].value
    assert set(who["user"]) == {"alice", "bob"}  # the team filter keeps search-infra's runs only
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (spend,) = [c for c in charts if c["layout"]["title"]["text"] == "Spend by user"]
    assert dict(zip(_values(spend["data"][0]["y"]), _values(spend["data"][0]["x"]))) == pytest.approx(
        {"alice": 0.035, "bob": 0.05}
    )


def test_a_shared_link_with_a_user_and_tag_opens_with_those_filters(team_store, monkeypatch):
    monkeypatch.setenv(ENV_DB, str(team_store))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.query_params["user"] = "alice"
    at.query_params["tag"] = "env=prod"
    at.run()
    assert not at.exception
    assert at.multiselect(key="app_users").value == ["alice"]
    assert at.multiselect(key="app_tags").value == ["env=prod"]
    assert {m.label: m.value for m in at.metric}["Runs"] == "1"
