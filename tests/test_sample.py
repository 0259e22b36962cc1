"""The seeded generator and the committed portable sample: reproducible, realistic sizes, the
guard's rules respected, and the features the dashboard must show."""

from __future__ import annotations

import datetime as dt

import pytest

from collector import sample
from collector.pricing import cost_usd
from collector.store import read_connection
from collector.usage import Usage

#: The issue's typical total tokens per run, per task type.
SIZES = {
    "simple_qa": (2_000, 5_000),
    "tool_use": (5_000, 10_000),
    "complex_reasoning": (15_000, 40_000),
    "code_generation": (20_000, 60_000),
    "research": (50_000, 150_000),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store loaded from the committed sample file."""
    path = tmp_path_factory.mktemp("sample") / "sample.duckdb"
    assert sample.ensure_demo_store(path) is True
    return path


def _rows(store, sql, params=()):
    with read_connection(store) as conn:
        return conn.execute(sql, params).fetchall()


def test_same_seed_gives_the_same_rows_and_another_seed_does_not():
    end = dt.datetime(2026, 1, 10)
    first = list(sample.generate_sample(days=2, seed=3, runs_per_day=40, end_utc=end))
    again = list(sample.generate_sample(days=2, seed=3, runs_per_day=40, end_utc=end))
    other = list(sample.generate_sample(days=2, seed=4, runs_per_day=40, end_utc=end))
    assert first == again
    assert first != other


def test_committed_sample_covers_fourteen_days_before_its_fixed_end(store):
    first, last, n = _rows(store, "SELECT min(start_utc), max(start_utc), count(*) FROM runs")[0]
    assert sample.SAMPLE_END_UTC - dt.timedelta(days=14) <= first
    assert last < sample.SAMPLE_END_UTC
    assert n > 14 * 150
    assert sample.SAMPLE_FILE.stat().st_size < 5_000_000


def test_task_types_have_their_typical_sizes(store):
    medians = dict(_rows(store, "SELECT task_type, median(total_tokens) FROM runs GROUP BY 1"))
    assert set(medians) == set(SIZES)
    for task_type, (low, high) in SIZES.items():
        assert low <= medians[task_type] <= high, task_type


def test_runaway_loops_are_one_to_three_percent_of_unlimited_runs(store):
    unlimited, runaways = _rows(store, """
        WITH m AS (SELECT task_type, median(total_tokens) AS med FROM runs GROUP BY 1)
        SELECT count(*), count(*) FILTER (WHERE total_tokens > 8 * med)
        FROM runs JOIN m USING (task_type) WHERE limit_total_tokens IS NULL""")[0]
    assert 0.01 <= runaways / unlimited <= 0.03


def test_runs_under_a_limit_never_use_more_than_it(store):
    over = _rows(store, """SELECT count(*) FROM runs
                           WHERE total_tokens > limit_total_tokens OR turns > limit_turns
                              OR tool_calls > limit_tool_calls""")[0][0]
    limited = _rows(store, "SELECT count(*) FROM runs WHERE limit_total_tokens IS NOT NULL")[0][0]
    assert over == 0 and limited > 0


def test_every_budget_stop_has_one_stop_event_with_its_reason(store):
    mismatched = _rows(store, """
        SELECT r.run_id FROM runs r
        LEFT JOIN budget_events e ON e.run_id = r.run_id AND e.name = 'budgetlens.stop'
        WHERE starts_with(r.stop_reason, 'budget_')
        GROUP BY r.run_id, r.stop_reason
        HAVING count(e.event_id) <> 1 OR any_value(e.reason) <> r.stop_reason""")
    stops = dict(_rows(store, "SELECT stop_reason, count(*) FROM runs GROUP BY 1"))
    assert mismatched == []
    assert {"budget_tokens", "budget_turns", "budget_tools", "failed", "completed"} <= set(stops)


def test_downgraded_runs_switch_to_the_next_model(store):
    rows = _rows(store, """SELECT e.from_model, e.to_model, r.models FROM budget_events e
                           JOIN runs r USING (run_id) WHERE e.name = 'budgetlens.downgrade'""")
    assert rows
    for from_model, to_model, models in rows:
        assert sample.DOWNGRADE_CHAIN[from_model] == to_model
        # a downgrade after the run's last call leaves only the first model
        assert from_model in models.split(",") and set(models.split(",")) <= {from_model, to_model}
    assert any("," in models for _, _, models in rows), "some runs go on with the cheaper model"


def test_calls_carry_cache_reasoning_and_a_little_unknown_usage(store):
    cache, reasoning, unknown, calls = _rows(store, """
        SELECT sum(cache_read_tokens + cache_write_tokens), sum(reasoning_tokens),
               count(*) FILTER (WHERE usage_status = 'unknown'), count(*) FROM model_calls""")[0]
    assert cache > 0 and reasoning > 0
    assert 0 < unknown / calls < 0.02
    nulls = _rows(store, """SELECT count(*) FROM model_calls WHERE usage_status = 'unknown'
                            AND (total_tokens IS NOT NULL OR reserved_tokens IS NULL)""")[0][0]
    assert nulls == 0, "unknown usage keeps NULL tokens and its reservation"


def test_priced_calls_cost_what_genai_prices_says_and_one_model_is_unpriced(store):
    rows = _rows(store, """SELECT response_model, provider_name, input_tokens, output_tokens,
                                  cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd
                           FROM model_calls WHERE usage_status = 'reported'
                           QUALIFY row_number() OVER (ORDER BY span_id) % 50 = 0""")
    assert len(rows) > 100
    for model, provider, i, o, cr, cw, rs, cost in rows:
        expected = cost_usd(model, Usage(i, o, cr, cw, rs), provider=provider)
        assert cost == (None if expected is None else pytest.approx(expected)), model
    unpriced = _rows(store, "SELECT DISTINCT response_model FROM model_calls WHERE cost_usd IS NULL"
                            " AND usage_status = 'reported'")
    assert unpriced == [("llama-3.1-8b-instruct",)]


def test_cumulative_used_tokens_grow_to_the_run_total(store):
    bad = _rows(store, """
        WITH c AS (SELECT run_id, used_tokens,
                          lag(used_tokens) OVER (PARTITION BY run_id ORDER BY turn) AS prev,
                          last_value(used_tokens) OVER (PARTITION BY run_id ORDER BY turn
                              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last
                   FROM model_calls)
        SELECT count(*) FROM c JOIN runs r USING (run_id)
        WHERE c.used_tokens < c.prev OR c.last <> r.total_tokens""")[0][0]
    assert bad == 0


def test_weekdays_are_busier_than_weekends(store):
    per_day = dict(_rows(store, """
        SELECT dayofweek(start_utc) IN (0, 6),
               count(*) / count(DISTINCT CAST(start_utc AS DATE))
        FROM runs GROUP BY 1"""))
    assert per_day[False] > 2 * per_day[True]


def test_the_incident_day_has_the_highest_hit_rate(store):
    limited_days = _rows(store, """
        SELECT CAST(start_utc AS DATE) AS day,
               count(*) FILTER (WHERE starts_with(stop_reason, 'budget_')) / count(*) AS rate
        FROM runs WHERE limit_total_tokens IS NOT NULL GROUP BY day ORDER BY rate DESC""")
    incident = sample.SAMPLE_END_UTC - dt.timedelta(days=sample.INCIDENT["day_from_end"])
    assert limited_days[0][0] == incident.date()
    assert limited_days[0][1] > 1.5 * limited_days[len(limited_days) // 2][1]


def test_exported_file_loads_into_the_same_runs_as_a_direct_write(tmp_path):
    end = dt.datetime(2026, 3, 2)
    direct, loaded, path = tmp_path / "d.duckdb", tmp_path / "l.duckdb", tmp_path / "s.jsonl.gz"
    assert sample.write_sample(direct, days=2, seed=11, runs_per_day=30, end_utc=end) == \
        sample.export_sample_jsonl(path, days=2, seed=11, runs_per_day=30, end_utc=end)
    sample.load_sample_file(path, loaded)
    query = "SELECT * FROM runs ORDER BY run_id"
    assert _rows(direct, query) == _rows(loaded, query)
    query = "SELECT * FROM model_calls ORDER BY span_id"
    assert _rows(direct, query) == _rows(loaded, query)


def test_demo_store_is_loaded_once(store):
    assert sample.ensure_demo_store(store) is False


def test_a_file_that_is_not_a_sample_is_refused(tmp_path):
    import gzip

    path = tmp_path / "x.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.write('{"hello": 1}\n')
    with pytest.raises(ValueError, match="line 1"):
        sample.load_sample_file(path, tmp_path / "db.duckdb")


@pytest.mark.parametrize("kwargs, message", [(dict(days=0), "days"), (dict(runs_per_day=0),
                                                                      "runs_per_day")])
def test_generator_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        next(sample.generate_sample(**kwargs))
