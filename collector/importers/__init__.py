"""Importers: the agent logs teams already have -> the budgetlens store (issue 5).

Formats (``FORMATS``, by CLI name):

- ``otlp-json``: OTLP/JSON ExportTraceServiceRequest files, one per file or one per line (the
  OpenTelemetry Collector file exporter); the collector's own span mapping.
- ``claude-code``: Claude Code session JSONL; a session (with its subagent files) is one run.
- ``codex``: Codex CLI rollout JSONL; one rollout is one run.
- ``swe-agent``: SWE-agent ``.traj`` and mini-swe-agent ``.traj.json``; one file is one run.
- ``openhands``: OpenHands evaluation output JSONL (one run per line) and runtime trajectories.

Use :func:`import_paths` to import into a store, or :func:`read_rows` to get the rows without one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator

from budgetlens.importers import claude_code, codex, openhands, otlp_json, swe_agent
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.reading import MAX_LINE_BYTES, expand_paths, file_size
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import check_price_file
from budgetlens.importers.writer import DEFAULT_CHUNK_SIZE, ChunkedWriter

log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "ImportOptions",
    "ImportReport",
    "ImporterFormat",
    "get_format",
    "import_paths",
    "read_rows",
]

#: The format registry, in the order ``budgetlens import --help`` lists it.
FORMATS: dict[str, ImporterFormat] = {
    fmt.name: fmt
    for fmt in (
        otlp_json.FORMAT,
        claude_code.FORMAT,
        codex.FORMAT,
        swe_agent.FORMAT,
        openhands.FORMAT,
    )
}


def get_format(name: str) -> ImporterFormat:
    """The format called ``name``. Raises ValueError listing the known formats otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown import format {name!r}; choose one of: {', '.join(FORMATS)}") from None


def read_rows(
    format_name: str,
    paths: Iterable[str | os.PathLike],
    *,
    task_type: str | None = None,
    report: ImportReport | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[str, dict]]:
    """Yield ``(kind, row)`` for the files under ``paths`` without touching a store.

    ``kind`` is ``"call"``, ``"record"`` or ``"event"``; rows are dicts keyed by store columns.
    Directories are searched for the format's file patterns; lines longer than
    ``max_line_bytes`` are reported and skipped. Raises ValueError for an unknown format, a bad
    ``max_line_bytes`` or a bad price file (``BUDGETLENS_PRICES_FILE``), FileNotFoundError for a
    missing path or price file (before anything is read).
    """
    fmt = get_format(format_name)
    options = ImportOptions(task_type=task_type, max_line_bytes=max_line_bytes)
    files = expand_paths(paths, fmt.patterns)
    check_price_file()
    yield from fmt.read(files, options, report or ImportReport())


def import_paths(
    format_name: str,
    paths: Iterable[str | os.PathLike],
    db_path: str | os.PathLike,
    *,
    task_type: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Callable[[int, int], Callable[[int], None] | None] | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> ImportReport:
    """Import the files under ``paths`` (format ``format_name``) into the store at ``db_path``.

    Rows are written in batches of ``chunk_size`` rows through ``budgetlens.store.write_batch``
    (idempotent: a second import of the same files inserts nothing). ``progress``, if given, is
    called once with (total bytes, number of files) and returns a callable fed with the bytes
    read (e.g. a tqdm bar's ``update``). Returns the :class:`ImportReport` (runs, calls, new
    rows, skipped lines by reason, bad lines as ``file:line: reason``). A malformed value never
    aborts the import: its line (or one-document file) is reported and skipped; lines longer
    than ``max_line_bytes`` (bytes, default 64 MiB) too.

    Raises, before anything is read or written: ValueError for an unknown format, a bad
    ``chunk_size`` or ``max_line_bytes``, or a bad price file (``BUDGETLENS_PRICES_FILE``, the
    message names the file and the rule); FileNotFoundError for a missing path or price file.
    ``budgetlens.store.StoreError`` when the store cannot be written.
    """
    fmt = get_format(format_name)
    options = ImportOptions(task_type=task_type, max_line_bytes=max_line_bytes)
    files = expand_paths(paths, fmt.patterns)
    check_price_file()
    total = sum(file_size(path) for path in files)
    report = ImportReport(progress=progress(total, len(files)) if progress else None)
    writer = ChunkedWriter(db_path, report, chunk_size)
    for kind, row in fmt.read(files, options, report):
        writer.add(kind, row)
    writer.close()
    log.info(
        "imported %s: %d files, %d runs (%d new), %d calls (%d new), %d bad lines",
        fmt.name,
        report.files,
        report.runs,
        report.new_runs,
        report.calls,
        report.new_calls,
        report.bad_line_count,
    )
    return report
