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
- A malformed value never aborts an import. Each line (or one-document file) is turned into rows
  inside :func:`attempt` / :func:`checked_rows`, the one place that catches the data errors
  (``DATA_ERRORS``: wrong types, unparseable or out-of-range values, missing keys) and reports
  the line as ``file:line: reason``; all rows of a rejected line are dropped together. Every
  row is validated against the store's column types by :func:`check_row` before it is queued,
  so nothing can fail later when a batch is written. Costs and token counts that are NaN,
  infinite or negative reject their line (:func:`source_number`); a present but unparseable
  timestamp rejects its line (:func:`parse_timestamp`).
- A line longer than ``ImportOptions.max_line_bytes`` (64 MiB by default; a one-document file
  larger than that) is reported as ``line too long`` and skipped without holding more than the
  cap in memory.
- A file that holds nothing of the format (recognised by content, not by name) adds no run and
  is listed in ``ImportReport.files_without_runs``.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import gzip
import hashlib
import json
import logging
import math
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from collector import semconv
from collector.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS
from collector.usage import Usage

log = logging.getLogger(__name__)

#: Rows per written batch (model calls); records and events are flushed with them.
DEFAULT_CHUNK_SIZE = 5000
#: Bad lines kept verbatim in a report (all are counted).
MAX_BAD_LINES_KEPT = 1000
#: Longest line (or one-document file) read, in bytes; longer ones are reported and skipped.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Errors a malformed value raises while a line is turned into rows (caught per line by
#: :func:`attempt`). pyarrow's ArrowTypeError/ArrowInvalid subclass TypeError/ValueError.
DATA_ERRORS = (TypeError, ValueError, ArithmeticError, LookupError, AttributeError,
               RecursionError)
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
    when the value is missing or unparseable (lenient; see :func:`parse_timestamp`)."""
    try:
        return parse_timestamp(value, "timestamp")
    except ValueError:
        return None


def parse_timestamp(value: object, name: str) -> dt.datetime | None:
    """A source timestamp (ISO-8601 string, ``Z`` or offset; naive means UTC) as an aware UTC
    datetime; None when missing (None or "").

    Raises ValueError naming ``name`` when the value is present but not a parseable ISO-8601
    string or out of the datetime range, so the line holding it is reported and skipped.
    Timestamps are compared as datetimes, never as strings (offsets differ).
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an ISO-8601 string, got {_short(repr(value))}")
    try:
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=dt.timezone.utc)
        return parsed.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):
        raise ValueError(f"{name} is not an ISO-8601 timestamp: {_short(repr(value))}") from None


def from_unix(value: object) -> dt.datetime | None:
    """Seconds since the epoch (int or float) as an aware UTC datetime, or None when missing,
    not a number, or <= 0. Raises ValueError when the number is beyond the datetime range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    try:
        return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"unix timestamp out of range: {value!r}") from None


def source_number(value: object, name: str, *, integer: bool = False) -> float | int | None:
    """A cost, token count or duration from a source: None when missing, else the number.

    Raises ValueError naming ``name`` when the value is not a number (bool and strings included),
    is NaN or infinite, or is negative; with ``integer`` also when it is not a whole number.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {_short(repr(value))}")
    if isinstance(value, float) and not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        return int(value)
    return value


def text(value: object, name: str) -> str | None:
    """An optional string field of a source line: None when missing, else the string.
    Raises ValueError naming ``name`` for any other type (a list, an object, a number)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string, got {type(value).__name__}")


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
    unknown or the model is unpriced (never $0 for "no price").

    The user price file (``BUDGETLENS_PRICES_FILE``) is validated once at the start of an import
    (:func:`check_price_file`); a model name the price library rejects is unpriced.
    """
    if usage is None or not model:
        return None
    from collector.pricing import cost_usd

    try:
        return cost_usd(model, usage, provider=provider)
    except ValueError as error:  # a model name the price library rejects: unpriced
        log.debug("no price for %s (%s): %s", model, provider, error)
        return None


def check_price_file() -> None:
    """Validate the user price file named by ``BUDGETLENS_PRICES_FILE`` (if set) before an
    import reads anything, so a bad file fails the import instead of leaving calls unpriced.

    Raises ValueError naming the file, the variable and the rule broken (missing or unreadable
    file, unknown key or unit, a price that is not a finite number >= 0, a syntax error);
    delegates to ``collector.pricing.check_prices_file``.
    """
    from collector.pricing import check_prices_file

    check_prices_file()


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


#: Errors reading a file (permissions, a corrupt or truncated ``.gz``): the rest of it is skipped.
_READ_ERRORS = (OSError, EOFError, zlib.error)


def iter_json_lines(path: Path, report: ImportReport,
                    max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each JSON-object line of a JSONL file, in constant memory.

    Blank lines are ignored; a line that is not valid JSON or not a JSON object is reported as
    ``file:line: reason`` and skipped. A line longer than ``max_line_bytes`` is reported as
    ``line too long`` and skipped while being read in 1 MiB pieces (at most ``max_line_bytes``
    are ever held). A file that cannot be read further (corrupt ``.gz``) is reported at the line
    reached. ``.gz`` files are decompressed on the fly. Bytes read are reported to
    ``report.advance`` (progress).
    """
    pending = 0
    loads = json.loads
    limit = max_line_bytes + 1  # the content plus its newline
    lineno = 0
    try:
        with _open_binary(path) as handle:
            readline = handle.readline
            while True:
                line = readline(limit)
                if not line:
                    break
                lineno += 1
                pending += len(line)
                if pending >= _PROGRESS_STEP_BYTES:
                    report.advance(pending)
                    pending = 0
                if len(line) == limit and not line.endswith(b"\n"):
                    line = None
                    while True:  # skip the rest of the line without holding it
                        piece = readline(_PROGRESS_STEP_BYTES)
                        pending += len(piece)
                        if not piece or piece.endswith(b"\n"):
                            break
                    report.bad_line(path, lineno,
                                    f"line too long (more than {max_line_bytes} bytes); skipped")
                    continue
                if not line.strip():
                    continue
                try:
                    obj = loads(line)
                except (ValueError, RecursionError) as error:
                    report.bad_line(path, lineno, f"invalid JSON ({_short(error)})")
                    continue
                if not isinstance(obj, dict):
                    report.bad_line(path, lineno,
                                    f"expected a JSON object, got {type(obj).__name__}")
                    continue
                yield lineno, obj
    except _READ_ERRORS as error:
        report.bad_line(path, lineno + 1, f"cannot read further ({_short(error)}); rest skipped")
    report.advance(pending)


def load_json_document(path: Path, report: ImportReport, max_line_bytes: int = MAX_LINE_BYTES):
    """Load a file that is ONE JSON document (``.traj``, ``.traj.json``, a runtime trajectory).

    These formats are not line-oriented, so the document is loaded whole (they are per-run files,
    kilobytes to a few MB); a file larger than ``max_line_bytes`` is reported as too long and
    skipped (at most the cap is read). Returns the parsed value, or None after reporting the
    file as bad.
    """
    try:
        with _open_binary(path) as handle:
            data = handle.read(max_line_bytes + 1)
    except _READ_ERRORS as error:
        report.bad_line(path, None, f"cannot read ({_short(error)})")
        return None
    if len(data) > max_line_bytes:
        report.advance(file_size(path))
        report.bad_line(path, None,
                        f"document too long (more than {max_line_bytes} bytes); skipped")
        return None
    report.advance(len(data))
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        report.bad_line(path, getattr(error, "lineno", None), f"invalid JSON ({_short(error)})")
        return None


# --- one line (or document) -> rows, robustly -------------------------------------------------


def describe(error: BaseException) -> str:
    """A one-line reason for a data error: ValueError messages as they are (they name the field
    and the rule), other errors prefixed with their type."""
    if type(error) is ValueError:
        return _short(error)
    if isinstance(error, KeyError):
        return f"missing key {_short(error)}"
    return f"{type(error).__name__}: {_short(error)}"


def attempt(report: ImportReport, path: Path | str, lineno: int | None, fn: Callable, *args):
    """``fn(*args)``, or None after reporting ``file:line: reason`` when it raises a data error
    (``DATA_ERRORS``). The one place importers catch malformed values; anything else (a store
    error, a bug outside the data path such as a KeyboardInterrupt) propagates."""
    try:
        return fn(*args)
    except DATA_ERRORS as error:
        report.bad_line(path, lineno, describe(error))
        return None


def checked_rows(report: ImportReport, path: Path | str, lineno: int | None,
                 rows: Iterable[tuple[Kind, Row]]) -> list[tuple[Kind, Row]]:
    """All ``(kind, row)`` pairs of one line or document, each validated with
    :func:`check_row`; ``rows`` is usually a generator, run here. When producing or validating
    any of them raises a data error, the line is reported as ``file:line: reason`` and NONE of
    its rows is returned (a line is imported whole or not at all)."""
    return attempt(report, path, lineno, _checked_list, rows) or []


def _checked_list(rows: Iterable[tuple[Kind, Row]]) -> list[tuple[Kind, Row]]:
    out = [(kind, row) for kind, row in rows]
    for kind, row in out:
        check_row(kind, row)
    return out


_COLUMNS = {"call": frozenset(MODEL_CALL_COLUMNS), "record": frozenset(RUN_RECORD_COLUMNS),
            "event": frozenset(BUDGET_EVENT_COLUMNS)}
_INT32_COLUMNS = frozenset({"turn", "turns", "tool_calls", "limit_turns", "limit_tool_calls"})
_SIGNED_COLUMNS = frozenset({"remaining_tokens"})
_BOOL_COLUMNS = frozenset({"is_subagent", "retryable"})
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1


def _column_rule(column: str) -> str:
    if column in _INT32_COLUMNS:
        return "int32"
    if column.endswith("_tokens"):
        return "int64"
    if column.endswith(("_usd", "_s")) or column == "percent":
        return "float"
    if column.endswith("_utc"):
        return "datetime"
    if column in _BOOL_COLUMNS:
        return "bool"
    return "str"


_RULES = {kind: {c: _column_rule(c) for c in cols} for kind, cols in _COLUMNS.items()}


def check_row(kind: Kind, row: Mapping) -> None:
    """Validate one row against the store's column types before it is queued.

    Rules (None is always allowed): text columns hold ``str`` (valid UTF-8, no lone
    surrogates); ``*_tokens`` ints in 0..2**63-1 (``remaining_tokens`` may be negative);
    ``turn``/``turns``/``tool_calls``/``limit_turns``/``limit_tool_calls`` ints in 0..2**31-1;
    ``*_usd``, ``*_s`` and ``percent`` finite numbers >= 0; ``*_utc`` datetimes; booleans bool.
    Raises ValueError naming the column and the rule (KeyError for an unknown ``kind``).
    """
    rules = _RULES[kind]
    for column, value in row.items():
        if value is None:
            continue
        rule = rules.get(column)
        if rule is None:
            raise ValueError(f"{column!r} is not a column of a {kind} row")
        if rule == "str":
            if type(value) is str and (value.isascii() or _encodable(value)):
                continue
            problem = "a string (valid UTF-8)"
        elif rule == "int64" or rule == "int32":
            if type(value) is int:
                low = -_INT64_MAX - 1 if column in _SIGNED_COLUMNS else 0
                if low <= value <= (_INT32_MAX if rule == "int32" else _INT64_MAX):
                    continue
            problem = "a whole number >= 0 in range"
        elif rule == "float":
            if (type(value) is float and math.isfinite(value)
                    or type(value) is int and value <= _INT64_MAX) and value >= 0:
                continue
            problem = "a finite number >= 0"
        elif rule == "datetime":
            if isinstance(value, dt.datetime):
                continue
            problem = "a timestamp"
        else:
            if type(value) is bool:
                continue
            problem = "true or false"
        raise ValueError(f"{column} must be {problem}, got {_short(repr(value))}")


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(error: object) -> str:
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
