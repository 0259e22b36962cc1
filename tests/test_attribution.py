"""Attribution (issue 19): who a run belongs to, from RunBudget or foreign spans, stored,
filtered, grouped ("who spent it"), scoping spend windows and pools, bounded metric labels."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from budgetlens import RunBudget, Usage
from budgetlens import semconv as sc
from budgetlens.analysis.spenders import UNATTRIBUTED, spend_by
from budgetlens.analysis.views import Filters, count_runs, filter_options, runs_table
from budgetlens.attribution import Attribution
from budgetlens.cli import main
from budgetlens.guard.pool import TokenPool
from budgetlens.guard.spend import SpendTracker
from budgetlens.ingest.exporter import DuckDBSpanExporter
from budgetlens.ingest.metrics import CollectorMetrics
from budgetlens.store import read_connection


def _provider(memory, **resource):
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "svc", **resource}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider


def _guard_run(tracer, run_id, calls, **attribution):
    """One guarded run: each call (input, output) of gpt-4o recorded through the guard."""
    with RunBudget(
        max_total_tokens=100_000, run_id=run_id, task_type="triage", tracer=tracer, **attribution
    ) as run:
        for inp, out in calls:
            run.record(Usage(inp, out), model="gpt-4o")


# --- the guard's options ----------------------------------------------------------------------
def test_tenant_is_the_other_name_of_team_and_a_disagreement_is_refused():
    assert Attribution.build(tenant="acme").team == "acme"
    assert Attribution.build(team="acme", tenant="acme").team == "acme"
    with pytest.raises(ValueError, match="team and tenant are one field"):
        RunBudget(team="a", tenant="b")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tags": {f"k{i}": "v" for i in range(17)}}, r"tags: at most 16 tags, got 17"),
        ({"tags": {"bad key": "v"}}, r"tags: key 'bad key' must be 1-64 characters"),
        ({"tags": {"k": 3}}, r"tags\['k'\] must be a string"),
        ({"tags": ["a", "b"]}, r"tags must be a mapping"),
        ({"user": ""}, r"user must be a non-empty string"),
        ({"team": "x" * 201}, r"team must be a non-empty string of at most 200"),
    ],
)
def test_bad_attribution_names_the_field_and_the_rule(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunBudget(**kwargs)


def test_the_run_span_carries_the_attribution_under_budgetlens():
    memory = InMemorySpanExporter()
    tracer = _provider(memory).get_tracer("t")
    _guard_run(
        tracer,
        "r1",
        [(10, 1)],
        service="search",
        tenant="infra",
        user="u-1",
        session_id="s-1",
        tags={"env": "prod"},
    )
    (run_span,) = [s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]
    attributes = dict(run_span.attributes)
    assert attributes[sc.BUDGET_SERVICE] == "search" and attributes[sc.BUDGET_TEAM] == "infra"
    assert attributes[sc.BUDGET_USER] == "u-1" and attributes[sc.BUDGET_SESSION_ID] == "s-1"
    assert attributes["budgetlens.tag.env"] == "prod"


# --- scoped spend windows and pools -----------------------------------------------------------
def test_a_scoped_spend_window_counts_only_the_runs_of_its_team():
    # gpt-4o: $2.50 / M input, $10 / M output: 1,000 + 100 tokens = $0.0025 + $0.001
    tracker = SpendTracker({"daily": 1.0}, scope={"team": "search-infra"})
    _guard_run(None, "a", [(1_000, 100)], team="search-infra", spend=tracker)
    assert tracker.spent("daily") == pytest.approx(0.0035)
    _guard_run(None, "b", [(1_000, 100)], team="ml", spend=tracker)  # another team: not this budget
    _guard_run(None, "c", [(1_000, 100)], spend=tracker)  # no team: not this budget either
    assert tracker.spent("daily") == pytest.approx(0.0035)
    _guard_run(None, "d", [(2_000, 0)], tenant="search-infra", spend=tracker)  # tenant = team
    assert tracker.spent("daily") == pytest.approx(0.0085)


def test_a_scoped_pool_draws_only_for_matching_users_and_tags():
    pool = TokenPool(10_000, scope={"user": "u-1", "batch": "nightly"})
    _guard_run(None, "a", [(300, 20)], user="u-1", tags={"batch": "nightly"}, pool=pool)
    _guard_run(None, "b", [(300, 20)], user="u-1", tags={"batch": "daily"}, pool=pool)
    _guard_run(None, "c", [(300, 20)], user="u-2", tags={"batch": "nightly"}, pool=pool)
    assert pool.used_tokens == 320


def test_a_bad_scope_names_the_rule():
    with pytest.raises(ValueError, match="scope 'team': keys and values must be non-empty strings"):
        SpendTracker({"daily": 1.0}, scope={"team": "a,b"})
    with pytest.raises(ValueError, match="scope must be None or a non-empty mapping"):
        TokenPool(10, scope=["team"])


# --- the collector: foreign spans and the store -----------------------------------------------
def _store_of_foreign_and_guard_runs(db_path):
    """Three guard runs (two teams, tags) and one foreign trace with user.id/session.id only."""
    memory = InMemorySpanExporter()
    tracer = _provider(memory).get_tracer("t")
    _guard_run(tracer, "g1", [(1_000, 100)], team="search", user="alice", tags={"env": "prod"})
    _guard_run(tracer, "g2", [(2_000, 0)], team="search", user="bob", tags={"env": "dev"})
    _guard_run(tracer, "g3", [(4_000, 0)], team="ml", user="alice")
    # another instrumentation: user on the resource (enduser.id), session on the model call span
    other = InMemorySpanExporter()
    foreign = _provider(other, **{sc.ENDUSER_ID: "carol"}).get_tracer("openinference")
    llm = {
        sc.OPENINFERENCE_SPAN_KIND: "LLM",
        sc.LLM_MODEL_NAME: "gpt-4o",
        sc.LLM_TOKEN_COUNT_PROMPT: 400,
        sc.LLM_TOKEN_COUNT_COMPLETION: 0,
        sc.SESSION_ID: "sess-9",
    }
    with (
        foreign.start_as_current_span("agent", attributes={sc.OPENINFERENCE_SPAN_KIND: "AGENT"}),
        foreign.start_as_current_span("llm", attributes=llm),
    ):
        pass
    exporter = DuckDBSpanExporter(db_path)
    exporter.export(memory.get_finished_spans())
    exporter.export(other.get_finished_spans())
    exporter.shutdown()


@pytest.mark.system  # store writes: seconds
def test_foreign_spans_with_only_user_and_session_attributes_are_attributed(db_path):
    _store_of_foreign_and_guard_runs(db_path)
    with read_connection(db_path) as conn:
        rows = conn.execute(
            "SELECT run_id, service_name, team, user_id, session_id, tags FROM runs ORDER BY run_id"
        ).fetchall()
    by_run = {row[0]: row[1:] for row in rows}
    assert by_run["g1"] == ("svc", "search", "alice", None, '{"env":"prod"}')
    assert by_run["g3"] == ("svc", "ml", "alice", None, None)
    (foreign,) = [values for run, values in by_run.items() if not run.startswith("g")]
    assert foreign == ("svc", None, "carol", "sess-9", None)


@pytest.mark.system  # store writes: seconds
def test_filters_and_who_spent_it_by_team_and_user(db_path):
    _store_of_foreign_and_guard_runs(db_path)
    with read_connection(db_path) as conn:
        assert count_runs(conn, Filters(teams=("search",))) == 2
        assert count_runs(conn, Filters(users=("alice",))) == 2
        assert count_runs(conn, Filters(teams=("search",), tags=(("env", "prod"),))) == 1
        assert count_runs(conn, Filters(tags=(("env", "staging"),))) == 0
        assert runs_table(conn, Filters(users=("carol",)))["user_id"].tolist() == ["carol"]
        assert filter_options(conn)["teams"] == ["ml", "search"]
        teams = spend_by(conn, Filters(), by="team").set_index("team")
        users = spend_by(conn, Filters(), by="user").set_index("user")
    # gpt-4o $2.50/M in, $10/M out: g1 0.0035, g2 0.005, g3 0.01, foreign (400 in) 0.001
    assert teams.loc["search", "runs"] == 2 and teams.loc["search", "cost_usd"] == pytest.approx(0.0085)
    assert teams.loc["ml", "cost_usd"] == pytest.approx(0.01)
    assert teams.loc[UNATTRIBUTED, "cost_usd"] == pytest.approx(0.001)
    assert teams.index.tolist() == ["ml", "search", UNATTRIBUTED]  # most expensive first
    assert teams["cost_share"].sum() == pytest.approx(1.0)
    assert teams.loc["ml", "cost_share"] == pytest.approx(0.01 / 0.0195)
    assert users.loc["alice", "cost_usd"] == pytest.approx(0.0135) and users.loc["alice", "runs"] == 2
    with pytest.raises(ValueError, match="by must be one of team, user, service"):
        spend_by(None, Filters(), by="model")


@pytest.mark.system  # every CLI command on a store: seconds
def test_every_analysis_command_takes_the_shared_filters(db_path, capsys):
    _store_of_foreign_and_guard_runs(db_path)
    db = ["--db", str(db_path), "--window-days", "0"]
    assert main(["runs", *db, "--team", "search", "--tag", "env=dev", "--format", "json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["g2"]
    assert main(["spend", *db, "--by", "user", "--tenant", "search", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["user"]: r["cost_usd"] for r in rows} == pytest.approx({"alice": 0.0035, "bob": 0.005})
    for command in ("baselines", "presets", "hit-rate", "runaways", "whatif"):
        extra = ["--limit", "max_total_tokens=5000"] if command == "whatif" else []
        code = main([command, *db, "--user", "alice", "--team", "ml", *extra])
        assert code == 0, (command, capsys.readouterr().err)
        capsys.readouterr()
    assert main(["baselines", *db, "--user", "nobody"]) == 0
    assert "no runs of user nobody" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        main(["runs", *db, "--tag", "novalue"])
    assert bad.value.code == 2
    assert "--tag must be key=value" in capsys.readouterr().err


# --- Prometheus labels ------------------------------------------------------------------------
def test_run_metrics_carry_team_and_service_capped_and_never_the_user():
    # two label combinations per family (issue 23's cap on combinations); past it: other
    metrics = CollectorMetrics(CollectorRegistry(), max_series=2)
    runs = [
        {"run_id": f"r{i}", "task_type": "t", "stop_reason": "completed", "total_tokens": 10}
        | {"team": f"team-{i}", "service_name": "svc", "user_id": f"user-{i}"}
        for i in range(4)
    ]
    metrics.observe_commit((), (), runs)
    value = metrics.registry.get_sample_value
    labels = {"task_type": "t", "stop_reason": "completed", "service": "svc"}
    assert value("budgetlens_runs_total", {**labels, "team": "team-0"}) == 1
    folded = {"task_type": "other", "stop_reason": "completed", "service": "other", "team": "other"}
    assert value("budgetlens_runs_total", folded) == 2  # past the cap of 2
    text = generate_latest(metrics.registry).decode()
    assert "user" not in text and "r0" not in text


def test_a_scope_names_one_shared_ledger_account_whether_said_team_or_tenant(tmp_path):
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    by_team = SpendTracker({"daily": 1.0}, ledger=ledger, scope={"team": "search-infra"})
    by_tenant = SpendTracker({"daily": 1.0}, ledger=ledger, scope={"tenant": "search-infra"})
    other = SpendTracker({"daily": 1.0}, ledger=ledger, scope={"team": "ml"})
    _guard_run(None, "a", [(1_000, 100)], team="search-infra", spend=by_team)  # $0.0035
    _guard_run(None, "b", [(2_000, 0)], tenant="search-infra", spend=by_tenant)  # $0.005
    _guard_run(None, "c", [(2_000, 0)], team="search-infra", spend=other)  # not ml's run
    assert by_team.spent("daily") == pytest.approx(0.0085) == by_tenant.spent("daily")
    assert other.spent("daily") == 0
