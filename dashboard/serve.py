"""The served dashboard: ``budgetlens dashboard`` runs ``streamlit run`` on this file, which serves
the entrypoint ``streamlit_app.py`` as an ``st.App`` whose start (its lifespan) begins the
warm-up of ``budgetlens.dashboard.served`` on a background thread: the held now, the pages'
imports and each page's first-visit reads, so a first visit finds them done (issue 24).

``streamlit run dashboard/streamlit_app.py`` still serves the same pages, without the warm-up.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st


@asynccontextmanager
async def _warm_up_at_start(_app):
    from budgetlens.dashboard import served

    served.start_warm_up()
    yield None


app = st.App(Path(__file__).resolve().parent / "streamlit_app.py", lifespan=_warm_up_at_start)
