"""The report of one import: counts, skipped lines by reason, bad lines as ``file:line: reason``,
and the bytes read that drive the progress bar."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

#: Bad lines kept verbatim in a report (all are counted).
MAX_BAD_LINES_KEPT = 1000
#: Longest reason text kept in a bad-line report or an error message, in characters.
_MAX_REASON_CHARS = 120


def shorten(reason: object) -> str:
    """``str(reason)``, cut to 120 characters (ending in ``...``) so one bad line stays one line."""
    text = str(reason)
    return text if len(text) <= _MAX_REASON_CHARS else text[: _MAX_REASON_CHARS - 3] + "..."


@dataclass
class ImportReport:
    """Counts of one import, filled while it runs.

    ``files``: files read; ``runs``/``calls``/``events``: distinct rows produced; ``new_*``: rows
    actually inserted (0 on a repeated import); ``skipped``: reason -> lines or items deliberately
    not imported; ``bad_lines``: ``file:line: reason`` strings (the first ``MAX_BAD_LINES_KEPT``),
    ``bad_line_count`` all of them; ``bytes_read``: bytes of the input files.
    """

    progress: Callable[[int], None] | None = None
    files: int = 0
    runs: int = 0
    calls: int = 0
    events: int = 0
    new_runs: int = 0
    new_calls: int = 0
    new_events: int = 0
    bytes_read: int = 0
    skipped: Counter = field(default_factory=Counter)
    bad_lines: list[str] = field(default_factory=list)
    bad_line_count: int = 0
    files_without_runs: list[str] = field(default_factory=list)

    def bad_line(self, path: Path | str, lineno: int | None, reason: str) -> None:
        """Report an unreadable line (or item) as ``file:line: reason``; it is skipped."""
        where = f"{path}:{lineno}" if lineno is not None else f"{path}"
        self.bad_line_count += 1
        if len(self.bad_lines) < MAX_BAD_LINES_KEPT:
            self.bad_lines.append(f"{where}: {reason}")
        log.debug("bad line %s: %s", where, reason)

    def skip(self, reason: str, count: int = 1) -> None:
        """Count ``count`` lines or items deliberately not imported, with the reason."""
        self.skipped[reason] += count

    def advance(self, nbytes: int) -> None:
        """Record ``nbytes`` bytes read (drives the progress bar)."""
        self.bytes_read += nbytes
        if self.progress is not None and nbytes:
            self.progress(nbytes)
