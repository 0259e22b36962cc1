"""What every importer shares: the format contract, file discovery, streaming line reading with
progress and bad-line reporting, stable ids, row builders, and chunked writes into the store.

An importer turns files into store rows. A format is an :class:`ImporterFormat`; its ``read``
generator takes the list of files and yields ``(kind, row)`` pairs, ``kind`` being ``"call"``
(a ``model_calls`` row), ``"record"`` (a ``run_records`` row) or ``"event"`` (a
``budget_events`` row). Rows are dicts keyed by the column names of ``collector.store.schema``.

Rules every format follows (issue 5):

- Stream: JSONL is read line by line (:func:`iter_json_lines`), never loaded whole; only formats
  whose files are one JSON document each (``.traj``, ``.traj.json``, OpenHands runtime trajectories)
  load a file whole.
- Ids are stable (:func:`stable_id` over a file-relative identity such as message id + request id),
  so a second import of the same files adds nothing (the store inserts with ON CONFLICT DO NOTHING).
- Unknown usage stays unknown: a call without usage has NULL token columns and usage_status
  ``unknown`` (:func:`usage_columns`), never 0.
- A bad line is reported as ``file:line: reason`` (:meth:`ImportReport.bad_line`) and skipped; a line
  deliberately not turned into a row (a duplicate, a heartbeat) is counted with its reason
  (:meth:`ImportReport.skip`).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import gzip
import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from collector import semconv
from collector.usage import Usage

log = logging.getLogger(__name__)

#: Rows per written batch (model calls); records and events are flushed with them.
DEFAULT_CHUNK_SIZE = 5000
#: Bad lines kept verbatim in a report (all are counted).
MAX_BAD_LINES_KEPT = 1000
#: Progress is reported after at least this many bytes were read (and at the end of each file).
_PROGRESS_STEP_BYTES = 1 << 20

Row = dict
Kind = str  # "call" | "record" | "event"
ReadFn = Callable[[Sequence[Path], "ImportOptions", "ImportReport"], Iterator[tuple[Kind, Row]]]


@dataclass(frozen=True)
class ImportOptions:
    """Options every format honours.

    ``task_type`` (str or None): when given, every run and call gets this task type; when None
    each format derives one (project folder, cwd, benchmark or agent name).
    """

    task_type: str | None = None


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


# --- ids, time, usage ------------------------------------------------------------------------


def stable_id(*parts: object) -> str:
    """A stable 40-hex id (sha1) of ``parts``; the same identity always gives the same id."""
    text = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def parse_iso(value: object) -> dt.datetime | None:
    """An ISO-8601 timestamp (``Z`` or offset; naive means UTC) as an aware UTC datetime, or None
    when the value is missing or unparseable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.astimezone(dt.timezone.utc)


def from_unix(value: object) -> dt.datetime | None:
    """Seconds since the epoch (int or float) as an aware UTC datetime, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc)


def seconds_between(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    """``end - start`` in seconds (float, >= 0), or None when either is missing."""
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def usage_columns(usage: Usage | None) -> dict:
    """The token columns and usage_status of a call.

    Reported usage fills the token columns (tokens, int >= 0); ``None`` (the source has no usage
    for this call) leaves them NULL with usage_status ``unknown``, never 0.
    """
    if usage is None:
        return {
            "input_tokens": None,
            "output_tokens": None,
            "total_tokens": None,
            "cache_read_tokens": None,
            "cache_write_tokens": None,
            "reasoning_tokens": None,
            "usage_status": semconv.USAGE_UNKNOWN,
        }
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "usage_status": semconv.USAGE_REPORTED,
    }


def price(model: str | None, usage: Usage | None, provider: str | None = None) -> float | None:
    """Cost in USD of one call from ``collector.pricing`` (genai-prices), or None when the usage is
    unknown or the model is unpriced (never $0 for "no price")."""
    if usage is None or not model:
        return None
    from collector.pricing import cost_usd

    try:
        return cost_usd(model, usage, provider=provider)
    except ValueError as error:  # a model name the price library rejects: unpriced
        log.debug("no price for %s (%s): %s", model, provider, error)
        return None


def provider_from_model(model: str | None, default: str | None = None) -> str | None:
    """The ``gen_ai.provider.name`` implied by a LiteLLM-style ``provider/model`` name, else
    ``default``."""
    if model and "/" in model:
        prefix = model.split("/", 1)[0].lower()
        return {"bedrock": "aws.bedrock", "vertex_ai": "gcp.vertex_ai", "gemini": "gcp.gemini"}.get(
            prefix, prefix
        )
    return default


# --- files and lines -------------------------------------------------------------------------


def expand_paths(paths: Iterable[str | os.PathLike], patterns: Sequence[str]) -> list[Path]:
    """Files to read: a file is taken as given; a directory contributes every file below it
    whose name matches one of ``patterns`` (sorted, so imports are reproducible).

    Raises FileNotFoundError naming the path when a path does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
            ]
            files.extend(found)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    unique: dict[Path, None] = {}
    for path in files:
        unique.setdefault(path, None)
    return list(unique)


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def iter_json_lines(path: Path, report: ImportReport) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each JSON-object line of a JSONL file, in constant memory.

    Blank lines are ignored; a line that is not valid JSON or not a JSON object is reported as
    ``file:line: reason`` and skipped. ``.gz`` files are decompressed on the fly. Bytes read are
    reported to ``report.advance`` (progress).
    """
    pending = 0
    loads = json.loads
    with _open_binary(path) as handle:
        for lineno, line in enumerate(handle, start=1):
            pending += len(line)
            if pending >= _PROGRESS_STEP_BYTES:
                report.advance(pending)
                pending = 0
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except ValueError as error:
                report.bad_line(path, lineno, f"invalid JSON ({_short(error)})")
                continue
            if not isinstance(obj, dict):
                report.bad_line(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
                continue
            yield lineno, obj
    report.advance(pending)


def load_json_document(path: Path, report: ImportReport):
    """Load a file that is ONE JSON document (``.traj``, ``.traj.json``, a runtime trajectory).

    These formats are not line-oriented, so the document is loaded whole (they are per-run files,
    kilobytes to a few MB). Returns the parsed value, or None after reporting the file as bad.
    """
    try:
        with _open_binary(path) as handle:
            data = handle.read()
    except OSError as error:
        report.bad_line(path, None, f"cannot read ({error})")
        return None
    report.advance(len(data))
    try:
        return json.loads(data)
    except ValueError as error:
        report.bad_line(path, getattr(error, "lineno", None), f"invalid JSON ({_short(error)})")
        return None


def _short(error: Exception) -> str:
    text = str(error)
    return text if len(text) <= 120 else text[:117] + "..."


def file_size(path: Path) -> int:
    """Size of ``path`` in bytes (0 when it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- writing ---------------------------------------------------------------------------------


class ChunkedWriter:
    """Collect rows and write them with ``collector.store.write_batch`` every ``chunk_size`` calls.

    Each flush opens the store with ``write_connection`` (the file is held only for one batch, so a
    running collector or dashboard can interleave). Counts of distinct and inserted rows go to
    ``report``.
    """

    def __init__(self, db_path: str | os.PathLike, report: ImportReport,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.db_path = db_path
        self.report = report
        self.chunk_size = chunk_size
        self._rows: dict[str, list[Mapping]] = {"call": [], "record": [], "event": []}
        self._run_ids: set[str] = set()

    def add(self, kind: Kind, row: Mapping) -> None:
        """Queue one row; flushes when ``chunk_size`` rows are queued."""
        self._rows[kind].append(row)
        if kind == "call":
            self.report.calls += 1
        elif kind == "event":
            self.report.events += 1
        self._run_ids.add(row["run_id"])
        if sum(len(rows) for rows in self._rows.values()) >= self.chunk_size:
            self.flush()

    def flush(self) -> None:
        """Write the queued rows in one transaction (no-op when nothing is queued)."""
        if not any(self._rows.values()):
            return
        from collector.store import write_batch, write_connection

        with write_connection(self.db_path) as conn:
            result = write_batch(conn, self._rows["call"], self._rows["record"], self._rows["event"])
        self.report.new_calls += result.calls
        self.report.new_runs += result.records
        self.report.new_events += result.events
        for rows in self._rows.values():
            rows.clear()

    def close(self) -> None:
        """Flush what is left and set ``report.runs`` to the distinct runs seen."""
        self.flush()
        self.report.runs = len(self._run_ids)
