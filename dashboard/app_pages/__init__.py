"""Dashboard pages, run by the entrypoint ``dashboard/streamlit_app.py``, which owns
``st.navigation`` and the shared sidebar filters (pages read them with ``data.filters()``).

One style for every page: a file named for the page (``st.Page`` runs it top to bottom) with
its docstring, imports, constants and private helpers, then ``def render() -> None`` that
draws the page, and ``render()`` as its last line. Session-state keys carry the page's prefix
(``overview_``, ``cost_``, ...). Files starting with ``_`` are shared helpers, not pages:
``_ui`` (header, tiles, charts, alarm banner, empty state), ``_tables`` (tables, run links),
``_evidence`` (drift flag, Kaplan–Meier table).
"""
