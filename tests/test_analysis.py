"""Analysis against hand-computed values: percentiles (n = 1, 2, 19, 20), presets and their
rounding, low-sample flags, current limits and the change against them."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from budgetlens.analysis import views as analysis
from budgetlens.analysis.preset_export import build_document
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 11, 2, 12, 0, 0)


def _record(i, task_type="qa", **fields):
    row = dict(
        run_id=f"{task_type}-{i:03d}",
        source="test",
        task_type=task_type,
        service_name="svc",
        model="gpt-4.1-mini",
        start_utc=T0 + dt.timedelta(minutes=i),
        stop_reason="completed",
        usage_status="reported",
    )
    row.update(fields)
    return row


def _store(db_path, records, calls=(), events=()):
    with write_connection(db_path) as conn:
        write_batch(conn, list(calls), list(records), list(events))
    return db_path


def _baselines(db_path, **kw):
    with read_connection(db_path) as conn:
        return analysis.baselines(conn, Filters(**kw)).set_index("task_type")


def test_one_run_has_p50_p95_and_max_equal(db_path):
    _store(db_path, [_record(0, total_tokens=4321, turns=3, duration_s=12.5, cost_usd=0.02)])
    row = _baselines(db_path).loc["qa"]
    assert row["n"] == 1 and bool(row["low_sample"])
    assert row["p50_total_tokens"] == row["p95_total_tokens"] == row["max_total_tokens"] == 4321
    assert row["p95_duration_s"] == 12.5


def test_two_runs_interpolate_linearly_between_them(db_path):
    _store(db_path, [_record(0, total_tokens=1000, turns=1), _record(1, total_tokens=3000, turns=5)])
    row = _baselines(db_path).loc["qa"]
    assert row["p50_total_tokens"] == 2000  # 1000 + 0.5 x 2000
    assert row["p95_total_tokens"] == pytest.approx(2900)  # 1000 + 0.95 x 2000
    assert row["p95_turns"] == pytest.approx(4.8)  # 1 + 0.95 x 4
    assert row["max_total_tokens"] == 3000


@pytest.mark.parametrize("n, low_sample", [(19, True), (20, False)])
def test_p95_is_linear_quantile_and_never_above_max(db_path, n, low_sample):
    tokens = [1000 * (k + 1) ** 2 for k in range(n)]  # skewed: a heavy last value
    _store(db_path, [_record(k, total_tokens=t) for k, t in enumerate(tokens)])
    row = _baselines(db_path).loc["qa"]
    # hand computation: rank h = 0.95 (n-1); interpolate between sorted[floor h], sorted[ceil h]
    h = 0.95 * (n - 1)
    lo, frac = int(h), h - int(h)
    expected = tokens[lo] + frac * (tokens[min(lo + 1, n - 1)] - tokens[lo])
    assert row["p95_total_tokens"] == pytest.approx(expected)
    assert row["p95_total_tokens"] == pytest.approx(np.percentile(tokens, 95, method="linear"))
    assert row["p95_total_tokens"] <= row["max_total_tokens"] == max(tokens)
    assert bool(row["low_sample"]) is low_sample


def test_baselines_keep_unpriced_cost_null_not_zero(db_path):
    _store(db_path, [_record(0, total_tokens=100), _record(1, total_tokens=200)])
    row = _baselines(db_path).loc["qa"]
    assert pd.isna(row["p95_cost_usd"]) and pd.isna(row["max_cost_usd"])


def test_baselines_by_model_split_each_task_type(db_path):
    _store(
        db_path,
        [
            _record(0, total_tokens=100, model="a"),
            _record(1, total_tokens=300, model="b"),
            _record(2, total_tokens=500, model="b"),
        ],
    )
    with read_connection(db_path) as conn:
        frame = analysis.baselines(conn, Filters(), by_model=True)
    assert frame[["task_type", "model", "n"]].values.tolist() == [["qa", "a", 1], ["qa", "b", 2]]
    assert frame.loc[frame.model == "b", "p50_total_tokens"].item() == 400


def test_empty_window_gives_baseline_columns_and_no_rows(db_path):
    _store(db_path, [_record(0, total_tokens=100)])
    frame = _baselines(db_path, start_utc=T0 + dt.timedelta(days=1))
    assert frame.empty
    assert {"n", "low_sample", "p95_total_tokens", "max_cost_usd"} <= set(frame.columns)


@pytest.mark.parametrize(
    "value, step, expected",
    [
        (60000.0, 1000, 60000),  # an exact multiple stays
        (60000.00000001, 1000, 60000),  # float noise does not add a step
        (60001, 1000, 61000),
        (1.0, 1000, 1000),
        (12.0, 1, 12),
        (12.01, 1, 13),
        (300, 5, 300),
        (300.2, 5, 305),
        (0.43, 0.01, 0.43),
        (0.4301, 0.01, 0.44),
        (0.001, 0.01, 0.01),
        (None, 1000, None),
    ],
)
def test_round_up_follows_the_preset_rules(value, step, expected):
    assert analysis.round_up(value, step) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (0.01365, 0.014),  # the example
        (0.44, 0.44),  # two figures already: stays
        (0.44000000000000006, 0.44),  # float noise (0.2933.. x 1.5) does not add a unit
        (1.234, 1.3),
        (0.0091 * 1.5, 0.014),  # simple_qa P95 $0.0091 x 1.5 = 0.01365: 1.5x, not 2.2x
        (0.000123, 0.00013),
        (9.91, 10.0),  # rounding up crosses a power of ten
        (99.1, 100.0),
        (12.01, 13.0),
        (1234.5, 1300.0),
        (0.0, 0.0),  # no figure to round (preset_limit leaves a $0 limit out)
        (None, None),
        (float("nan"), None),
    ],
)
def test_round_up_significant_rounds_up_to_two_figures(value, expected):
    assert analysis.round_up_significant(value) == expected


def test_a_cheap_task_types_cost_preset_stays_near_p95_times_multiplier():
    # simple_qa in the sample: P95 $0.0091; the cent rule gave $0.02 (2.2x), now $0.014 (1.54x)
    limit = analysis.preset_limit("max_cost_usd", 0.0091, 1.5)
    assert limit == 0.014
    assert 1.5 <= limit / 0.0091 <= 1.5 * 1.1


def test_presets_are_p95_times_multiplier_rounded_up():
    base = pd.DataFrame(
        [
            {
                "task_type": "qa",
                "n": 40,
                "low_sample": False,
                "p95_total_tokens": 4100.0,
                "p95_input_tokens": 3000.0,
                "p95_output_tokens": 700.0,
                "p95_turns": 3.2,
                "p95_tool_calls": 0.0,
                "p95_duration_s": 21.0,
                "p95_cost_usd": 0.0123,
            }
        ]
    )
    row = analysis.presets(base, 1.5).iloc[0]
    assert row["max_total_tokens"] == 7000  # 6150 -> 7000
    assert row["max_input_tokens"] == 5000  # 4500 -> 5000
    assert row["max_output_tokens"] == 2000  # 1050 -> 2000
    assert row["max_turns"] == 5  # 4.8 -> 5
    assert row["max_tool_calls"] == 1  # 0 -> 1: a preset is never 0
    assert row["max_duration_s"] == 35  # 31.5 -> 35
    assert row["max_cost_usd"] == 0.019  # 0.01845 -> 0.019 (2 significant figures)
    assert row["n"] == 40 and not row["low_sample"]


def test_presets_leave_unknown_p95_empty_and_refuse_bad_multiplier():
    base = pd.DataFrame(
        [
            {
                "task_type": "qa",
                "n": 1,
                "low_sample": True,
                "p95_total_tokens": 900.0,
                "p95_cost_usd": float("nan"),
            }
        ]
    )
    row = analysis.presets(base, 2).iloc[0]
    assert row["max_total_tokens"] == 2000 and row["max_cost_usd"] is None and row["low_sample"]
    with pytest.raises(ValueError, match="multiplier"):
        analysis.presets(base, 0)


def test_a_zero_p95_gives_the_smallest_step_and_leaves_a_zero_cost_limit_out():
    # A free model that answers without tools and at once: every P95 but tokens is 0.
    base = pd.DataFrame(
        [
            {
                "task_type": "free",
                "n": 30,
                "low_sample": False,
                "p95_total_tokens": 0.0,
                "p95_input_tokens": 0.0,
                "p95_output_tokens": 0.0,
                "p95_turns": 0.0,
                "p95_tool_calls": 0.0,
                "p95_duration_s": 0.0,
                "p95_cost_usd": 0.0,
            }
        ]
    )
    row = analysis.presets(base, 1.5).iloc[0]
    assert (row["max_total_tokens"], row["max_input_tokens"], row["max_output_tokens"]) == (1000, 1000, 1000)
    assert (row["max_turns"], row["max_tool_calls"], row["max_duration_s"]) == (1, 1, 5)
    assert row["max_cost_usd"] is None  # a $0 limit would stop every run: left out


def test_a_preset_from_a_free_model_lets_the_guard_start_a_run():
    from budgetlens.guard.run_budget import RunBudget

    base = pd.DataFrame(
        [
            {
                "task_type": "free",
                "n": 30,
                "low_sample": False,
                "p95_total_tokens": 800.0,
                "p95_turns": 2.0,
                "p95_cost_usd": 0.0,
            }
        ]
    )
    row = analysis.presets(base, 1.5).iloc[0]
    limits = {k: row[k] for k in ("max_total_tokens", "max_turns", "max_cost_usd") if row[k] is not None}
    assert limits == {"max_total_tokens": 2000, "max_turns": 3}
    budget = RunBudget(**limits)
    budget.before_turn()  # a $0 cost limit would raise here
    assert budget.reserve(1000) is not None


@pytest.mark.parametrize("multiplier", [float("inf"), float("nan"), -1.0, 0, True, "1.5"])
def test_presets_refuse_a_multiplier_that_is_not_a_finite_positive_number(multiplier):
    base = pd.DataFrame([{"task_type": "qa", "n": 1, "low_sample": True, "p95_total_tokens": 900.0}])
    with pytest.raises(ValueError, match="multiplier must be a finite number > 0"):
        analysis.presets(base, multiplier)


def test_presets_name_the_key_when_p95_times_multiplier_overflows():
    base = pd.DataFrame([{"task_type": "qa", "n": 1, "low_sample": True, "p95_total_tokens": 900.0}])
    with pytest.raises(ValueError, match="max_total_tokens.*not a finite number"):
        analysis.presets(base, 1e308)


def test_runs_without_a_tool_call_count_give_no_tool_call_preset(db_path):
    # imported history whose source does not count tool calls: tool_calls is NULL, not 0
    _store(
        db_path,
        [
            _record(0, task_type="imported", total_tokens=1000, turns=2),
            _record(1, task_type="imported", total_tokens=3000, turns=4),
            _record(2, task_type="mixed", total_tokens=1000, tool_calls=4),
            _record(3, task_type="mixed", total_tokens=1000),
        ],
    )
    base = _baselines(db_path)
    assert pd.isna(base.loc["imported", "p95_tool_calls"])
    assert base.loc["mixed", "p95_tool_calls"] == 4  # the counted run alone
    recommended = analysis.presets(base.reset_index()).set_index("task_type")
    assert pd.isna(recommended.loc["imported", "max_tool_calls"])
    assert recommended.loc["imported", "max_turns"] == 6  # P95 3.9 x 1.5 = 5.85, rounded up
    assert recommended.loc["mixed", "max_tool_calls"] == 6
    doc = build_document(recommended.reset_index(), 1.5, None, base.reset_index())
    assert "max_tool_calls" not in doc["presets"]["imported"]
    assert doc["presets"]["mixed"]["max_tool_calls"] == 6


def test_cost_baselines_use_only_runs_whose_cost_is_fully_known(db_path):
    def call(run_id, turn, cost, status="reported"):
        tokens = (900, 100, 1000) if status == "reported" else (None, None, None)
        return dict(
            span_id=f"{run_id}.c{turn}",
            run_id=run_id,
            source="test",
            task_type="qa",
            request_model="m",
            start_utc=T0,
            turn=turn,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            total_tokens=tokens[2],
            cost_usd=cost,
            usage_status=status,
            reserved_tokens=2000,
        )

    records = [_record(k, total_tokens=1000) for k in range(5)]
    calls = [
        call("qa-000", 1, 0.10),
        call("qa-000", 2, 0.10),  # fully priced: $0.20
        call("qa-001", 1, 0.30),  # fully priced: $0.30
        call("qa-002", 1, 0.50),
        call("qa-002", 2, None),  # + an unpriced 1,000-token call
        call("qa-003", 1, 0.90),
        call("qa-003", 2, None, "unknown"),  # + unknown usage
        call("qa-004", 1, None),  # unpriced: no cost at all
    ]
    _store(db_path, records, calls)
    row = _baselines(db_path).loc["qa"]
    assert (row["n"], row["n_cost"]) == (5, 2)
    assert row["p50_cost_usd"] == pytest.approx(0.25)  # of 0.20 and 0.30 only
    assert row["p95_cost_usd"] == pytest.approx(0.20 + 0.95 * 0.10)
    assert row["max_cost_usd"] == pytest.approx(0.30)  # not the partial 0.90
    with read_connection(db_path) as conn:
        o = analysis.overview(conn, Filters())
    assert o.cost_usd == pytest.approx(0.20 + 0.30 + 0.50 + 0.90)  # known spend
    assert (o.priced_runs, o.partially_priced_runs, o.unpriced_calls) == (4, 2, 2)
    assert o.cost_is_lower_bound


def test_overview_of_fully_priced_runs_is_not_a_lower_bound(db_path):
    _store(db_path, [_record(0, cost_usd=0.2), _record(1, cost_usd=0.3)])
    with read_connection(db_path) as conn:
        o = analysis.overview(conn, Filters())
    assert (o.priced_runs, o.partially_priced_runs) == (2, 0)
    assert not o.cost_is_lower_bound


def test_current_limits_are_the_latest_with_the_date_they_took_effect(db_path):
    # issue 24: 50 runs at 12,000 then 15 under an exported 18,000 preset -> current is 18,000
    records = [_record(i, limit_total_tokens=12000, limit_turns=4) for i in range(50)]
    records += [_record(50 + i, limit_total_tokens=18000, limit_cost_usd=0.5) for i in range(15)]
    records += [_record(70)]  # no limit: not a period
    _store(db_path, records)
    with read_connection(db_path) as conn:
        row = analysis.current_limits(conn, Filters()).iloc[0]
        history = analysis.limit_history(conn, Filters())
    assert row["limit_total_tokens"] == 18000 and row["limit_cost_usd"] == 0.5
    assert pd.isna(row["limit_turns"])
    assert row["since_utc"] == T0 + dt.timedelta(minutes=50)
    assert (row["runs_since"], row["changes"]) == (15, 1)
    assert history["limit_total_tokens"].tolist() == [12000, 18000]
    assert history["runs"].tolist() == [50, 15]
    assert history["since_utc"].tolist() == [T0, T0 + dt.timedelta(minutes=50)]


def test_preset_changes_compare_recommended_with_current():
    presets = pd.DataFrame(
        [
            {
                "task_type": "qa",
                "n": 30,
                "low_sample": False,
                "max_total_tokens": 7000,
                "max_turns": 5,
                "max_input_tokens": None,
                "max_output_tokens": None,
                "max_tool_calls": None,
                "max_duration_s": None,
                "max_cost_usd": 0.02,
            }
        ]
    )
    current = pd.DataFrame(
        [
            {
                "task_type": "qa",
                "limit_total_tokens": 5000,
                "limit_turns": 5,
                "limit_input_tokens": None,
                "limit_output_tokens": None,
                "limit_tool_calls": None,
                "limit_duration_s": None,
                "limit_cost_usd": None,
            }
        ]
    )
    changes = analysis.preset_changes(presets, current).set_index("key")
    assert changes.loc["max_total_tokens", "change_pct"] == pytest.approx(40.0)
    assert changes.loc["max_turns", "change_pct"] == 0
    assert pd.isna(changes.loc["max_cost_usd", "current"])
    assert pd.isna(changes.loc["max_cost_usd", "change_pct"])
    assert len(changes) == 7


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tz="Mars/Olympus"), "tz"),
        (dict(start_utc=T0, end_utc=T0), "start_utc"),
        (dict(start_utc="2026-11-02"), "start_utc"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Filters(**kwargs)


@pytest.mark.parametrize("days", [0, -1, float("nan"), None, "14"])
def test_window_filters_refuse_a_window_that_is_not_positive(days):
    with pytest.raises(ValueError, match="days must be a number > 0"):
        analysis.window_filters(days, now_utc=T0)


@pytest.mark.parametrize("days", [float("inf"), 1e300, 10**9])
def test_a_window_longer_than_the_calendar_has_no_start_bound(days):
    f = analysis.window_filters(days, now_utc=T0)
    assert f.start_utc is None and f.end_utc > T0


def test_window_filters_include_the_newest_run_itself(db_path):
    _store(db_path, [_record(0, total_tokens=1), _record(60 * 24 * 3, total_tokens=2)])
    with read_connection(db_path) as conn:
        _, newest, n = analysis.data_extent(conn)
        frame = analysis.baselines(conn, analysis.window_filters(2, now_utc=newest))
    assert n == 2
    assert frame["n"].tolist() == [1] and frame["max_total_tokens"].tolist() == [2]


def test_a_window_ends_now_not_at_the_newest_run(db_path):
    # a collector that stopped 3 days ago: "last 24 hours" keeps nothing and says what it left out
    stopped = analysis.utc_now() - dt.timedelta(days=3)
    records = [_record(i, start_utc=stopped - dt.timedelta(hours=i)) for i in range(5)]
    _store(db_path, records)
    with read_connection(db_path) as conn:
        f = analysis.window_filters(1)
        coverage = analysis.window_coverage(conn, f)
        kept = analysis.count_runs(conn, f)
    assert f.end_utc <= analysis.utc_now() + dt.timedelta(microseconds=1)
    assert kept == coverage.kept == 0
    assert (coverage.total, coverage.before, coverage.after, coverage.left_out) == (5, 5, 0, 5)
    assert coverage.newest_utc == records[0]["start_utc"]


def test_a_window_never_ends_in_the_future():
    later = analysis.utc_now() + dt.timedelta(days=30)
    f = analysis.window_filters(7, now_utc=later)
    assert f.end_utc <= analysis.utc_now() + dt.timedelta(microseconds=1)
    assert f.end_utc - f.start_utc == dt.timedelta(days=7, microseconds=1)


def test_window_coverage_counts_runs_on_both_sides_of_a_custom_range_in_its_scope(db_path):
    records = [_record(i, start_utc=T0 + dt.timedelta(days=i)) for i in range(10)]
    records += [_record(i, task_type="other", start_utc=T0 + dt.timedelta(days=i)) for i in range(4)]
    _store(db_path, records)
    f = Filters(start_utc=T0 + dt.timedelta(days=2), end_utc=T0 + dt.timedelta(days=5), task_types=("qa",))
    with read_connection(db_path) as conn:
        coverage = analysis.window_coverage(conn, f)
    # qa runs on days 0..9: days 2, 3, 4 kept; 0, 1 before; 5..9 after; "other" is out of scope
    assert (coverage.kept, coverage.before, coverage.after, coverage.total) == (3, 2, 5, 10)
    assert coverage.newest_utc == T0 + dt.timedelta(days=9)


@pytest.mark.parametrize(
    "value, expected",
    [
        (np.float64("nan"), None),
        (pd.NA, None),
        (pd.NaT, None),
        (None, None),
        (np.int64(3), 3),
        (np.float64(2.5), 2.5),
        (pd.Timestamp("2026-11-02 12:00"), dt.datetime(2026, 11, 2, 12, 0)),
        ("text", "text"),
    ],
)
def test_scalar_turns_every_pandas_missing_value_into_none(value, expected):
    result = analysis.scalar(value)
    assert result == expected and type(result) is type(expected)
