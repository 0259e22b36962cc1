"""What-if replay against a hand-made history: every stop, its turn and reason, and the tokens
and USD avoided were counted by hand (see each run's comment)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

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


@pytest.fixture
def history(db_path):
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


def test_smallest_multiplier_picks_the_first_that_meets_the_target():
    curve = pd.DataFrame(
        {
            "task_type": ["qa"] * 3 + ["code"] * 2,
            "multiplier": [1.0, 1.5, 2.0, 1.0, 2.0],
            "hit_rate": [0.30, 0.05, 0.01, 0.5, 0.4],
            "hit_rate_upper": [0.3, 0.06, 0.02, 0.5, 0.4],
            "avoided_tokens": [9, 5, 1, 7, 3],
            "avoided_cost_usd": [0.9, 0.5, 0.1, 0.7, 0.3],
        }
    )
    picked = whatif.smallest_multiplier(curve, 0.05).set_index("task_type")
    assert picked.loc["qa", "multiplier"] == 1.5 and bool(picked.loc["qa", "met"])
    assert pd.isna(picked.loc["code", "multiplier"]) and not bool(picked.loc["code", "met"])
    with pytest.raises(ValueError, match="target"):
        whatif.smallest_multiplier(curve, 1.5)
