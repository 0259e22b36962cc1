"""benchmarks.queries times the Overview page as the dashboard reads it: the previous period's
Overview only where ``dashboard.app_pages._ui.previous_window`` gives one (issue 25)."""

from __future__ import annotations

import datetime as dt

from benchmarks.queries import page_calls
from budgetlens.analysis import views as analysis
from budgetlens.dashboard.app_pages._ui import previous_window
from budgetlens.sample.generator import default_end_utc, write_sample
from budgetlens.store import read_connection


def test_the_overview_page_reads_the_previous_period_where_the_dashboard_does(tmp_path, monkeypatch):
    path = tmp_path / "store.duckdb"
    write_sample(path, days=6, seed=5, runs_per_day=10, end_utc=default_end_utc())
    with read_connection(path) as conn:
        first, last, _ = analysis.data_extent(conn)
    end = last + dt.timedelta(microseconds=1)
    windows = [
        analysis.Filters(start_utc=first, end_utc=end),  # the whole extent: no previous period
        analysis.Filters(start_utc=end - dt.timedelta(days=2), end_utc=end),  # covered
        analysis.Filters(start_utc=end - dt.timedelta(days=4), end_utc=end),  # covered in part
        analysis.Filters(),  # all data
    ]
    read = []
    overview = analysis.overview
    monkeypatch.setattr(analysis, "overview", lambda c, f: read.append(f) or overview(c, f))
    shown = []
    for f in windows:
        read.clear()
        with read_connection(path) as conn:
            for call in page_calls(f, "none", first)["Overview"]:
                call(conn)
        previous = previous_window(f, first)
        shown.append(previous is not None)
        assert read == ([previous] if previous else []) + [f]  # then the runaways' basis
    assert shown == [False, True, False, False]
