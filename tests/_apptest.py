"""The dashboard opened in Streamlit's AppTest on a store, with URL parameters and a page."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from budgetlens.config import ENV_DB

APP = Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py"


def open_app(db: Path, monkeypatch, page: str | None = None, **params: str) -> AppTest:
    """The app run once on ``db`` with ``params`` as its query parameters, then switched to
    ``app_pages/<page>.py`` when given; fails on any exception the script raised."""
    monkeypatch.setenv(ENV_DB, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    if page:
        at.switch_page(f"app_pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
