"""OTLP/JSON trace files: one ``ExportTraceServiceRequest`` per file (pretty-printed or not), or
one per line as the OpenTelemetry Collector's ``file`` exporter writes them.

Spans are mapped by the collector's own mapping (``budgetlens.otlp.mapping.map_otlp_json``): the same
rows as spans sent to ``POST /v1/traces``, with ``source = import:otlp-json``. A file whose first
non-blank line is a complete JSON object is read line by line (constant memory); otherwise it
is one document and is loaded whole.

A line (or file) that is not OTLP/JSON is reported as ``file:line: reason``; a rejected span
(bad ids, wrong types) is reported the same way with the collector's reason. Documents holding
only logs or metrics (``resourceLogs``/``resourceMetrics``) are skipped and counted. Task type,
stop reason and usage status come from the spans (budgetlens or GenAI attributes); ``--task-type``
overrides the task type of every run and call.

A file is recognised by content: one without any OTLP/JSON document (``resourceSpans``,
``resourceLogs`` or ``resourceMetrics``), e.g. a Claude Code transcript, adds nothing and is listed
as a file that held no run of this format, without a bad line per line; in a file that holds
OTLP/JSON, an object that is not OTLP/JSON is a bad line. Lines longer than the cap
(``ImportOptions.max_line_bytes``) are reported and skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.reading import MAX_LINE_BYTES, iter_json_lines, load_json_document
from budgetlens.importers.report import MAX_BAD_LINES_KEPT, ImportReport
from budgetlens.importers.validation import checked_rows

log = logging.getLogger(__name__)

NAME = "otlp-json"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SKIP_NOT_TRACES = "OTLP/JSON document without traces (logs or metrics)"
SKIP_NOT_OTLP = "JSON object in a file without OTLP/JSON documents"
_NOT_OTLP = "not an OTLP/JSON trace document (no resourceSpans)"
_OTLP_KEYS = ("resourceSpans", "resourceLogs", "resourceMetrics")


def _is_json_lines(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> bool:
    """True when the first non-blank line of ``path`` is a whole JSON object (JSONL). Reads at
    most ``max_line_bytes`` + 1 bytes of it (a longer first line is treated as JSONL, so it is
    reported as too long)."""
    try:
        handle = open(path, "rb")
    except OSError:
        return True  # iter_json_lines reports it
    with handle:
        while True:
            line = handle.readline(max_line_bytes + 1)
            if not line:
                return False
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                return True
            if line.strip():
                try:
                    return isinstance(json.loads(line), dict)
                except (ValueError, RecursionError):
                    return False


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield the collector mapping's calls, run records and events for each document."""
    for path in paths:
        report.files += 1
        cap = options.max_line_bytes
        if path.name.endswith(".gz") or _is_json_lines(path, cap):
            recognised = False
            foreign: list[int] = []  # non-OTLP object lines before any OTLP document (kept: 1000)
            n_foreign = 0
            for lineno, document in iter_json_lines(path, report, cap):
                if not any(key in document for key in _OTLP_KEYS):
                    if recognised:
                        report.bad_line(path, lineno, _NOT_OTLP)
                    else:
                        n_foreign += 1
                        if len(foreign) < MAX_BAD_LINES_KEPT:
                            foreign.append(lineno)
                    continue
                if not recognised:
                    recognised = True
                    for earlier in foreign:
                        report.bad_line(path, earlier, _NOT_OTLP)
                    report.bad_line_count += n_foreign - len(foreign)
                yield from checked_rows(
                    report, path, lineno, _document(path, lineno, document, options, report)
                )
            if not recognised:
                report.skip(SKIP_NOT_OTLP, n_foreign)
                report.files_without_runs.append(str(path))
        else:
            document = load_json_document(path, report, cap)
            if document is None:
                continue
            if not isinstance(document, dict) or not any(k in document for k in _OTLP_KEYS):
                report.skip(SKIP_NOT_OTLP)
                report.files_without_runs.append(str(path))
                continue
            yield from checked_rows(report, path, None, _document(path, None, document, options, report))


def _document(
    path: Path, lineno: int | None, document: dict, options: ImportOptions, report: ImportReport
) -> Iterator[tuple]:
    from budgetlens.otlp.decode import OtlpError
    from budgetlens.otlp.mapping import map_otlp_json

    if "resourceSpans" not in document:
        if "resourceLogs" in document or "resourceMetrics" in document:
            report.skip(SKIP_NOT_TRACES)
        else:
            report.bad_line(path, lineno, _NOT_OTLP)
        return
    try:
        mapped = map_otlp_json(document, source=SOURCE)
    except OtlpError as error:
        report.bad_line(path, lineno, str(error))
        return
    for reason in mapped.errors:
        report.bad_line(path, lineno, f"span rejected: {reason}")
    for kind, rows in (("call", mapped.calls), ("record", mapped.records), ("event", mapped.events)):
        for row in rows:
            if options.task_type and kind != "event":
                row = {**row, "task_type": options.task_type}
            yield kind, row


FORMAT = ImporterFormat(
    name=NAME,
    description="OTLP/JSON ExportTraceServiceRequest files, one per file or one per line "
    "(OpenTelemetry Collector file exporter)",
    patterns=("*.json", "*.jsonl", "*.json.gz", "*.jsonl.gz"),
    read=read,
)
