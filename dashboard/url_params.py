"""Reading the dashboard's own URL parameters (``?window=custom&from=...&to=...``,
``?refresh=...``) and naming, never dropping silently, the ones it cannot use
(``streamlit_app.url_note``)."""

from __future__ import annotations

import datetime as dt
import re

from budgetlens.dashboard.formatting import safe_text

#: One ignored parameter: ("param=value", why).
Ignored = tuple[str, str]
#: A value's leading or trailing space, shown (U+2420 SYMBOL FOR SPACE) so it is not lost.
_SPACE_SHOWN = "\u2420"
#: The one date form ``?from=`` / ``?to=`` take (``date.fromisoformat`` alone also reads
#: ``20261101`` and, in other Pythons, more).
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def custom_range(
    from_text: str, to_text: str, today: dt.date
) -> tuple[tuple[dt.date, dt.date] | None, list[Ignored]]:
    """The days ``?from=`` .. ``?to=`` name (inclusive, local dates), and what was ignored of
    them. Unreadable dates, ``from`` after ``to`` and a range starting after ``today`` give
    None (the default range is shown); a ``to`` after ``today`` is clamped to it, with a note:
    a window never ends in the future."""
    item = f"from={from_text}&to={to_text}"
    try:
        if not (_DATE.fullmatch(from_text) and _DATE.fullmatch(to_text)):
            raise ValueError("not YYYY-MM-DD")
        lo, hi = dt.date.fromisoformat(from_text), dt.date.fromisoformat(to_text)
    except ValueError:
        return None, [(item, "dates are YYYY-MM-DD")]
    if lo > hi:
        return None, [(item, "from is after to; the default range shown")]
    if lo > today:
        return None, [(item, f"the range starts after today ({today}); the default range shown")]
    if hi > today:
        return (lo, today), [(item, f"a window never ends in the future; it ends today ({today})")]
    return (lo, hi), []


def refresh_ignored(value: str | None, allowed: list[int]) -> list[Ignored]:
    """``?refresh=`` named when it is set but not one of ``allowed`` (seconds)."""
    if value is None or value in {str(seconds) for seconds in allowed}:
        return []
    return [(f"refresh={value}", f"not one of {', '.join(map(str, allowed))} seconds; auto-refresh off")]


def param_markdown(item: str) -> str:
    """An ignored ``param=value`` as bold markdown showing exactly its characters
    (``formatting.safe_text``); an empty value reads ``(empty)`` and a leading or trailing space
    reads ``␠``, so the bold never breaks on a space and nothing shown is invisible."""
    name, sep, value = item.partition("=")
    if sep:
        stripped = value.strip(" ")
        if not value:
            value = "(empty)"
        elif stripped != value:
            left = len(value) - len(value.lstrip(" "))
            right = len(value) - len(value.rstrip(" "))
            value = _SPACE_SHOWN * left + stripped + _SPACE_SHOWN * right
    return f"**{safe_text(name + sep + value, max_chars=200)}**"
