"""First numbers first (issue 24): a page's first run in a session draws its numbers (its KPI
tiles, or its first table when the tiles come later or not at all) and, in place of every chart
and every later table, an empty frame of the same height; the run that draws them all follows
once the browser has painted those numbers (``finish``).

Why the browser says when: Streamlit's client draws each element kind with code it loads on
first use, and Plotly's (a 4.7 MB chunk) keeps the browser's main thread busy for seconds while
it is compiled. When the charts' run arrives before the tiles' small chunk has rendered, the tiles
wait behind it (Chromium trace, Overview at load 4-11: tiles' deltas in at 1.2 s, their code
loaded at 4.1 s, Plotly's fetched at 4.3 s, then a 23.6 s task, tiles on screen at 37 s with the
charts). So the first run ends with a signal (``SIGNAL``, an ``st.components.v2`` component
without a frame): its script waits until the page shows its numbers and the browser has painted
a frame, then sends a trigger that reruns the app, and that run draws the rest. The charts are
never asked for before the numbers are on screen, whatever the machine's load. A session with no
browser (AppTest: ``st.context.url`` unknown) cannot run the script and reruns at once instead.

A session's first run also leaves out the sidebar's filters and controls (``hold_controls``):
their widgets' code is loaded and drawn before the tiles beside them show, so they wait for the
rerun too; the page reads the filters' values from session state meanwhile (the same values:
``tests/test_dashboard_paint.py``).

Any later run of the same page (a filter or widget change, auto-refresh) draws everything at
once: its charts are on screen already, and the page does not flicker. Session-state keys start
with ``app_paint_`` (the entrypoint's); each placeholder's key with ``PENDING_PREFIX`` (the
class ``st-key-<key>`` in the browser, which the first-paint benchmark waits for to be gone).
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

#: The page whose heavy parts (charts, later tables) the last finished run of this session drew.
DRAWN_KEY = "app_paint_drawn"
#: This run's state (a ``_Run``).
_RUN_KEY = "app_paint_run"
#: Key of the signal's component (the class ``st-key-app_paint_signal`` in the browser).
SIGNAL_KEY = "app_paint_signal"
#: Key prefix of a placeholder (the class ``st-key-paint_pending_<n>`` in the browser).
PENDING_PREFIX = "paint_pending_"
#: Height (px) of a table's placeholder per shown row, and the rows st.dataframe shows at most
#: without a height of its own (Streamlit's default: 10 rows and the header).
ROW_PX, DEFAULT_ROWS = 35, 10
#: Seconds the signal waits for numbers that do not show (their element failed to load) before
#: it asks for the rest anyway: a page is never left with empty frames.
SIGNAL_FALLBACK_S = 10
#: The signal's script. ``data.numbers``: the run drew numbers (wait for them to show); the
#: numbers are a KPI tile's value with a digit, or a table (the first-paint benchmark's test).
#: Two animation frames after they are in the page they have been painted; in a hidden tab the
#: browser draws no frames, so a timer stands in.
SIGNAL_JS = """
export default function ({ data, setTriggerValue }) {
  let done = false;
  const shown = () => !data.numbers
    || [...document.querySelectorAll('[data-testid="stMetricValue"]')].some((e) => /[0-9]/.test(e.textContent))
    || document.querySelector('[data-testid="stDataFrame"], [data-testid="stTable"]') !== null;
  const send = () => { if (!done) { done = true; setTriggerValue("painted", data.page); } };
  const painted = () => {
    observer.disconnect();
    if (document.hidden) { setTimeout(send, 0); return; }
    requestAnimationFrame(() => requestAnimationFrame(send));
  };
  const observer = new MutationObserver(() => { if (shown()) painted(); });
  const fallback = setTimeout(send, data.fallback_ms);
  if (shown()) painted();
  else observer.observe(document.body, { childList: true, subtree: true, characterData: true });
  return () => { done = true; observer.disconnect(); clearTimeout(fallback); };
}
"""


@dataclass
class _Run:
    """One full run's first-paint state."""

    page: str  # the page's url path
    deferring: bool  # this run draws placeholders for the heavy parts
    numbers: bool = False  # the page has drawn numbers of its own
    held: int = 0  # placeholders drawn
    controls_held: bool = False  # the sidebar's widgets wait for the next run (``hold_controls``)


def begin(page: str) -> None:
    """Start a full run of ``page`` (its url path): it defers its heavy parts when the last
    finished run of this session drew another page (or none: a new session)."""
    st.session_state[_RUN_KEY] = _Run(page, deferring=st.session_state.get(DRAWN_KEY) != page)


def _run() -> _Run | None:
    run = st.session_state.get(_RUN_KEY)
    return run if isinstance(run, _Run) else None


def deferring() -> bool:
    """True in a page's first run of the session, which draws placeholders for heavy parts."""
    run = _run()
    return bool(run and run.deferring)


def numbers_drawn() -> None:
    """The page has just drawn numbers of its own (KPI tiles): what follows may wait a run."""
    run = _run()
    if run:
        run.numbers = True


def hold_controls() -> bool:
    """True when this run leaves out the sidebar's filters and controls (the caller takes their
    values from session state, as the widgets would): the first run of a session, whose page is
    then drawn again once its numbers are painted (``finish``). The widgets' code (select boxes,
    multiselects, a radio) is loaded and drawn in the browser before anything drawn beside them:
    at load 7-9 they kept a page's tiles off screen ~1 s longer (``benchmarks/first_paint.py``'s
    render phase: 1.0-1.4 s with them, 0.3 s without, like one ``st.metric`` alone)."""
    run = _run()
    if not (run and run.deferring and DRAWN_KEY not in st.session_state):
        return False
    run.controls_held = True
    return True


def hold_chart(height_px: int) -> bool:
    """True when this run draws a placeholder of ``height_px`` in place of a chart (then the
    caller draws nothing); False when the chart is to be drawn now."""
    return _hold(height_px)


def hold_table(rows: int, height_px: int | None = None) -> bool:
    """True when this run draws a placeholder in place of a table of ``rows`` rows (its own
    ``height_px`` if it has one); False when the table is to be drawn now: every table of a
    later run, and a deferring run's first numbers when no tiles came before it."""
    run = _run()
    if run and run.deferring and not run.numbers:
        run.numbers = True  # the page's first numbers: drawn in this run
        return False
    return _hold(height_px or ROW_PX * (min(rows, DEFAULT_ROWS) + 1) + 3)


def _hold(height_px: int) -> bool:
    run = _run()
    if not (run and run.deferring):
        return False
    run.held += 1
    st.container(height=max(int(height_px), 1), border=False, key=f"{PENDING_PREFIX}{run.held}")
    return True


def finish(completed: bool) -> None:
    """End a full run: when ``completed`` (the page ran to its end), remember its page as drawn
    and, when it held any placeholder, have the rest drawn: the signal asks for the next run
    once the browser shows the numbers; a session without a browser reruns now (raises
    Streamlit's rerun exception: call it last)."""
    run = st.session_state.pop(_RUN_KEY, None)
    if not isinstance(run, _Run) or not completed:
        return
    st.session_state[DRAWN_KEY] = run.page
    if not (run.deferring and (run.held or run.controls_held)):
        return
    if st.context.url is None:  # no browser to run the signal (AppTest)
        st.rerun(scope="app")
    _signal(
        key=SIGNAL_KEY,
        data={"page": run.page, "numbers": run.numbers, "fallback_ms": SIGNAL_FALLBACK_S * 1000},
        height=0,
        on_painted_change=_painted,
    )


def _painted() -> None:
    """The signal's trigger: its rerun is the one that draws the held parts (nothing to do)."""


_signal = st.components.v2.component("budgetlens_paint_signal", js=SIGNAL_JS, isolate_styles=False)
