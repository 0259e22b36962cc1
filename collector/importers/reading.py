"""Finding the files of an import and reading them: directory expansion by file-name pattern,
streaming JSONL line by line in constant memory, loading one-document files whole, all under the
line-size cap and reporting bytes read for progress.

``.gz`` files are decompressed on the fly. A line (or one-document file) longer than the cap is
reported as ``line too long`` / ``document too long`` and skipped without holding more than the
cap in memory; a file that cannot be read further (permissions, a corrupt ``.gz``) is reported
at the line reached.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from budgetlens.importers.report import ImportReport, shorten

#: Longest line (or one-document file) read, in bytes; longer ones are reported and skipped.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Progress is reported after at least this many bytes were read (and at the end of each file).
_PROGRESS_STEP_BYTES = 1 << 20
#: Errors reading a file (permissions, a corrupt or truncated ``.gz``): the rest of it is skipped.
_READ_ERRORS = (OSError, EOFError, zlib.error)


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


def file_size(path: Path) -> int:
    """Size of ``path`` in bytes (0 when it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def iter_json_lines(
    path: Path, report: ImportReport, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, dict]]:
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
                    report.bad_line(
                        path, lineno, f"line too long (more than {max_line_bytes} bytes); skipped"
                    )
                    continue
                if not line.strip():
                    continue
                try:
                    obj = loads(line)
                except (ValueError, RecursionError) as error:
                    report.bad_line(path, lineno, f"invalid JSON ({shorten(error)})")
                    continue
                if not isinstance(obj, dict):
                    report.bad_line(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
                    continue
                yield lineno, obj
    except _READ_ERRORS as error:
        report.bad_line(path, lineno + 1, f"cannot read further ({shorten(error)}); rest skipped")
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
        report.bad_line(path, None, f"cannot read ({shorten(error)})")
        return None
    if len(data) > max_line_bytes:
        report.advance(file_size(path))
        report.bad_line(path, None, f"document too long (more than {max_line_bytes} bytes); skipped")
        return None
    report.advance(len(data))
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        report.bad_line(path, getattr(error, "lineno", None), f"invalid JSON ({shorten(error)})")
        return None
