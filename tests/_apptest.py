"""The dashboard opened in Streamlit's AppTest on a store, with URL parameters and a page."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from budgetlens.config import ENV_DB

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def run_app(db: Path, monkeypatch, page: str | None = None, *, timeout: float = 60, **params: str) -> AppTest:
    """The app run once on ``db`` with ``params`` as its query parameters, on ``app_pages/<page>.py``
    when given (at most ``timeout`` seconds); what the script raised is left in ``at.exception``.

    The first run lands on the page, as a browser opening ``/<page>?<params>`` does: no run of the
    Overview before it (each page's ``st.Page`` url_path is its file name, so the page is found
    before ``st.navigation`` has registered it). ``tests/test_apptest_pages.py`` checks that a page
    opened so shows what it shows after a run of the Overview and a switch."""
    monkeypatch.setenv(ENV_DB, str(db))
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    for key, value in params.items():
        at.query_params[key] = value
    if page:
        at.switch_page(f"app_pages/{page}.py")
    at.run()
    return at


def open_app(db: Path, monkeypatch, page: str | None = None, **params: str) -> AppTest:
    """As :func:`run_app`; fails on any exception the script raised."""
    at = run_app(db, monkeypatch, page, **params)
    assert not at.exception, [e.value for e in at.exception]
    return at
