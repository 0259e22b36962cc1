"""Cache and reasoning tokens (Overview shares, Baselines P50/P95) and latency per model (Cost),
against values computed by hand from the calls below (design §3: input includes cache reads and
writes, output includes reasoning)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from budgetlens.analysis import views as analysis
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection

DAY = dt.datetime(2026, 11, 2)

#: (run, task type, model, input, cache read, cache write, output, reasoning, duration s)
CALLS = [
    ("r1", "qa", "gpt-4.1", 1000, 600, 100, 200, 50, 1.0),
    ("r1", "qa", "gpt-4.1", 500, 400, 0, 100, 0, 3.0),
    # a source that reports neither cache nor reasoning (never read as 0 %)
    ("r2", "qa", "claude-sonnet-4-5", 2000, None, None, 300, None, 2.0),
    ("r3", "research", "o4-mini", 1000, 0, 0, 1000, 800, None),
    ("r4", "research", "gpt-4.1", 4000, 1000, 500, 500, 100, 7.0),
]


def _rows():
    rows = []
    for index, (run, task, model, inp, cr, cw, out, rs, duration) in enumerate(CALLS):
        start = DAY + dt.timedelta(minutes=index)
        rows.append(
            dict(
                span_id=f"{run}.c{index}",
                run_id=run,
                source="test",
                task_type=task,
                request_model=model,
                response_model=model,
                start_utc=start,
                end_utc=None if duration is None else start + dt.timedelta(seconds=duration),
                duration_s=duration,
                turn=index,
                input_tokens=inp,
                output_tokens=out,
                total_tokens=inp + out,
                cache_read_tokens=cr,
                cache_write_tokens=cw,
                reasoning_tokens=rs,
                cost_usd=0.01,
                usage_status="reported",
            )
        )
    return rows


@pytest.fixture(scope="module")
def parts_store(tmp_path_factory):
    """The store of ``_rows()``, written once for the module (the tests only read it)."""
    db_path = tmp_path_factory.mktemp("token_parts") / "store.duckdb"
    with write_connection(db_path) as writer:
        write_batch(writer, _rows())
    return db_path


@pytest.fixture
def conn(parts_store):
    with read_connection(parts_store) as reader:
        yield reader


def _per_run(part: str) -> dict[str, int | None]:
    """A part's tokens per run, summed from CALLS in Python (None when no call reports it)."""
    column = {"input": 3, "cache_read": 4, "cache_write": 5, "output": 6, "reasoning": 7}[part]
    runs: dict[str, int | None] = {}
    for call in CALLS:
        value = call[column]
        if value is not None:
            runs[call[0]] = (runs.get(call[0]) or 0) + value
        else:
            runs.setdefault(call[0], None)
    return runs


def _share(part: str, whole: str, runs: set[str] | None = None) -> float:
    parts, wholes = _per_run(part), _per_run(whole)
    keep = [
        r for r in parts if parts[r] is not None and wholes[r] is not None and (runs is None or r in runs)
    ]
    return sum(parts[r] for r in keep) / sum(wholes[r] for r in keep)


def test_overview_shows_cache_and_reasoning_tokens_with_their_share(conn):
    ov = analysis.overview(conn, Filters())
    assert ov.input_tokens == 1000 + 500 + 2000 + 1000 + 4000
    assert ov.cache_read_tokens == 600 + 400 + 0 + 1000
    assert ov.cache_write_tokens == 100 + 0 + 0 + 500
    assert ov.reasoning_tokens == 50 + 0 + 800 + 100
    # r2 reports no cache and no reasoning: left out of the shares, not counted as 0 %
    assert ov.cache_read_share == pytest.approx(2000 / (1500 + 1000 + 4000))
    assert ov.cache_read_share == pytest.approx(_share("cache_read", "input"))
    assert ov.cache_write_share == pytest.approx(_share("cache_write", "input"))
    assert ov.reasoning_share == pytest.approx(950 / (300 + 1000 + 500))
    per_task = ov.per_task.set_index("task_type")
    assert per_task.loc["qa", "cache_read_share"] == pytest.approx(1000 / 1500)
    assert per_task.loc["research", "reasoning_share"] == pytest.approx(
        _share("reasoning", "output", {"r3", "r4"})
    )


def test_a_window_where_no_run_reports_cache_has_no_share_not_zero(conn):
    ov = analysis.overview(conn, Filters(models=["claude-sonnet-4-5"]))
    assert ov.runs == 1
    assert ov.cache_read_tokens is None and ov.cache_read_share is None
    assert ov.reasoning_share is None


def test_token_part_baselines_are_p50_p95_over_the_runs_that_report_them(conn):
    frame = analysis.token_part_baselines(conn, Filters()).set_index("task_type")
    qa, research = frame.loc["qa"], frame.loc["research"]
    assert qa["n"] == 2 and qa["n_cache_read_tokens"] == 1  # r2 does not report cache reads
    assert qa["p50_cache_read_tokens"] == pytest.approx(1000)
    reasoning = [_per_run("reasoning")[r] for r in ("r3", "r4")]
    assert research["p50_reasoning_tokens"] == pytest.approx(np.quantile(reasoning, 0.5))
    assert research["p95_reasoning_tokens"] == pytest.approx(np.quantile(reasoning, 0.95))
    assert research["max_cache_write_tokens"] == 500
    assert bool(research["low_sample"])


def test_model_latency_is_p50_p95_of_call_durations_per_model(conn):
    frame = analysis.model_latency(conn, Filters()).set_index("model")
    gpt = frame.loc["gpt-4.1"]
    durations = [c[8] for c in CALLS if c[2] == "gpt-4.1"]
    assert gpt["calls"] == 3 and gpt["timed_calls"] == 3
    # the rollup's latency sketch: within one log-spaced bucket (10 ** (1/8), about 1.33x)
    assert gpt["p50_duration_s"] == pytest.approx(np.quantile(durations, 0.5), rel=0.34)
    assert gpt["p95_duration_s"] == pytest.approx(np.quantile(durations, 0.95), rel=0.34)
    assert gpt["max_duration_s"] == 7.0
    untimed = frame.loc["o4-mini"]
    assert untimed["calls"] == 1 and untimed["timed_calls"] == 0
    assert untimed["p95_duration_s"] is None or np.isnan(untimed["p95_duration_s"])
    assert list(frame.index) == ["gpt-4.1", "claude-sonnet-4-5", "o4-mini"]  # most calls first


def test_model_latency_follows_the_filters(conn):
    research = analysis.model_latency(conn, Filters(task_types=["research"]))
    assert sorted(research["model"]) == ["gpt-4.1", "o4-mini"]
    assert research.set_index("model").loc["gpt-4.1", "calls"] == 1  # r4 only
    only = analysis.model_latency(conn, Filters(models=["o4-mini"]))
    assert only["model"].tolist() == ["o4-mini"]
    later = analysis.model_latency(conn, Filters(start_utc=DAY + dt.timedelta(days=1)))
    assert later.empty and "p95_duration_s" in later.columns
