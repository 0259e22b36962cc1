"""The CLI's notes for a new user: the hit-rate alarm line, what "≥" means in the Kaplan–Meier
columns, one presets note per point, and a readable ``repr`` of the guard."""

from __future__ import annotations

import pandas as pd
import pytest

from budgetlens import RunBudget
from budgetlens.analysis.thresholds import HIT_RATE_ALARM, LOW_SAMPLE_RUNS
from budgetlens.cli import main
from budgetlens.cli.baselines import _has_lower_bound
from budgetlens.cli.hit_rate import _alarm_notes


def _per_task(rows):
    return pd.DataFrame(rows, columns=["task_type", "hit_rate", "budgeted_runs"])


def test_a_hit_rate_above_the_alarm_line_gets_the_dashboards_verdict(capsys):
    _alarm_notes(
        _per_task(
            [
                ("research", 0.324, 71),
                ("simple_qa", 0.104, 230),
                ("new_task", 0.5, LOW_SAMPLE_RUNS - 1),
                ("unbudgeted", None, 0),
            ]
        )
    )
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"note: research: hit rate 32.4 % is above the {HIT_RATE_ALARM * 100:g} % alarm line: the "
        "budget is too tight or the agent has a bug (compare `budgetlens baselines` and "
        "`budgetlens presets`)",
        f"note: new_task: hit rate 50.0 % is above {HIT_RATE_ALARM * 100:g} % on "
        f"{LOW_SAMPLE_RUNS - 1} budgeted runs (< {LOW_SAMPLE_RUNS}): too few to call an alarm",
    ]


def test_no_alarm_note_at_or_below_the_line(capsys):
    _alarm_notes(_per_task([("a", HIT_RATE_ALARM, 500), ("b", 0.0, 500)]))
    assert capsys.readouterr().err == ""


def test_a_lower_bound_is_found_in_either_kaplan_meier_column():
    frame = pd.DataFrame(
        {
            "km_p50_total_tokens_lower_bound": [False, None],
            "km_p95_total_tokens_lower_bound": [False, True],
        }
    )
    assert _has_lower_bound(frame) is True
    assert _has_lower_bound(frame.iloc[:1]) is False
    assert _has_lower_bound(pd.DataFrame({"n": [1]})) is False


def test_the_guard_repr_shows_the_limits_set_and_the_use_so_far():
    run = RunBudget(run_id="run-1", task_type="qa", max_total_tokens=1_000, max_turns=3)
    run.before_turn()
    run.reserve(100)
    run.record({"input_tokens": 40, "output_tokens": 10})
    assert repr(run) == (
        "RunBudget(run_id='run-1', task_type='qa', limits={'max_total_tokens': 1000, 'max_turns': 3}, "
        "used_tokens=50, turns=1, tool_calls=0, cost_usd=None, stop_reason=None)"
    )
    run.finish()
    assert repr(run).endswith("stop_reason='completed')")


@pytest.mark.system
def test_the_cli_explains_bounds_and_alarms_on_the_sample(committed_sample_store, capsys):
    db = str(committed_sample_store)
    assert main(["hit-rate", "--db", db, "--window-days", "0"]) == 0
    out, err = capsys.readouterr()
    alarms = [line for line in err.splitlines() if "alarm line" in line]
    assert alarms, err
    assert all("too tight or the agent has a bug" in line for line in alarms)
    assert main(["baselines", "--db", db, "--window-days", "0"]) == 0
    out, err = capsys.readouterr()
    assert ("≥" in out) == ("is a lower bound" in err)  # the note comes with a bound, only then
    assert main(["presets", "--db", db, "--window-days", "0"]) == 0
    _, err = capsys.readouterr()
    km_notes = [line for line in err.splitlines() if "Kaplan-Meier" in line]
    assert len(km_notes) <= 1  # one note names every task type on the censoring-aware P95


@pytest.mark.system
def test_daily_hit_rates_in_json_name_their_local_day_as_csv_does(committed_sample_store, capsys):
    """Breaker round of 2026-12-03: ``hit-rate --daily --format json`` wrote ``"day"`` as epoch
    milliseconds of the local day's midnight UTC (a day earlier read back west of UTC)."""
    import json

    db = str(committed_sample_store)
    args = ["hit-rate", "--db", db, "--window-days", "0", "--daily", "--tz", "America/Los_Angeles"]
    assert main([*args, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert main([*args, "--format", "csv"]) == 0
    csv_days = [line.split(",")[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows and [row["day"] for row in rows] == csv_days
    assert all(len(day) == 10 and day[4] == "-" for day in csv_days)
