"""What-if replay against a hand-made history: every stop, its turn and reason, and the tokens
and USD avoided were counted by hand (see each run's comment)."""

from __future__ import annotations

import datetime as dt
import io
import json

import pandas as pd
import pytest
import yaml

from budgetlens.analysis import whatif
from budgetlens.analysis.views import Filters
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 11, 2, 12, 0, 0)
#: The candidate budget of the hand count (the same for every task type).
BUDGET = dict(max_total_tokens=1000, max_turns=3, max_cost_usd=1.0, max_duration_s=60, max_tool_calls=3)


def _start(run: str) -> dt.datetime:
    return T0 + dt.timedelta(hours=ord(run) - ord("A"))


def _calls(run: str, tokens, costs, seconds=None, task_type="qa"):
    seconds = seconds or [10 * i for i in range(len(tokens))]
    return [
        dict(
            span_id=f"{run}.c{i + 1}",
            run_id=run,
            source="test",
            task_type=task_type,
            request_model="gpt-4.1-mini",
            start_utc=_start(run) + dt.timedelta(seconds=s),
            turn=i + 1,
            input_tokens=t - t // 4,
            output_tokens=t // 4,
            total_tokens=t,
            cost_usd=c,
            usage_status="reported",
        )
        for i, (t, c, s) in enumerate(zip(tokens, costs, seconds, strict=True))
    ]


def _record(run: str, task_type="qa", **fields):
    row = dict(run_id=run, source="test", task_type=task_type, start_utc=_start(run), usage_status="reported")
    row.setdefault("stop_reason", "completed")
    row.update(fields)
    return row


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The hand-made history, written once per module (the tests only read it)."""
    db_path = tmp_path_factory.mktemp("history") / "store.duckdb"
    calls = [
        *_calls("A", [300, 300, 300], [0.1, 0.1, 0.1]),  # 900 tokens, 3 turns: completes
        *_calls("B", [400, 400, 400, 100], [0.1, 0.1, 0.2, 0.05]),  # call 3 reaches 1,200 > 1,000
        *_calls("C", [100] * 5, [0.01] * 5),  # call 4 is a 4th turn > 3
        *_calls("D", [350, 350], [0.01, 0.01]),  # old budget (800 tokens) stopped it: 1,000 is larger
        *_calls("E", [500, 400], [0.01, 0.01]),  # old budget (2,000) stopped it: 1,000 is not larger
        *_calls("G", [10, 10, 10], [0.5, 0.6, 0.1]),  # $1.10 spent before call 3 >= $1.00
        *_calls("H", [10, 10, 10], [0.01] * 3, seconds=[0, 30, 90]),  # call 3 starts at 90 s >= 60 s
        *_calls("I", [20, 20, 20], [0.02] * 3),  # 4 tool calls before call 2 (at 10 s) > 3
    ]
    records = [_record(r) for r in "ABCGHI"] + [
        _record("D", stop_reason="budget_tokens", limit_total_tokens=800),
        _record("E", stop_reason="budget_tokens", limit_total_tokens=2000),
        _record("J", total_tokens=5000, turns=2),  # no call records: judged on its totals
    ]
    events = [
        dict(
            event_id=f"I.t{k}",
            run_id="I",
            ts_utc=_start("I") + dt.timedelta(seconds=k),
            name="budgetlens.tool_call",
            tool_name="search",
        )
        for k in range(1, 5)
    ]
    with write_connection(db_path) as conn:
        write_batch(conn, calls, records, events)
    return db_path


#: Hand count: run -> (outcome, stop reason, stop turn, avoided tokens, avoided USD).
EXPECTED = {
    "B": ("stopped", "budget_tokens", 3, 400 + 100, 0.2 + 0.05),
    "C": ("stopped", "budget_turns", 4, 100 + 100, 0.01 + 0.01),
    "D": ("censored", None, None, 0, 0.0),
    "E": ("stopped", "budget_tokens", 2, 0, 0.0),
    "G": ("stopped", "budget_cost", 3, 10, 0.1),
    "H": ("stopped", "budget_time", 3, 10, 0.01),
    "I": ("stopped", "budget_tools", 2, 20 + 20, 0.02 + 0.02),
    "J": ("stopped", "budget_tokens", None, 0, 0.0),
}


def _replay(db_path, budget=None):
    with read_connection(db_path) as conn:
        return whatif.replay(conn, Filters(), budget or whatif.Budget.uniform(**BUDGET))


def test_replay_stops_the_hand_counted_runs_at_their_turn_and_reason(history):
    runs = _replay(history).runs.set_index("run_id")
    assert sorted(runs.index) == sorted(EXPECTED)
    for run_id, (outcome, reason, turn, tokens, usd) in EXPECTED.items():
        row = runs.loc[run_id]
        assert row["outcome"] == outcome, run_id
        assert (None if pd.isna(row["stop_reason"]) else row["stop_reason"]) == reason, run_id
        assert (None if pd.isna(row["stop_turn"]) else int(row["stop_turn"])) == turn, run_id
        assert row["avoided_tokens"] == tokens, run_id
        assert row["avoided_cost_usd"] == pytest.approx(usd), run_id


def test_replay_summary_gives_projected_hit_rate_and_savings(history):
    row = _replay(history).summary.set_index("task_type").loc["qa"]
    assert (row["runs"], row["stopped"], row["censored"], row["completed"]) == (9, 7, 1, 1)
    assert row["hit_rate"] == pytest.approx(7 / 9)
    assert row["hit_rate_upper"] == pytest.approx(8 / 9)
    assert (
        row["stops_tokens"],
        row["stops_turns"],
        row["stops_cost"],
        row["stops_time"],
        row["stops_tools"],
    ) == (
        3,
        1,
        1,
        1,
        1,
    )
    assert row["avoided_tokens"] == 500 + 200 + 10 + 10 + 40
    assert row["avoided_cost_usd"] == pytest.approx(0.25 + 0.02 + 0.1 + 0.01 + 0.04)
    spent = 900 + 1300 + 500 + 700 + 900 + 30 + 30 + 60 + 5000
    assert row["spent_tokens"] == spent
    assert row["avoided_tokens_share"] == pytest.approx(760 / spent)
    assert row["runs_without_calls"] == 1


def test_a_budget_without_limits_stops_only_runs_the_old_budget_stopped_under_no_larger_limit(history):
    # No limit at all is larger than any: both old stops are censored, nothing is stopped.
    row = _replay(history, whatif.Budget()).summary.set_index("task_type").loc["qa"]
    assert (row["stopped"], row["censored"], row["avoided_tokens"]) == (0, 2, 0)


def test_a_preset_file_budget_limits_only_its_task_types(history, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("budgetlens_presets: 1\npresets:\n  other:\n    max_total_tokens: 10\n")
    row = _replay(history, whatif.Budget.from_preset_file(path)).summary.set_index("task_type").loc["qa"]
    assert row["stopped"] == 0


def test_budget_rejects_an_unknown_limit_key():
    with pytest.raises(ValueError, match="max_tokens"):
        whatif.Budget.uniform(max_tokens=5)


def test_replay_of_an_empty_window_has_the_documented_columns(history):
    with read_connection(history) as conn:
        result = whatif.replay(conn, Filters(task_types=("nothing",)), whatif.Budget.uniform(**BUDGET))
    assert list(result.summary.columns) == list(whatif.SUMMARY_COLUMNS) and result.summary.empty
    assert list(result.runs.columns) == list(whatif.RUN_COLUMNS) and result.runs.empty


def test_smallest_multiplier_is_met_only_when_the_upper_bound_meets_the_target():
    curve = pd.DataFrame(
        {
            "task_type": ["qa"] * 3 + ["code"] * 2 + ["docs"] * 2,
            "multiplier": [1.0, 1.5, 2.0, 1.0, 2.0, 1.0, 2.0],
            "hit_rate": [0.30, 0.05, 0.01, 0.5, 0.4, 0.2, 0.017],
            "hit_rate_upper": [0.3, 0.06, 0.02, 0.5, 0.4, 0.3, 0.249],
            "avoided_tokens": [9, 5, 1, 7, 3, 4, 2],
            "avoided_cost_usd": [0.9, 0.5, 0.1, 0.7, 0.3, 0.4, 0.2],
        }
    )
    picked = whatif.smallest_multiplier(curve, 0.05).set_index("task_type")
    # 1.5 meets only on the lower bound (0.05 .. 0.06): the first sure one is 2.0
    assert picked.loc["qa", "multiplier"] == 2.0 and picked.loc["qa", "verdict"] == "met"
    assert bool(picked.loc["qa", "met"])
    # the case: projected 1.7 % with an upper bound of 24.9 % is unknown, not met
    assert picked.loc["docs", "multiplier"] == 2.0 and picked.loc["docs", "verdict"] == "unknown"
    assert not bool(picked.loc["docs", "met"])
    assert pd.isna(picked.loc["code", "multiplier"]) and picked.loc["code", "verdict"] == "not met"
    assert not bool(picked.loc["code", "met"])
    with pytest.raises(ValueError, match="target"):
        whatif.smallest_multiplier(curve, 1.5)


def test_rates_read_in_percent_and_censored_hit_rates_as_a_range():
    from budgetlens.analysis.values import format_rate, format_rate_range

    assert format_rate(0.249) == "24.9 %" and format_rate(None) == ""
    assert format_rate_range(0.017, 0.249) == "1.7–24.9 %"
    assert format_rate_range(0.05, 0.05) == "5.0 %" and format_rate_range(0.05, None) == "5.0 %"


@pytest.mark.system  # the CLI's replays: seconds
def test_whatif_table_prints_rates_in_percent_like_hit_rate(history, capsys):
    code, out, _ = _whatif(capsys, history, *_limit_args())
    assert code == 0 and "77.8 %" in out  # 7 of 9 runs, as `hit-rate` would print it
    code, out, _ = _cli(capsys, "hit-rate", "--db", str(history), "--window-days", "0")
    assert code == 0 and " %" in out


# --- the CLI: the same numbers as the analysis ---------------------------------------------------
def _cli(capsys, *argv):
    from budgetlens.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _whatif(capsys, history, *argv):
    """``budgetlens whatif`` on the ``history`` store over all of it (``--window-days 0``)."""
    return _cli(capsys, "whatif", "--db", str(history), "--window-days", "0", *argv)


def _limit_args():
    return [arg for key, value in BUDGET.items() for arg in ("--limit", f"{key}={value}")]


def test_whatif_cli_prints_the_hand_counted_summary_as_json(history, capsys):
    code, out, _ = _whatif(capsys, history, "--format", "json", *_limit_args())
    row = json.loads(out)[0]
    assert code == 0
    assert (row["task_type"], row["runs"], row["stopped"], row["censored"]) == ("qa", 9, 7, 1)
    assert row["avoided_tokens"] == 760 and row["hit_rate"] == pytest.approx(7 / 9, rel=1e-5)


def test_whatif_cli_lists_the_stopped_and_censored_runs_as_csv(history, capsys):
    code, out, _ = _whatif(capsys, history, "--view", "runs", "--format", "csv", *_limit_args())
    frame = pd.read_csv(io.StringIO(out)).set_index("run_id")
    assert code == 0 and sorted(frame.index) == sorted(EXPECTED)
    assert frame.loc["B", "stop_turn"] == 3 and frame.loc["D", "outcome"] == "censored"


def test_whatif_cli_target_view_names_a_multiplier_and_its_limits(history, capsys):
    code, out, _ = _whatif(capsys, history, "--view", "target", "--target", "100%", "--format", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["met"] is True and row["multiplier"] == 1.0  # any budget meets 100 %
    assert row["verdict"] == "met" and row["projected_hit_rate_range"].endswith(" %")
    assert row["max_total_tokens"] >= 1000 and row["target_hit_rate"] == 1.0


@pytest.mark.parametrize("bad", ["max_tokens=5", "max_turns=2.5", "max_total_tokens"])
def test_whatif_cli_refuses_a_bad_limit_naming_the_rule(history, capsys, bad):
    with pytest.raises(SystemExit) as exit_info:
        _cli(capsys, "whatif", "--db", str(history), "--limit", bad)
    assert exit_info.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_hit_rate_cli_matches_the_hit_rate_page(history, capsys):
    from budgetlens.analysis import views

    code, out, _ = _cli(capsys, "hit-rate", "--db", str(history), "--window-days", "0", "--format", "json")
    row = json.loads(out)[0]
    with read_connection(history) as conn:
        page = views.overview(conn, Filters()).per_task.set_index("task_type").loc["qa"]
    assert code == 0
    # D and E ran under a limit and were stopped by it; no other run had a limit
    assert (row["budgeted_runs"], row["budget_stops"], row["hit_rate"]) == (2, 2, 1.0)
    assert row["budgeted_runs"] == page["budgeted_runs"] and row["hit_rate"] == page["hit_rate"]


def test_hit_rate_cli_daily_gives_one_row_per_day(history, capsys):
    code, out, _ = _cli(
        capsys, "hit-rate", "--db", str(history), "--window-days", "0", "--daily", "--format", "csv"
    )
    frame = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(frame["day"]) == ["2026-11-02"] and frame.loc[0, "finished_runs"] == 9


def test_runs_json_carries_limits_duration_cache_and_reasoning_tokens(history, capsys):
    from budgetlens.store.schema import RUN_COLUMNS

    code, out, _ = _cli(capsys, "runs", "--db", str(history), "--window-days", "0", "--format", "json")
    rows = {row["run_id"]: row for row in json.loads(out)}
    assert code == 0 and set(rows["D"]) == set(RUN_COLUMNS) | {"trace_url"}
    assert rows["D"]["limit_total_tokens"] == 800 and "duration_s" in rows["H"]
    assert "cache_read_tokens" in rows["A"] and "reasoning_tokens" in rows["A"]


def test_presets_file_says_where_it_came_from_and_loads_into_the_guard(history, capsys, tmp_path):
    from budgetlens import RunBudget

    path = tmp_path / "presets.yaml"
    code, _, _ = _cli(
        capsys, "presets", "--db", str(history), "--window-days", "0", "--task-type", "qa", "-o", str(path)
    )
    document = yaml.safe_load(path.read_text())
    assert code == 0
    basis = document["basis"]
    assert basis["filters"] == {"task_types": ["qa"], "models": [], "services": []}
    assert basis["method"] == "auto" and basis["start_utc"].startswith("2026-11-02")
    qa = document["presets"]["qa"]["basis"]
    assert qa["method"] in ("plain", "kaplan-meier") and 0 <= qa["projected_hit_rate"] <= 1
    assert (
        RunBudget.from_preset("qa", str(path)).limits["max_total_tokens"]
        == document["presets"]["qa"]["max_total_tokens"]
    )


@pytest.mark.system  # a store of its own: seconds
def test_an_unknown_usage_call_counts_its_reservation_as_input(db_path):
    # call 1 reported no usage: the guard charged its 600-token reservation as input; call 2
    # brings input to 600 + 300 = 900 > 800, so it is the call that would not have been sent
    calls = [
        dict(
            span_id="U.c1",
            run_id="U",
            source="test",
            task_type="qa",
            start_utc=T0,
            turn=1,
            reserved_tokens=600,
            usage_status="unknown",
        ),
        dict(
            span_id="U.c2",
            run_id="U",
            source="test",
            task_type="qa",
            start_utc=T0 + dt.timedelta(seconds=10),
            turn=2,
            input_tokens=300,
            output_tokens=100,
            total_tokens=400,
            cost_usd=0.01,
            usage_status="reported",
        ),
    ]
    with write_connection(db_path) as conn:
        write_batch(conn, calls, [_record("U")], ())
    row = _replay(db_path, whatif.Budget.uniform(max_input_tokens=800)).runs.set_index("run_id").loc["U"]
    assert (row["outcome"], row["stop_reason"], int(row["stop_turn"])) == ("stopped", "budget_tokens", 2)
    assert row["avoided_tokens"] == 400


@pytest.mark.system  # a replay per multiplier: seconds
def test_the_curve_replays_each_multiplier_as_a_single_replay_would(history):
    with read_connection(history) as conn:
        ev = whatif.evidence(conn, Filters())
        curve = whatif.tradeoff(conn, Filters(), ev, multipliers=(0.5, 1.0, 2.0))
        singles = {
            m: whatif.replay(conn, Filters(), whatif.Budget.from_presets(whatif.evidence_presets(ev, m)))
            for m in (0.5, 1.0, 2.0)
        }
    for m, single in singles.items():
        mine = curve[curve["multiplier"] == m].set_index("task_type").loc["qa"]
        alone = single.summary.set_index("task_type").loc["qa"]
        for column in ("stopped", "censored", "avoided_tokens", "hit_rate"):
            assert mine[column] == pytest.approx(alone[column]), (m, column)
    rates = curve.sort_values("multiplier")["hit_rate"].tolist()
    assert rates == sorted(rates, reverse=True)  # larger limits never stop more runs


@pytest.mark.system  # the CLI, a preset file and a replay: seconds
def test_one_preset_number_in_the_cli_the_file_and_the_analysis(history, capsys):
    from budgetlens.analysis.censoring import censored_baselines
    from budgetlens.analysis.presets import recommended_presets
    from budgetlens.analysis.views import baselines

    with read_connection(history) as conn:
        f = Filters()
        expected = recommended_presets(baselines(conn, f), censored_baselines(conn, f), 1.5)
    expected = expected.set_index("task_type")
    code, out, _ = _cli(capsys, "presets", "--db", str(history), "--window-days", "0", "--format", "json")
    document = json.loads(out)
    assert code == 0
    for task_type, entry in document["presets"].items():
        assert entry["max_total_tokens"] == expected.loc[task_type, "max_total_tokens"]
        assert entry["basis"]["method"] == expected.loc[task_type, "method"]
    code, out, _ = _cli(capsys, "baselines", "--db", str(history), "--window-days", "0", "--format", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["censored_runs"] >= 1 and 0 < row["censored_share"] <= 1
    assert row["km_p50_total_tokens"] is not None and row["km_p95_total_tokens"] is not None
    code, out, _ = _cli(capsys, "baselines", "--db", str(history), "--window-days", "0")
    assert code == 0 and "Kaplan" not in out and "km_p95_total_tokens" in out.splitlines()[0]
