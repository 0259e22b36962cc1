"""First numbers first (issue 24): a page's first run in a session draws its numbers (its KPI
tiles, or its first table when the tiles come later or not at all) and, in place of every chart
and every later table, an empty frame of the same height; the entrypoint then reruns the app at
once (``finish``) and that run draws them all.

Why two runs: Streamlit's browser client applies the elements that arrive together in one
render, and drawing the Plotly charts and data grids took seconds there; sent in the same run,
the tiles appeared only once every chart was drawn (Overview on a 2-core machine at load ~8:
first numbers 8.0 s with its charts, 2.4 s without, a bare Streamlit page 1.7 s). Sent a run
later, they are drawn while the tiles are already on screen.

Any later run of the same page (a filter or widget change, auto-refresh) draws everything at
once: its charts are on screen already, and the page does not flicker. Session-state keys start
with ``app_paint_`` (the entrypoint's); each placeholder's key with ``PENDING_PREFIX`` (the
class ``st-key-<key>`` in the browser, which the first-paint benchmark waits for to be gone).
"""

from __future__ import annotations

import streamlit as st

#: The page whose heavy parts (charts, later tables) the last finished run of this session drew.
DRAWN_KEY = "app_paint_drawn"
#: This run's state: ``[page, deferring, numbers shown, placeholders drawn]``.
_RUN_KEY = "app_paint_run"
#: Key prefix of a placeholder (the class ``st-key-paint_pending_<n>`` in the browser).
PENDING_PREFIX = "paint_pending_"
#: Height (px) of a table's placeholder per shown row, and the rows st.dataframe shows at most
#: without a height of its own (Streamlit's default: 10 rows and the header).
ROW_PX, DEFAULT_ROWS = 35, 10


def begin(page: str) -> None:
    """Start a full run of ``page`` (its url path): it defers its heavy parts when the last
    finished run of this session drew another page (or none: a new session)."""
    st.session_state[_RUN_KEY] = [page, st.session_state.get(DRAWN_KEY) != page, False, 0]


def deferring() -> bool:
    """True in a page's first run of the session, which draws placeholders for heavy parts."""
    run = st.session_state.get(_RUN_KEY)
    return bool(run and run[1])


def numbers_drawn() -> None:
    """The page has just drawn numbers of its own (KPI tiles): what follows may wait a run."""
    run = st.session_state.get(_RUN_KEY)
    if run:
        run[2] = True


def hold_chart(height_px: int) -> bool:
    """True when this run draws a placeholder of ``height_px`` in place of a chart (then the
    caller draws nothing); False when the chart is to be drawn now."""
    return _hold(height_px)


def hold_table(rows: int, height_px: int | None = None) -> bool:
    """True when this run draws a placeholder in place of a table of ``rows`` rows (its own
    ``height_px`` if it has one); False when the table is to be drawn now: every table of a
    later run, and a deferring run's first numbers when no tiles came before it."""
    run = st.session_state.get(_RUN_KEY)
    if run and run[1] and not run[2]:
        run[2] = True  # the page's first numbers: drawn in this run
        return False
    return _hold(height_px or ROW_PX * (min(rows, DEFAULT_ROWS) + 1) + 3)


def _hold(height_px: int) -> bool:
    run = st.session_state.get(_RUN_KEY)
    if not (run and run[1]):
        return False
    run[3] += 1
    st.container(height=max(int(height_px), 1), border=False, key=f"{PENDING_PREFIX}{run[3]}")
    return True


def finish(completed: bool) -> None:
    """End a full run: when ``completed`` (the page ran to its end), remember its page as drawn
    and, when it held any placeholder, rerun the app now to draw them (raises Streamlit's rerun
    exception: call it last)."""
    run = st.session_state.pop(_RUN_KEY, None)
    if not run or not completed:
        return
    page, deferred, _, held = run
    st.session_state[DRAWN_KEY] = page
    if deferred and held:
        st.rerun(scope="app")
