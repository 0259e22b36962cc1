"""One output-sanitizing step for every CLI table, CSV and note: stored strings (run ids, task
types, teams, ...) came from whoever sent spans, so a control character or a bidi override in
them is shown escaped (``\\x1b``, ``\\x00``, ``\\u202e``) instead of reaching the terminal, where
``ESC[2J`` would clear the screen and U+202E reverse what follows. JSON needs no step: its
encoder escapes these already.

Escaped: the characters of ``budgetlens.unsafe_text`` (the C0 and C1 control characters and DEL,
newline and tab too: a cell is one line; the bidi controls; the line and paragraph separators).
Everything else, other non-ASCII text included, is shown as it is.
"""

from __future__ import annotations

import re
from typing import Any

from budgetlens.unsafe_text import UNSAFE as _UNSAFE


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character and bidi override escaped: ``"a\\x1b[2Jb"`` ->
    ``"a\\\\x1b[2Jb"``, ``"\\u202e"`` -> ``"\\\\u202e"``. Other text is returned unchanged."""
    return _UNSAFE.sub(_escape, text)


def safe_cell(value: Any) -> Any:
    """``value`` through :func:`terminal_safe` when it is a string, else unchanged (numbers,
    None, timestamps)."""
    return terminal_safe(value) if isinstance(value, str) else value


def safe_frame(frame):
    """A copy of the pandas ``frame`` whose text cells, column names included, are
    :func:`terminal_safe`; other cells are unchanged."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype.kind == "O":
            out[column] = out[column].map(safe_cell)
    out.columns = [safe_cell(c) for c in out.columns]
    return out
