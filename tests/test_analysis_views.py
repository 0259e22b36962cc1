"""Analysis views against hand-computed values: hit and intervention rates, day buckets in a
non-UTC zone, cost kept apart from unpriced usage, distributions, the run table and one run."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from _store_rows import call_row

from budgetlens.analysis import views as analysis
from budgetlens.analysis.run_queries import RUN_TABLE_COLUMNS
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection

DAY = dt.datetime(2026, 11, 2)


def _record(run_id, start, task_type="qa", **fields):
    row = dict(
        run_id=run_id,
        source="test",
        task_type=task_type,
        service_name="svc",
        model="gpt-4.1-mini",
        start_utc=start,
        stop_reason="completed",
        usage_status="reported",
        total_tokens=1000,
        cost_usd=0.01,
    )
    row.update(fields)
    return row


def _call(run_id, turn, start, model="gpt-4.1-mini", **fields):
    usage = dict(input_tokens=900, output_tokens=100, total_tokens=1000, cost_usd=0.01)
    return call_row(run_id, turn, start, model, **{**usage, **fields})


@pytest.fixture(scope="module")
def hand_made_store(tmp_path_factory):
    """A store with hand-made runs, written once for the module (the tests only read it); see
    each test for the ones it counts."""
    db_path = tmp_path_factory.mktemp("views") / "store.duckdb"
    at = lambda h, m=0: DAY + dt.timedelta(hours=h, minutes=m)
    records = [
        # budgeted: a, b, f (a limit) and c (stopped by the source's own turn limit, which the
        # source does not record); d and e ran without any budget (imported history)
        _record("a", at(1), limit_cost_usd=0.5),
        _record("b", at(2), stop_reason="budget_tokens", limit_total_tokens=5000),
        _record("c", at(3), stop_reason="budget_turns"),
        _record("d", at(4), stop_reason="failed"),
        _record("e", at(23, 30), task_type="research", cost_usd=None, total_tokens=50000),
        _record(
            "f",
            at(25),
            task_type="research",
            service_name="other",
            stop_reason="budget_cost",
            limit_total_tokens=90000,
            cost_usd=2.5,
            total_tokens=80000,
        ),
    ]
    calls = [
        _call("a", 1, at(1)),
        _call("e", 1, at(23, 30), model="my-llama", cost_usd=None),
        _call("e", 2, at(23, 31), model="my-llama", cost_usd=None),
        _call("f", 1, at(25), model="claude-sonnet-4-5", cost_usd=1.0),
        _call(
            "f",
            2,
            at(25, 5),
            model="claude-haiku-4-5",
            cost_usd=1.5,
            used_tokens=80000,
            reserved_tokens=20000,
        ),
    ]
    events = [
        dict(
            event_id="a.e0",
            run_id="a",
            name="budgetlens.downgrade",
            ts_utc=at(1),
            from_model="gpt-4.1",
            to_model="gpt-4.1-mini",
        ),
        dict(
            event_id="f.e0",
            run_id="f",
            name="budgetlens.warning",
            ts_utc=at(25, 1),
            used_tokens=72000,
            percent=80.0,
        ),
        dict(
            event_id="f.e1",
            run_id="f",
            name="budgetlens.stop",
            ts_utc=at(25, 6),
            reason="budget_cost",
            used_tokens=80000,
        ),
    ]
    with write_connection(db_path) as writer:
        write_batch(writer, calls, records, events)
    return db_path


@pytest.fixture
def conn(hand_made_store):
    """A read connection to the hand-made store (one per test)."""
    with read_connection(hand_made_store) as reader:
        yield reader


def test_hit_rate_counts_budget_stops_over_finished_runs_under_a_budget(conn):
    o = analysis.overview(conn, Filters())
    assert (o.runs, o.finished_runs, o.budgeted_runs) == (6, 6, 4)  # a, b, c, f
    assert o.hit_rate == pytest.approx(3 / 4)  # b, c, f
    assert o.intervention_rate == pytest.approx(4 / 4)  # + a (downgraded)
    per_task = o.per_task.set_index("task_type")
    assert per_task.loc["qa", "budgeted_runs"] == 3  # a, b, c (not d)
    assert per_task.loc["qa", "hit_rate"] == pytest.approx(2 / 3)
    assert per_task.loc["research", "budgeted_runs"] == 1  # f (not e)
    assert per_task.loc["research", "hit_rate"] == pytest.approx(1 / 1)
    assert o.alarms() == ["qa", "research"]


def test_runs_without_any_budget_have_no_hit_rate(conn):
    # d (failed) and e (completed) ran without a limit: nothing a budget could stop
    for f in (
        Filters(start_utc=DAY + dt.timedelta(hours=4), end_utc=DAY + dt.timedelta(hours=24)),
        Filters(task_types=("research",), end_utc=DAY + dt.timedelta(hours=24)),
    ):
        o = analysis.overview(conn, f)
        assert o.finished_runs > 0 and o.budgeted_runs == 0
        assert o.hit_rate is None and o.intervention_rate is None
        assert o.per_task["hit_rate"].isna().all()
        assert o.alarms() == []
        daily = analysis.hit_rate_daily(conn, f)
        assert len(daily) > 0 and (daily["budgeted_runs"] == 0).all()
        assert daily["hit_rate"].isna().all() and daily["intervention_rate"].isna().all()


def test_cost_sums_priced_runs_and_counts_unpriced_calls_apart(conn):
    o = analysis.overview(conn, Filters())
    assert o.cost_usd == pytest.approx(0.01 * 4 + 2.5)
    assert (o.priced_runs, o.unpriced_calls) == (5, 2)
    only_unpriced = analysis.overview(conn, Filters(models=("my-llama",)))
    assert only_unpriced.cost_usd is None  # never $0
    assert only_unpriced.unpriced_calls == 2


def test_day_buckets_follow_the_time_zone(conn):
    utc = analysis.hit_rate_daily(conn, Filters(task_types=("research",)))
    tokyo = analysis.hit_rate_daily(conn, Filters(task_types=("research",), tz="Asia/Tokyo"))
    # e at 23:30 UTC on Nov 2 is 08:30 on Nov 3 in Tokyo; f at 01:00 UTC Nov 3 is Nov 3 in both.
    assert utc[["day", "finished_runs"]].values.tolist() == [
        [dt.date(2026, 11, 2), 1],
        [dt.date(2026, 11, 3), 1],
    ]
    assert tokyo[["day", "finished_runs", "budgeted_runs", "budget_stops"]].values.tolist() == [
        [dt.date(2026, 11, 3), 2, 1, 1]
    ]
    assert tokyo["hit_rate"].tolist() == [1.0]  # f stopped; e had no budget
    assert pd.isna(utc["hit_rate"].iloc[0])  # Nov 2 UTC: only e, no budget


def test_hourly_cost_is_local_time(conn):
    frame = analysis.cost_by_period(
        conn, Filters(task_types=("research",), tz="America/New_York"), "hour", "task_type"
    )
    # November 2026 in New York is UTC-5: 23:30 UTC -> 18:00 local, 01:00 UTC -> 20:00 local.
    assert frame["period_start"].dt.hour.tolist() == [18, 20]
    assert pd.isna(frame["cost_usd"].iloc[0]) and frame["unpriced_calls"].iloc[0] == 2


def test_cost_per_day_is_the_same_by_model_and_by_task_type(conn):
    by_model = analysis.cost_by_period(conn, Filters(), "day", "model")
    by_task = analysis.cost_by_period(conn, Filters(), "day", "task_type")
    assert (
        by_model.groupby("period_start")["cost_usd"].sum().round(9).to_dict()
        == by_task.groupby("period_start")["cost_usd"].sum().round(9).to_dict()
    )
    keys = set(by_model["key"])
    assert {"claude-sonnet-4-5", "claude-haiku-4-5", "my-llama", "gpt-4.1-mini"} <= keys
    llama = by_model[by_model.key == "my-llama"].iloc[0]
    assert pd.isna(llama["cost_usd"]) and llama["unpriced_calls"] == 2


@pytest.mark.parametrize("period, by", [("fortnight", "model"), ("day", "service")])
def test_cost_by_period_refuses_unknown_period_or_key(conn, period, by):
    with pytest.raises(ValueError, match="period|by"):
        analysis.cost_by_period(conn, Filters(), period, by)


@pytest.mark.parametrize("period", ["week", "month"])
def test_weekly_and_monthly_cost_add_up_the_days(conn, period):
    # the roll-up of long ranges: the same total, buckets starting on a Monday or a 1st (local)
    days = analysis.cost_by_period(conn, Filters(), "day", "task_type")
    rolled = analysis.cost_by_period(conn, Filters(), period, "task_type")
    assert rolled["cost_usd"].sum() == pytest.approx(days["cost_usd"].sum())
    assert rolled["runs"].sum() == days["runs"].sum()
    starts = pd.to_datetime(rolled["period_start"])
    assert (starts.dt.day_of_week == 0).all() if period == "week" else (starts.dt.day == 1).all()


def test_cost_histogram_uses_log_buckets_and_skips_unpriced(conn):
    frame = analysis.cost_per_run(conn, Filters(), per_decade=1)
    assert frame[["task_type", "bucket_low_usd", "bucket_high_usd", "runs"]].values.tolist() == [
        ["qa", 0.01, pytest.approx(0.1), 4],
        ["research", 1.0, 10.0, 1],
    ]


def test_token_histogram_counts_every_run_once(conn):
    frame = analysis.token_distribution(conn, Filters())
    assert frame.groupby("task_type")["runs"].sum().to_dict() == {"qa": 4, "research": 2}
    assert (frame["bucket_low_tokens"] < frame["bucket_high_tokens"]).all()


def test_stop_reasons_count_runs_per_reason(conn):
    frame = analysis.stop_reasons(conn, Filters(task_types=("qa",)))
    assert dict(zip(frame.stop_reason, frame.runs)) == {
        "completed": 1,
        "budget_tokens": 1,
        "budget_turns": 1,
        "failed": 1,
    }


def test_model_filter_matches_any_model_of_a_run(conn):
    frame = analysis.runs_table(conn, Filters(models=("claude-haiku-4-5",)))
    assert frame["run_id"].tolist() == ["f"]
    assert frame["models"].tolist() == ["claude-haiku-4-5,claude-sonnet-4-5"]


def test_service_filter_and_options(conn):
    assert analysis.runs_table(conn, Filters(services=("other",)))["run_id"].tolist() == ["f"]
    options = analysis.filter_options(conn)
    assert options["task_types"] == ["qa", "research"]
    assert options["services"] == ["other", "svc"]
    assert "my-llama" in options["models"]


def test_runs_table_is_newest_first_searchable_and_paged(conn):
    assert analysis.runs_table(conn, Filters())["run_id"].tolist() == list("fedcba")
    found = analysis.runs_table(conn, Filters(), search="BUDGET_")["run_id"].tolist()
    assert found == ["f", "c", "b"]
    assert analysis.runs_table(conn, Filters(), limit=2, offset=1)["run_id"].tolist() == ["e", "d"]
    assert list(analysis.runs_table(conn, Filters()).columns) == list(RUN_TABLE_COLUMNS)


def test_top_runs_are_the_most_expensive_priced_runs(conn):
    assert analysis.top_runs(conn, Filters(), limit=2)["run_id"].tolist()[0] == "f"
    assert "e" not in analysis.top_runs(conn, Filters())["run_id"].tolist()


def test_run_detail_draws_cumulative_tokens_against_the_limit(conn):
    detail = analysis.run_detail(conn, "f")
    assert detail.run["limit_total_tokens"] == 90000 and detail.run["stop_reason"] == "budget_cost"
    # turn 1 has no recorded used_tokens: running sum; turn 2 carries the guard's figure.
    assert detail.calls["cumulative_tokens"].tolist() == [1000, 80000]
    assert detail.calls["limit_total_tokens"].tolist() == [90000, 90000]
    assert detail.events["name"].tolist() == ["budgetlens.warning", "budgetlens.stop"]
    assert analysis.run_detail(conn, "nope") is None


def test_empty_selection_returns_columns_and_no_rows(conn):
    none = Filters(task_types=("nothing",))
    assert analysis.hit_rate_daily(conn, none).empty
    assert list(analysis.cost_by_period(conn, none).columns) == [
        "period_start",
        "key",
        "cost_usd",
        "runs",
        "unpriced_calls",
    ]
    o = analysis.overview(conn, none)
    assert (o.runs, o.hit_rate, o.cost_usd, o.p95_total_tokens) == (0, None, None, None)


@pytest.mark.parametrize(
    "tz, midnight_utc, day_before",
    [
        ("Asia/Kolkata", (18, 30), dt.date(2026, 11, 2)),  # UTC+5:30
        ("Asia/Kathmandu", (18, 15), dt.date(2026, 11, 2)),  # UTC+5:45
        ("America/St_Johns", (3, 30), dt.date(2026, 11, 1)),  # UTC-3:30 in November
    ],
)
def test_day_buckets_are_exact_for_zones_with_partial_hour_offsets(db_path, tz, midnight_utc, day_before):
    midnight = DAY + dt.timedelta(hours=midnight_utc[0], minutes=midnight_utc[1])
    records = [_record("x", midnight - dt.timedelta(seconds=1)), _record("y", midnight)]
    with write_connection(db_path) as writer:
        write_batch(writer, [], records, [])
    with read_connection(db_path) as reader:
        days = analysis.hit_rate_daily(reader, Filters(tz=tz))
        hours = analysis.cost_by_period(reader, Filters(tz=tz), "hour", "task_type")
    assert days["day"].tolist() == [day_before, day_before + dt.timedelta(days=1)]
    assert days["finished_runs"].tolist() == [1, 1]
    assert hours["period_start"].dt.hour.tolist() == [23, 0]
