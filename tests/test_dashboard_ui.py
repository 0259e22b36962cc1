"""Fast unit tests of the dashboard's pure page helpers (``app_pages/_ui``, ``app_pages/_tables``), beside the Streamlit
AppTests (system) that check the same rules through a rendered page: run links, change against the
previous period, the low-sample note, the previous window and "how long ago"."""

from __future__ import annotations

import datetime as dt
import urllib.parse

from budgetlens.analysis.views import LOW_SAMPLE_RUNS, Filters
from budgetlens.dashboard.app_pages import _tables, _ui


def test_a_run_link_opens_the_runs_page_and_encodes_what_a_url_cannot_carry():
    assert _tables.run_link("run-0001") == "runs?run=run-0001"
    link = _tables.run_link("a b&c=d#e")
    assert link.startswith("runs?run=")
    assert " " not in link and "&" not in link and "#" not in link
    assert urllib.parse.unquote(link.removeprefix("runs?run=")) == "a b&c=d#e"


def test_change_text_never_makes_up_a_zero_percent():
    assert _ui.change_text(None, 10.0) is None
    assert _ui.change_text(10.0, None) is None
    assert _ui.change_text(0.0, 0.0) is None
    assert _ui.change_text(5.0, 0.0) == "new vs previous period"
    assert _ui.change_text(112.0, 100.0) == "+12 % vs previous period"
    assert _ui.change_text(50.0, 100.0) == "-50 % vs previous period"


def test_the_low_sample_note_is_only_for_a_few_budgeted_runs():
    assert _ui.low_sample_mark(0) is None
    assert _ui.low_sample_mark(1) == "low sample: 1 budgeted run"
    assert _ui.low_sample_mark(LOW_SAMPLE_RUNS - 1) == f"low sample: {LOW_SAMPLE_RUNS - 1:,} budgeted runs"
    assert _ui.low_sample_mark(LOW_SAMPLE_RUNS) is None


def test_the_previous_window_has_the_same_length_and_scope_just_before():
    start, end = dt.datetime(2026, 3, 10), dt.datetime(2026, 3, 24)
    f = Filters(start_utc=start, end_utc=end, task_types=("qa",), tz="Europe/Berlin")
    previous = _ui.previous_window(f)
    assert previous is not None
    assert (previous.start_utc, previous.end_utc) == (start - (end - start), start)
    assert (previous.task_types, previous.tz) == (("qa",), "Europe/Berlin")
    assert _ui.previous_window(Filters()) is None
    assert _ui.previous_window(f, first_utc=previous.start_utc) == previous
    assert _ui.previous_window(Filters(start_utc=start)) is None


def test_ago_reads_minutes_hours_and_days():
    now = dt.datetime(2026, 3, 24, 12, 0)
    assert _ui.ago(now - dt.timedelta(seconds=20), now) == "just now"
    assert _ui.ago(now - dt.timedelta(minutes=3), now) == "3 min ago"
    assert _ui.ago(now - dt.timedelta(hours=5), now) == "5 h ago"
    assert _ui.ago(now - dt.timedelta(days=12), now) == "12 days ago"


def test_no_change_is_shown_against_a_previous_window_the_data_covers_in_part():
    start, end = dt.datetime(2026, 11, 14), dt.datetime(2026, 11, 28)
    f = Filters(start_utc=start, end_utc=end)
    assert _ui.previous_window(f, first_utc=dt.datetime(2026, 11, 10)) is None  # 4 of 14 days
    assert _ui.previous_window(f, first_utc=dt.datetime(2026, 10, 31)) is not None


def test_a_figure_is_built_once_for_the_same_data_and_again_for_new_data():
    import pandas as pd

    from budgetlens.dashboard import charts

    built = []

    def rates(per_task):
        built.append(len(per_task))
        return charts.rate_by_task(per_task)

    rows = {"task_type": ["research"], "hit_rate": [0.25], "intervention_rate": [0.3]}
    _ui._built.clear()
    try:
        first = _ui.figure(rates, pd.DataFrame(rows))
        again = _ui.figure(rates, pd.DataFrame(rows))  # equal data read again: the built figure
        assert again is first and built == [1]
        changed = _ui.figure(rates, pd.DataFrame({**rows, "hit_rate": [0.5]}))
        assert changed is not first and built == [1, 1]
    finally:
        _ui._built.clear()


def test_a_large_frame_changed_in_one_row_and_list_cells_get_their_own_figure(caplog):
    """Streamlit's own key hashes a sample of a frame of 50,000 rows or more and warns on list
    cells; the figure cache's key (``_ui.frame_key``) reads every cell, lists as tuples."""
    import pandas as pd

    built = []

    def count(frame):
        built.append(len(frame))
        return len(frame)

    big = pd.DataFrame({"run": range(60_000), "tokens": [100] * 60_000})
    changed = big.copy()
    changed.loc[12_345, "tokens"] = 101
    listed = pd.DataFrame({"task_type": ["qa", "code"], "lower_bound_keys": [["max_turns"], []]})
    _ui._built.clear()
    try:
        with caplog.at_level("WARNING"):
            _ui.figure(count, big)
            _ui.figure(count, changed)
            _ui.figure(count, listed)
            _ui.figure(count, listed.assign(lower_bound_keys=[["max_turns"], []]))  # equal: cached
            _ui.figure(count, listed.assign(lower_bound_keys=[[], ["max_turns"]]))
        assert built == [60_000, 60_000, 2, 2]
        assert "hashing method failed" not in caplog.text
    finally:
        _ui._built.clear()
    assert _ui.frame_key(big) != _ui.frame_key(changed)
    assert _ui.frame_key(big) == _ui.frame_key(big.copy())
