"""The What-if page (AppTest on a sample store): it renders the trade-off curve, and its
multipliers, projected hit rates and download are those of ``whatif.plan_for_target`` (the
numbers of ``budgetlens whatif --view target``) for the dashboard's default window."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.analysis import whatif
from budgetlens.config import ENV_DB
from budgetlens.store import read_connection

pytestmark = pytest.mark.system  # Streamlit AppTests: seconds each

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory, sample_store_copy) -> Path:
    path = tmp_path_factory.mktemp("sample") / "sample.duckdb"
    return sample_store_copy(path, days=14, seed=11, runs_per_day=25)


def _page(db: Path, monkeypatch, page: str) -> AppTest:
    monkeypatch.setenv(ENV_DB, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.switch_page(f"app_pages/{page}.py")  # the first run on the page (see _apptest.run_app)
    at.run()
    return at


def _expected_plan(db: Path, target: float) -> whatif.TargetPlan:
    with read_connection(db) as conn:
        f = analysis.window_filters(14)  # the dashboard default: the last 14 days up to now
        return whatif.plan_for_target(conn, f, target)


def test_whatif_page_shows_the_multipliers_that_meet_the_target(sample_store, monkeypatch):
    at = _page(sample_store, monkeypatch, "whatif")
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= 1
    expected = _expected_plan(sample_store, whatif.DEFAULT_TARGET_HIT_RATE).presets.set_index("task_type")
    shown = at.dataframe[0].value.set_index("task_type")
    assert sorted(shown.index) == sorted(expected.index)
    for task_type, row in expected.iterrows():
        assert shown.loc[task_type, "multiplier"] == pytest.approx(row["multiplier"]), task_type
        assert shown.loc[task_type, "max_total_tokens"] == row["max_total_tokens"], task_type


def test_a_higher_target_never_needs_a_larger_multiplier(sample_store, monkeypatch):
    at = _page(sample_store, monkeypatch, "whatif")
    at.slider(key="whatif_target").set_value(20.0).run()
    assert not at.exception
    loose = at.dataframe[0].value.set_index("task_type")
    tight = _expected_plan(sample_store, whatif.DEFAULT_TARGET_HIT_RATE).presets.set_index("task_type")
    for task_type in tight.index:
        if bool(tight.loc[task_type, "met"]):
            assert loose.loc[task_type, "multiplier"] <= tight.loc[task_type, "multiplier"]


def test_the_offered_preset_is_the_shown_one_and_says_where_it_came_from(sample_store, monkeypatch, tmp_path):
    from budgetlens import RunBudget
    from budgetlens.analysis import preset_export

    at = _page(sample_store, monkeypatch, "whatif")
    keys = {b.key for b in at.get("download_button")}
    assert {"whatif_download_yaml", "whatif_download_toml", "whatif_download_json"} <= keys
    shown = at.dataframe[0].value.set_index("task_type")
    with read_connection(sample_store) as conn:
        first, last, _ = analysis.data_extent(conn)
        f = analysis.window_filters(14)  # the dashboard default: up to now
        plan = whatif.plan_for_target(conn, f, whatif.DEFAULT_TARGET_HIT_RATE)
    document = whatif.plan_document(plan, f, first, last)
    path = tmp_path / "p.yaml"
    path.write_text(preset_export.to_yaml(document))
    loaded = yaml.safe_load(path.read_text())
    assert loaded["basis"]["target_hit_rate"] == whatif.DEFAULT_TARGET_HIT_RATE
    assert loaded["basis"]["method"] == "auto"
    for task_type, row in shown.iterrows():
        assert (
            RunBudget.from_preset(task_type, str(path)).limits["max_total_tokens"] == row["max_total_tokens"]
        )
        basis = loaded["presets"][task_type]["basis"]
        assert basis["projected_hit_rate"] * 100 == pytest.approx(
            row["projected_hit_rate"], rel=1e-3
        )  # shown in %


def test_overview_counts_the_runaways_and_links_to_them(sample_store, monkeypatch):
    from budgetlens.analysis import runaways

    monkeypatch.setenv(ENV_DB, str(sample_store))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    with read_connection(sample_store) as conn:
        expected = runaways.runaways(conn, analysis.window_filters(14))
    captions = "\n".join(str(c.value) for c in at.caption)
    assert f"**{expected.count:,}** of {expected.total_runs:,} runs" in captions
    if expected.count:
        links = at.dataframe[-1].value["link"].tolist()
        assert links[0] == f"/runs?run={expected.runs['run_id'].iloc[0]}"


def test_the_replayed_hit_rate_says_what_it_divides_by(sample_store, monkeypatch):
    at = _page(sample_store, monkeypatch, "whatif")
    assert not at.exception, [e.value for e in at.exception]
    summary = _expected_plan(sample_store, whatif.DEFAULT_TARGET_HIT_RATE).replay.summary
    for row in summary.itertuples():  # stopped ÷ every run of the window, as the caption says
        assert row.hit_rate == pytest.approx(row.stopped / row.runs), row.task_type
    captions = "\n".join(str(c.value) for c in at.caption)
    assert "divides by every run of the window" in captions
    assert "divides today's budget stops by the runs that ran under one" in captions
