"""The served dashboard: ``budgetlens dashboard`` runs ``streamlit run`` on this file, which serves
the entrypoint ``streamlit_app.py`` as an ``st.App``. Its start (the lifespan) begins the warm-up
(``budgetlens.dashboard.served.warm_up``) on a background thread while the server answers: the
held now, each page's first-visit reads and the pages' imports, so a first visit finds them done
(issue 24).

``streamlit run dashboard/streamlit_app.py`` still serves the same pages, without the warm-up.
"""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st


def _warm_up() -> None:
    from budgetlens.dashboard import served  # pandas, DuckDB, the analysis: imported off the start

    served.warm_up()


@asynccontextmanager
async def _warm_up_at_start(_app):
    threading.Thread(target=_warm_up, name="budgetlens-warm-up", daemon=True).start()
    yield None


app = st.App(Path(__file__).resolve().parent / "streamlit_app.py", lifespan=_warm_up_at_start)
