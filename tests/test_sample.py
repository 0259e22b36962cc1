"""The seeded generator and the committed portable sample: reproducible, realistic sizes, the
guard's rules respected, and the features the dashboard must show."""

from __future__ import annotations

import datetime as dt

import pytest

from budgetlens import sample
from budgetlens.pricing import cost_usd
from budgetlens.sample import generator
from budgetlens.store import read_connection
from budgetlens.store.schema import RUN_COLUMNS
from budgetlens.usage import Usage

#: The issue's typical total tokens per run, per task type.
SIZES = {
    "simple_qa": (2_000, 5_000),
    "tool_use": (5_000, 10_000),
    "complex_reasoning": (15_000, 40_000),
    "code_generation": (20_000, 60_000),
    "research": (50_000, 150_000),
}


@pytest.fixture
def store(committed_sample_store):
    """A store loaded from the committed sample file (once per session, see conftest)."""
    return committed_sample_store


def _rows(store, sql, params=()):
    with read_connection(store) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.mark.system  # generates three samples: seconds
def test_same_seed_gives_the_same_rows_and_another_seed_does_not():
    end = dt.datetime(2026, 1, 10)
    first = list(sample.generate_sample(days=2, seed=3, runs_per_day=40, end_utc=end))
    again = list(sample.generate_sample(days=2, seed=3, runs_per_day=40, end_utc=end))
    other = list(sample.generate_sample(days=2, seed=4, runs_per_day=40, end_utc=end))
    assert first == again
    assert first != other


def _generation(path, end, **kwargs):
    """Write one small generation (seed 3, 2 days, 30 runs a weekday) ending at ``end``."""
    args = dict(days=2, seed=3, runs_per_day=30) | kwargs
    return sample.write_sample(path, end_utc=end, **args)


@pytest.mark.system  # writes two generations: seconds
def test_two_generations_with_the_same_seed_sit_side_by_side_in_one_store(tmp_path):
    # The new user's case: the demo's sample, then `budgetlens sample` with the same seed and
    # another end date. Run numbers restart at 1, so ids without the end date collided.
    db = tmp_path / "two.duckdb"
    first = _generation(db, dt.datetime(2026, 1, 10))
    second = _generation(db, dt.datetime(2026, 1, 20))
    runs, mismatched, mixed = _rows(
        db,
        """
        WITH c AS (SELECT run_id, count(*) AS calls,
                          count(DISTINCT coalesce(response_model, request_model)) AS models
                   FROM model_calls GROUP BY run_id)
        SELECT count(*), count(*) FILTER (WHERE r.turns <> coalesce(c.calls, 0)),
               count(*) FILTER (WHERE c.models > 1 AND NOT contains(r.models, ','))
        FROM runs r LEFT JOIN c USING (run_id)""",
    )[0]
    assert runs == first + second
    assert mismatched == 0 and mixed == 0
    prefixes = {run_id.rsplit("-", 1)[0] for (run_id,) in _rows(db, "SELECT run_id FROM runs")}
    assert prefixes == {"sample-20260110-s3-d2-r30", "sample-20260120-s3-d2-r30"}


@pytest.mark.system  # writes a generation twice: seconds
def test_writing_the_same_generation_again_adds_nothing(tmp_path):
    db = tmp_path / "again.duckdb"
    runs = _generation(db, dt.datetime(2026, 1, 10))
    counts = (
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM model_calls), "
        "(SELECT count(*) FROM budget_events)"
    )
    before = _rows(db, counts)
    assert _generation(db, dt.datetime(2026, 1, 10)) == runs
    assert _rows(db, counts) == before and before[0][0] == runs


@pytest.mark.parametrize(
    "changed",
    [
        dict(seed=4),
        dict(end_utc=dt.datetime(2026, 1, 11)),
        dict(days=3),
        dict(runs_per_day=31),
        dict(end_utc=dt.datetime(2026, 1, 10, 6)),
    ],
)
def test_every_argument_that_changes_the_rows_changes_the_ids(changed):
    base = dict(seed=3, end_utc=dt.datetime(2026, 1, 10), days=2, runs_per_day=30)
    ids = {
        name: {r["run_id"] for _, records, _ in sample.generate_sample(**args) for r in records}
        for name, args in (("base", base), ("changed", base | changed))
    }
    assert ids["base"] and ids["changed"]
    assert not ids["base"] & ids["changed"]


def test_ids_of_calls_events_and_traces_belong_to_their_run():
    calls, records, events = next(
        sample.generate_sample(days=1, seed=7, runs_per_day=20, end_utc=sample.SAMPLE_END_UTC)
    )
    run_ids = {r["run_id"] for r in records}
    assert all(r.startswith("sample-20261128-s7-d1-r20-") for r in run_ids)
    assert all(c["span_id"].startswith(c["run_id"] + ".c") for c in calls)
    assert all(e["event_id"].startswith(e["run_id"] + ".e") for e in events)
    traces = {r["trace_id"] for r in records}
    assert len(traces) == len(records) and all(len(t) == 32 for t in traces)
    int(next(iter(traces)), 16)  # hex: a valid OTel trace id


def test_committed_sample_ids_name_its_generation(store):
    prefixes = _rows(store, "SELECT DISTINCT regexp_extract(run_id, '^(.*)-[0-9]+$', 1) FROM runs")
    assert prefixes == [("sample-20261128-s7",)]


@pytest.mark.system  # regenerates the whole sample
def test_committed_sample_file_is_what_the_generator_writes_byte_for_byte(tmp_path):
    import gzip
    import json

    with gzip.open(sample.SAMPLE_FILE, "rt", encoding="utf-8") as lines:
        header = json.loads(next(lines))
    again = tmp_path / "again.jsonl.gz"
    sample.export_sample_jsonl(
        again,
        days=header["days"],
        seed=header["seed"],
        runs_per_day=header["runs_per_day"],
        end_utc=dt.datetime.fromisoformat(header["end_utc"]),
    )
    assert (header["seed"], header["end_utc"]) == (sample.SAMPLE_SEED, "2026-11-28T00:00:00")
    assert again.read_bytes() == sample.SAMPLE_FILE.read_bytes()


def test_demo_store_covers_the_fourteen_days_that_end_when_it_was_built(store):
    first, last, ended, n = _rows(
        store, "SELECT min(start_utc), max(start_utc), max(end_utc), count(*) FROM runs"
    )[0]
    built = sample.demo_end_utc()  # the session fixture was built minutes ago at most
    assert built - dt.timedelta(days=14, hours=2) <= first
    assert built - dt.timedelta(hours=2) < last < built + dt.timedelta(minutes=1)
    assert ended <= built + dt.timedelta(minutes=1)  # nothing ends in the future
    assert n > 14 * 150
    assert sample.SAMPLE_FILE.stat().st_size < 5_000_000


@pytest.mark.system  # loads the committed sample again: seconds
def test_the_demo_sample_is_the_committed_one_moved_in_time(tmp_path):
    """Shifted to end at a chosen time: the same runs (ids, tokens) as the file, every time moved
    by the same amount, so the demo is reproducible from its seed whenever it is built."""
    end = dt.datetime(2030, 5, 17, 13, 45)
    fixed = list(sample.read_sample_file(batch_runs=50))[0]
    moved = list(sample.read_sample_file(batch_runs=50, end_utc=end))[0]
    shift = end - sample.SAMPLE_END_UTC
    for before, after in zip(fixed[1], moved[1]):
        assert after["run_id"] == before["run_id"] and after["total_tokens"] == before["total_tokens"]
        assert after["start_utc"] - before["start_utc"] == shift
        assert after["end_utc"] - before["end_utc"] == shift
    assert all(a["ts_utc"] - b["ts_utc"] == shift for b, a in zip(fixed[2], moved[2]))
    assert all(a["start_utc"] - b["start_utc"] == shift for b, a in zip(fixed[0], moved[0]))


def test_task_types_have_their_typical_sizes(store):
    medians = dict(_rows(store, "SELECT task_type, median(total_tokens) FROM runs GROUP BY 1"))
    assert set(medians) == set(SIZES)
    for task_type, (low, high) in SIZES.items():
        assert low <= medians[task_type] <= high, task_type


def test_runaway_loops_are_one_to_three_percent_of_unlimited_runs(store):
    unlimited, runaways = _rows(
        store,
        """
        WITH m AS (SELECT task_type, median(total_tokens) AS med FROM runs GROUP BY 1)
        SELECT count(*), count(*) FILTER (WHERE total_tokens > 8 * med)
        FROM runs JOIN m USING (task_type) WHERE limit_total_tokens IS NULL""",
    )[0]
    assert 0.01 <= runaways / unlimited <= 0.03


def test_runs_under_a_limit_never_use_more_than_it(store):
    over = _rows(
        store,
        """SELECT count(*) FROM runs
                           WHERE total_tokens > limit_total_tokens OR turns > limit_turns
                              OR tool_calls > limit_tool_calls""",
    )[0][0]
    limited = _rows(store, "SELECT count(*) FROM runs WHERE limit_total_tokens IS NOT NULL")[0][0]
    assert over == 0 and limited > 0


def test_every_budget_stop_has_one_stop_event_with_its_reason(store):
    mismatched = _rows(
        store,
        """
        SELECT r.run_id FROM runs r
        LEFT JOIN budget_events e ON e.run_id = r.run_id AND e.name = 'budgetlens.stop'
        WHERE starts_with(r.stop_reason, 'budget_')
        GROUP BY r.run_id, r.stop_reason
        HAVING count(e.event_id) <> 1 OR any_value(e.reason) <> r.stop_reason""",
    )
    stops = dict(_rows(store, "SELECT stop_reason, count(*) FROM runs GROUP BY 1"))
    assert mismatched == []
    assert {"budget_tokens", "budget_turns", "budget_tools", "failed", "completed"} <= set(stops)


def test_downgraded_runs_switch_to_the_next_model(store):
    rows = _rows(
        store,
        """SELECT e.from_model, e.to_model, r.models FROM budget_events e
                           JOIN runs r USING (run_id) WHERE e.name = 'budgetlens.downgrade'""",
    )
    assert rows
    for from_model, to_model, models in rows:
        assert generator.DOWNGRADE_CHAIN[from_model] == to_model
        # a downgrade after the run's last call leaves only the first model
        assert from_model in models.split(",") and set(models.split(",")) <= {from_model, to_model}
    assert any("," in models for _, _, models in rows), "some runs go on with the cheaper model"


def test_calls_carry_cache_reasoning_and_a_little_unknown_usage(store):
    cache, reasoning, unknown, calls = _rows(
        store,
        """
        SELECT sum(cache_read_tokens + cache_write_tokens), sum(reasoning_tokens),
               count(*) FILTER (WHERE usage_status = 'unknown'), count(*) FROM model_calls""",
    )[0]
    assert cache > 0 and reasoning > 0
    assert 0 < unknown / calls < 0.02
    nulls = _rows(
        store,
        """SELECT count(*) FROM model_calls WHERE usage_status = 'unknown'
                            AND (total_tokens IS NOT NULL OR reserved_tokens IS NULL)""",
    )[0][0]
    assert nulls == 0, "unknown usage keeps NULL tokens and its reservation"


def test_priced_calls_cost_what_genai_prices_says_and_one_model_is_unpriced(store):
    rows = _rows(
        store,
        """SELECT response_model, provider_name, input_tokens, output_tokens,
                                  cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd
                           FROM model_calls WHERE usage_status = 'reported'
                           QUALIFY row_number() OVER (ORDER BY span_id) % 50 = 0""",
    )
    assert len(rows) > 100
    for model, provider, i, o, cr, cw, rs, cost in rows:
        expected = cost_usd(model, Usage(i, o, cr, cw, rs), provider=provider)
        assert cost == (None if expected is None else pytest.approx(expected)), model
    unpriced = _rows(
        store,
        "SELECT DISTINCT response_model FROM model_calls WHERE cost_usd IS NULL"
        " AND usage_status = 'reported'",
    )
    assert unpriced == [("llama-3.1-8b-instruct",)]


def test_cumulative_used_tokens_grow_to_the_run_total(store):
    bad = _rows(
        store,
        """
        WITH c AS (SELECT run_id, used_tokens,
                          lag(used_tokens) OVER (PARTITION BY run_id ORDER BY turn) AS prev,
                          last_value(used_tokens) OVER (PARTITION BY run_id ORDER BY turn
                              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last
                   FROM model_calls)
        SELECT count(*) FROM c JOIN runs r USING (run_id)
        WHERE c.used_tokens < c.prev OR c.last <> r.total_tokens""",
    )[0][0]
    assert bad == 0


@pytest.mark.system  # generates weeks of runs: seconds
def test_weekdays_are_busier_than_weekends():
    """On the file's own dates (the demo store moves them to end now, weekdays and all)."""
    runs: dict[bool, int] = {True: 0, False: 0}
    days: dict[bool, set] = {True: set(), False: set()}
    for _, records, _ in sample.read_sample_file():
        for record in records:
            weekend = record["start_utc"].weekday() >= 5
            runs[weekend] += 1
            days[weekend].add(record["start_utc"].date())
    assert runs[False] / len(days[False]) > 2 * runs[True] / len(days[True])


@pytest.mark.system  # generates a sample: seconds
def test_the_incident_day_has_the_highest_hit_rate():
    """On the file's own dates (the demo store moves them by a fraction of a day too)."""
    limited: dict[dt.date, list[int]] = {}
    for _, records, _ in sample.read_sample_file():
        for record in records:
            if record.get("limit_total_tokens") is not None:
                day = limited.setdefault(record["start_utc"].date(), [0, 0])
                day[0] += str(record.get("stop_reason", "")).startswith("budget_")
                day[1] += 1
    rates = sorted(((stops / n, day) for day, (stops, n) in limited.items()), reverse=True)
    incident = sample.SAMPLE_END_UTC - dt.timedelta(days=generator.INCIDENT.day_from_end)
    assert rates[0][1] == incident.date()
    assert rates[0][0] > 1.5 * rates[len(rates) // 2][0]


@pytest.mark.system  # writes, exports and loads a sample: seconds
def test_exported_file_loads_into_the_same_runs_as_a_direct_write(tmp_path):
    end = dt.datetime(2026, 3, 2)
    direct, loaded, path = tmp_path / "d.duckdb", tmp_path / "l.duckdb", tmp_path / "s.jsonl.gz"
    assert sample.write_sample(
        direct, days=2, seed=11, runs_per_day=30, end_utc=end
    ) == sample.export_sample_jsonl(path, days=2, seed=11, runs_per_day=30, end_utc=end)
    sample.load_sample_file(path, loaded)
    # the run columns (the runs' call peaks, issue 25, hold USD sums over calls stored in other batches)
    query = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY run_id"
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


@pytest.mark.parametrize("kwargs, message", [(dict(days=0), "days"), (dict(runs_per_day=0), "runs_per_day")])
def test_generator_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        next(sample.generate_sample(**kwargs))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"name,value\n", "not a gzip-compressed budgetlens sample file"),
        (b"\x1f\x8b\x08\x00garbage", "not a gzip-compressed budgetlens sample file"),
        (b"", "line 1 is not a budgetlens sample header"),
    ],
)
def test_a_sample_file_that_is_not_gzip_is_a_value_error_naming_it(tmp_path, content, message):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        sample.load_sample_file(path, tmp_path / "db.duckdb")
    assert str(error.value).startswith(f"{path}: ")
    assert not (tmp_path / "db.duckdb").exists()  # nothing written


def test_a_sample_run_line_of_the_wrong_shape_names_the_line(tmp_path):
    import gzip

    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"budgetlens_sample": 1}\n{"record": {"run_id": "r"}, "calls": [5]}\n'))
    with pytest.raises(ValueError, match=r"x.jsonl.gz: line 2: not a sample run"):
        sample.load_sample_file(path, tmp_path / "db.duckdb")


def test_a_span_of_days_before_the_year_1_is_refused():
    with pytest.raises(ValueError, match="days must reach no further back than the year 1"):
        next(sample.generate_sample(days=10**6, end_utc=dt.datetime(2026, 1, 1)))
