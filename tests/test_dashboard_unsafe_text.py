"""Control characters and bidi overrides in stored strings are shown escaped on the dashboard
(markdown, table cells, chart text), as the CLI shows them: ``code\\u202egnp.exe\\u202c``
never reads as ``codeexe.png``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest
from browser.live_writer import run_rows
from streamlit.testing.v1 import AppTest

from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_DB
from budgetlens.dashboard import charts, formatting
from budgetlens.dashboard.app_pages._tables import display_frame
from budgetlens.store import write_batch, write_connection
from budgetlens.unsafe_text import UNSAFE

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"
PLANTED = "code\u202egnp.exe\u202c"
#: One of each kind the CLI escapes: C0, DEL, C1, bidi controls and isolates, ALM, LRM/RLM.
UNSAFE_SAMPLES = "\x00\x1b\x7f\x85\x9f\u061c\u200e\u200f\u202a\u202e\u2066\u2069"


def test_safe_text_escapes_bidi_and_control_characters_as_the_cli_does():
    assert formatting.safe_text(PLANTED) == "code\\\\u202egnp\\.exe\\\\u202c"
    shown = formatting.safe_text(f"a{UNSAFE_SAMPLES}b")
    assert not UNSAFE.search(shown)
    assert "\\\\x1b" in shown and "\\\\x85" in shown and "\\\\u2066" in shown
    assert formatting.safe_text("a\tb\u2028c") == "a b c"  # line breaks and tabs: spaces


def test_table_cells_and_chart_text_escape_them_too():
    assert formatting.visible_text(PLANTED) == "code\\u202egnp.exe\\u202c"
    assert formatting.visible_text(3) == 3
    assert charts.plot_text(PLANTED + "<b>") == "code\\u202egnp.exe\\u202c&lt;b&gt;"
    shown, _ = display_frame(pd.DataFrame({"task_type": [PLANTED, None], "model": ["m\x1b[2J", "x"]}))
    assert list(shown["task_type"])[0] == "code\\u202egnp.exe\\u202c"
    assert list(shown["model"]) == ["m\\x1b[2J", "x"]
    assert all(not UNSAFE.search(str(v)) for v in shown.to_numpy().ravel())


@pytest.fixture(scope="module")
def planted_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("planted") / "planted.duckdb"
    start = (analysis.utc_now() - dt.timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
    with write_connection(path) as conn:
        for index in range(8):
            rows = run_rows(
                f"bidi-{index:02d}", task_type=PLANTED, start_utc=start + dt.timedelta(minutes=index)
            )
            write_batch(conn, *rows)
    return path


def _app(db: Path, monkeypatch, page: str, **params: str) -> AppTest:
    monkeypatch.setenv(ENV_DB, str(db))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.switch_page(f"app_pages/{page}.py")  # the first run on the page (see _apptest.run_app)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return at


def _everything(at: AppTest) -> list[str]:
    """Every text the page shows: markdown, captions, banners, headers, table cells, chart data."""
    kinds = ("error", "warning", "info", "caption", "markdown", "subheader", "title", "header")
    texts = [str(getattr(e, "value", "")) for kind in kinds for e in at.get(kind)]
    for frame in at.dataframe:
        texts += [str(v) for v in frame.value.to_numpy().ravel()]
    for chart in at.get("plotly_chart"):
        texts.append(chart.proto.spec)
    return texts


@pytest.mark.system
@pytest.mark.parametrize("page, params", [("runs", {"run": "bidi-00"}), ("runs", {}), ("baselines", {})])
def test_no_page_shows_a_bidi_override_raw(planted_store, monkeypatch, page, params):
    at = _app(planted_store, monkeypatch, page, **params)
    assert not at.exception, [e.value for e in at.exception]
    texts = _everything(at)
    assert any("u202egnp" in t for t in texts), texts  # the task type is shown, escaped
    assert not [t for t in texts if "\u202e" in t or "\u202c" in t]


@pytest.mark.system
def test_the_sidebar_filters_show_a_stored_bidi_override_escaped_and_still_filter_by_it(
    planted_store, monkeypatch
):
    at = _app(planted_store, monkeypatch, "overview", task_type=PLANTED)
    assert not at.exception, [e.value for e in at.exception]
    task_types = at.multiselect(key="app_task_types")
    assert task_types.options == ["code\\u202egnp.exe\\u202c"]  # the option label, escaped
    assert task_types.value == [PLANTED]  # the filter keeps the stored value itself
    assert at.session_state["app_filters"].task_types == (PLANTED,)
    labels = [option for widget in at.multiselect for option in widget.options]
    assert not [label for label in labels if UNSAFE.search(label)], labels
