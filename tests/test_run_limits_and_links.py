"""Limits as they were and links out (issue 24): every limit a run ran under with the one that
fired, and the trace URL template on the run page and in ``runs --format json``."""

from __future__ import annotations

import json

import pytest

from budgetlens.analysis.run_limits import run_limits
from budgetlens.config import trace_url, trace_url_template


def test_a_run_stopped_by_its_cost_limit_shows_every_limit_and_marks_the_cost_one():
    run = {
        "stop_reason": "budget_cost",
        "limit_total_tokens": 18_000,
        "total_tokens": 13_500,
        "limit_cost_usd": 0.05,
        "cost_usd": 0.051,
        "limit_duration_s": 300.0,
        "duration_s": 40.0,
    }
    frame = run_limits(run).set_index("key")
    assert list(frame.index) == ["max_total_tokens", "max_duration_s", "max_cost_usd"]
    assert frame["fired"].tolist() == [False, False, True]
    assert frame.loc["max_total_tokens", "used_share"] == pytest.approx(0.75)


def test_among_token_limits_the_most_used_fired_and_no_limit_is_empty():
    run = {
        "stop_reason": "budget_tokens",
        "limit_total_tokens": 100_000,
        "total_tokens": 50_000,
        "limit_output_tokens": 1_000,
        "output_tokens": 1_000,
    }
    frame = run_limits(run).set_index("key")
    assert bool(frame.loc["max_output_tokens", "fired"]) and not bool(frame.loc["max_total_tokens", "fired"])
    assert run_limits({"stop_reason": "completed"}).empty


def test_the_trace_url_template_turns_a_trace_id_into_a_link(monkeypatch):
    monkeypatch.setenv("BUDGETLENS_TRACE_URL", "http://127.0.0.1:16686/trace/{trace_id}")
    template = trace_url_template()
    assert trace_url("4bf92f3577b34da6a3ce929d0e0e4736", template) == (
        "http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"
    )
    assert trace_url(None, template) is None and trace_url("abc", None) is None
    monkeypatch.setenv("BUDGETLENS_TRACE_URL", "http://tempo/no-placeholder")
    with pytest.raises(ValueError, match=r"BUDGETLENS_TRACE_URL.*\{trace_id\}"):
        trace_url_template()


@pytest.mark.system
def test_runs_json_carries_the_trace_url(committed_sample_store, capsys, monkeypatch):
    from budgetlens.cli import main

    monkeypatch.setenv("BUDGETLENS_TRACE_URL", "https://langfuse.example/trace/{trace_id}")
    code = main(
        [
            "runs",
            "--db",
            str(committed_sample_store),
            "--format",
            "json",
            "--limit",
            "3",
            "--window-days",
            "0",
        ]
    )
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == 3
    for row in rows:
        if row["trace_id"]:
            assert row["trace_url"] == f"https://langfuse.example/trace/{row['trace_id']}"
        else:
            assert row["trace_url"] is None
