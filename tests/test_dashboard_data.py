"""The dashboard's data layer: typed functions, one per analysis view, no string dispatch."""

from __future__ import annotations

import inspect

import pytest

from budgetlens.analysis import views
from budgetlens.dashboard import data

READS = (
    "data_extent",
    "filter_options",
    "window_coverage",
    "overview",
    "baselines",
    "current_limits",
    "limit_history",
    "hit_rate_daily",
    "stop_reasons",
    "cost_by_period",
    "cost_per_run",
    "token_distribution",
    "top_runs",
    "runs_table",
    "run_detail",
)


def test_pages_call_typed_functions_not_a_query_by_name():
    assert not hasattr(data, "query")
    for name in READS:
        mine = inspect.signature(getattr(data, name))
        theirs = inspect.signature(getattr(views, name))
        # the view's parameters after its connection (a view's tuning knob may keep its default)
        mine_names = list(mine.parameters)
        assert mine_names == list(theirs.parameters)[1 : 1 + len(mine_names)], name


@pytest.mark.system  # every loader on a store: seconds
def test_each_typed_read_returns_what_its_view_returns(tmp_path, monkeypatch):
    from browser.live_writer import run_rows

    from budgetlens.config import ENV_DB
    from budgetlens.store import read_connection, write_batch, write_connection

    db = tmp_path / "s.duckdb"
    with write_connection(db) as conn:
        for index in range(3):
            write_batch(conn, *run_rows(f"r-{index}", task_type="qa"))
    monkeypatch.setenv(ENV_DB, str(db))
    f = views.Filters()
    with read_connection(db) as conn:
        expected = views.baselines(conn, f)
        coverage = views.window_coverage(conn, views.window_filters(1))
    assert data.baselines(f).equals(expected)
    assert data.window_coverage(views.window_filters(1)) == coverage
    assert data.run_detail("r-1").run["run_id"] == "r-1"
    assert data.run_detail("no-such-run") is None


@pytest.mark.system  # store reads: seconds
def test_the_evidence_is_the_cached_baselines_and_kaplan_meier_of_the_same_filters(tmp_path, monkeypatch):
    from browser.live_writer import run_rows

    from budgetlens.analysis import whatif
    from budgetlens.config import ENV_DB
    from budgetlens.store import read_connection, write_batch, write_connection

    db = tmp_path / "s.duckdb"
    with write_connection(db) as conn:
        for index in range(4):
            write_batch(conn, *run_rows(f"r-{index}", task_type="qa"))
    monkeypatch.setenv(ENV_DB, str(db))
    f = views.Filters()
    with read_connection(db) as conn:
        expected = whatif.evidence(conn, f)
    data.clear_cache()
    with data.render_reader() as reader:  # one page render: baselines read once, then shared
        plain = data.baselines(f)
        shared = data.evidence(f)
    assert reader.opened == 1
    assert shared.baselines.equals(expected.baselines) and shared.censoring.equals(expected.censoring)
    assert shared.baselines is plain or shared.baselines.equals(plain)


@pytest.mark.system  # store reads and a commit between them: seconds
def test_a_tool_loop_committed_after_a_read_is_found_at_the_next_read(tmp_path, monkeypatch):
    """Whether some run may be a tool loop (``MAY_HAVE_TOOL_LOOPS``) picks the runaways'
    statement; it is read with the runaways, whose cache entry a commit ends (the data version),
    so a loop committed after a read within the cache's lifetime is on the next read."""
    import datetime as dt

    from browser.live_writer import run_rows

    from budgetlens.analysis import evidence_queries as eq
    from budgetlens.analysis import runaways
    from budgetlens.analysis.filters import run_query
    from budgetlens.config import ENV_DB
    from budgetlens.store import read_connection, write_batch, write_connection

    db = tmp_path / "s.duckdb"
    with write_connection(db) as conn:
        for index in range(4):
            write_batch(conn, *run_rows(f"r-{index}", task_type="qa"))
    monkeypatch.setenv(ENV_DB, str(db))
    f = views.Filters()
    data.clear_cache()
    before = data.runaways(f)
    assert not before.runs["tool_loop"].any()
    with read_connection(db) as conn:
        start = conn.execute("SELECT start_utc FROM runs WHERE run_id = 'r-2'").fetchone()[0]
    loop = [
        dict(
            event_id=f"r-2.loop{k}",
            run_id="r-2",
            ts_utc=start + dt.timedelta(seconds=k),
            name="budgetlens.tool_call",
            tool_name="search",
        )
        for k in range(runaways.DEFAULT_REPEATS + 2)
    ]
    with write_connection(db) as conn:
        write_batch(conn, [], [], loop)
    after = data.runaways(f)  # no cache clear: the commit changed the data version
    with read_connection(db) as conn:
        assert run_query(conn, eq.MAY_HAVE_TOOL_LOOPS, {"repeats": runaways.DEFAULT_REPEATS}).iloc[0, 0]
        expected = runaways.runaways(conn, f)
    assert after.runs.equals(expected.runs)
    assert after.runs.loc[after.runs["tool_loop"], "run_id"].tolist() == ["r-2"]
