"""Waiting for a page to stop changing, instead of sleeping a fixed second: the browser tests call
``until_quiet(driver)`` where they let Plotly finish drawing, a table mount or scroll, before they
read the page."""

from __future__ import annotations

import time

#: What changes while the page still draws: per chart its drawn SVG nodes (-1 until Plotly laid it
#: out), the tables and their accessibility rows' text (glide-data-grid's, what the tests read), and
#: the length of the page's text.
_STATE_JS = """
const plots = [...document.querySelectorAll('.js-plotly-plot')];
return JSON.stringify([
  plots.map(p => p._fullLayout ? p.querySelectorAll('path, text, rect').length : -1),
  [...document.querySelectorAll('[data-testid="stDataFrame"]')].map(
      f => { const t = f.querySelector('table[role="grid"]'); return t ? t.textContent.length : -1; }),
  document.body.innerText.length,
]);
"""
#: How long the page must stay unchanged (seconds), and how often it is looked at.
QUIET_S = 0.5
POLL_S = 0.1
#: After this long the wait ends even on a page that keeps changing (an auto-refreshing one).
MAX_WAIT_S = 10.0


def until_quiet(driver, quiet_s: float = QUIET_S, max_wait_s: float = MAX_WAIT_S) -> None:
    """Return once the page's charts, tables and text have not changed for ``quiet_s`` seconds
    (polled every ``POLL_S``), or after ``max_wait_s``."""
    start = time.monotonic()
    state, since = driver.execute_script(_STATE_JS), start
    while time.monotonic() - start < max_wait_s:
        time.sleep(POLL_S)
        now, at = driver.execute_script(_STATE_JS), time.monotonic()
        if now != state:
            state, since = now, at
        elif at - since >= quiet_s:
            return
