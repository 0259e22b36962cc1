"""The app's page chrome: its compact CSS and the auto-refresh choice a link asks for (no streamlit import)."""

from __future__ import annotations

#: Less empty space above the page title than Streamlit's default (a denser, tool-like layout);
#: KPI tiles wrap their label and scale their value with the width instead of cutting them off
#: with an ellipsis ("Intervention r…" at 1280 px).
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"], .block-container { padding-top: 2.2rem; }
@media (max-width: 1440px) {  /* a 1280 px screen: tables and charts get the width, not padding */
  [data-testid="stMainBlockContainer"], .block-container { padding-left: 2rem; padding-right: 2rem; }
}
[data-testid="stMetricValue"] { font-size: clamp(1.1rem, 1.7vw, 1.9rem); }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] div,
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] p, [data-testid="stMetricLabel"] div {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: anywhere;
}
</style>"""


def initial_refresh(wanted: str | None, choices: dict[str, int | None]) -> str:
    """The label of ``choices`` (label -> seconds, None = off) whose seconds equal the link's
    ``refresh`` value ``wanted``; "Off" when none does."""
    for label, seconds in choices.items():
        if seconds is not None and str(seconds) == wanted:
            return label
    return "Off"
