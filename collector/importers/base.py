"""The importer contract: what a format is (:class:`ImporterFormat`) and the options every
format honours (:class:`ImportOptions`).

An importer turns files into store rows. A format's ``read`` generator takes the list of files
and yields ``(kind, row)`` pairs, ``kind`` being ``"call"`` (a ``model_calls`` row), ``"record"``
(a ``run_records`` row) or ``"event"`` (a ``budget_events`` row). Rows are dicts keyed by the
column names of ``budgetlens.store.schema``. What formats share lives beside this module:

- ``reading``: file discovery and reading. JSONL is streamed line by line
  (:func:`~budgetlens.importers.reading.iter_json_lines`), never loaded whole; only formats whose
  files are one JSON document each (``.traj``, ``.traj.json``, OpenHands runtime trajectories)
  load a file whole. A line longer than ``ImportOptions.max_line_bytes`` (64 MiB by default; a
  one-document file larger than that) is reported as ``line too long`` and skipped without
  holding more than the cap in memory.
- ``validation``: a malformed value never aborts an import. Each line (or one-document file) is
  turned into rows inside ``attempt`` / ``checked_rows``, the one place that catches data errors
  and reports the line as ``file:line: reason``; all rows of a rejected line are dropped
  together, and every row is checked against the store's column types (``check_row``) before it
  is queued. Costs and token counts that are NaN, infinite or negative reject their line
  (``source_number``); a present but unparseable timestamp rejects its line
  (``parse_timestamp``).
- ``rows``: ids are stable (``stable_id`` over a file-relative identity such as message id +
  request id), so a second import of the same files adds nothing (the store inserts with ON
  CONFLICT DO NOTHING). Unknown usage stays unknown: a call without usage has NULL token columns
  and usage_status ``unknown`` (``usage_columns``), never 0.
- ``report``: a bad line is reported as ``file:line: reason`` (``ImportReport.bad_line``) and
  skipped; a line deliberately not turned into a row (a duplicate, a heartbeat) is counted with
  its reason (``ImportReport.skip``). A file that holds nothing of the format (recognised by
  content, not by name) adds no run and is listed in ``ImportReport.files_without_runs``.
- ``writer``: rows are written in chunks (``ChunkedWriter``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from budgetlens import semconv

# Re-exported for callers that import them from here (tests).
from budgetlens.importers.reading import MAX_LINE_BYTES, expand_paths, iter_json_lines  # noqa: F401
from budgetlens.importers.report import ImportReport
from budgetlens.importers.validation import (
    Kind,
    Row,
    check_row,  # noqa: F401
)

ReadFn = Callable[[Sequence[Path], "ImportOptions", ImportReport], Iterator[tuple[Kind, Row]]]


@dataclass(frozen=True)
class ImportOptions:
    """Options every format honours.

    ``task_type`` (str or None): when given, every run and call gets this task type; when None
    each format derives one (project folder, cwd, benchmark or agent name).
    ``max_line_bytes`` (int > 0, bytes): longer lines (and larger one-document files) are
    reported as too long and skipped. Raises ValueError when it is not a positive int.
    """

    task_type: str | None = None
    max_line_bytes: int = MAX_LINE_BYTES

    def __post_init__(self) -> None:
        value = self.max_line_bytes
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"max_line_bytes must be an int >= 1 (bytes), got {value!r}")


@dataclass(frozen=True)
class ImporterFormat:
    """One importable log format.

    ``name`` is the CLI name (``claude-code``), ``description`` one line for ``--help``,
    ``patterns`` the file-name globs picked up when a directory is given, and ``read`` the
    generator of ``(kind, row)`` pairs over a list of files.
    """

    name: str
    description: str
    patterns: tuple[str, ...]
    read: ReadFn

    @property
    def source(self) -> str:
        """The ``source`` column value of rows from this format: ``import:<name>``."""
        return f"{semconv.SOURCE_IMPORT_PREFIX}{self.name}"
