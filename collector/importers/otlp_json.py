"""OTLP/JSON trace files: one ``ExportTraceServiceRequest`` per file (pretty-printed or not), or
one per line as the OpenTelemetry Collector's ``file`` exporter writes them.

Spans are mapped by the collector's own mapping (``collector.mapping.map_otlp_json``): the same
rows as spans sent to ``POST /v1/traces``, with ``source = import:otlp-json``. A file whose first
non-blank line is a complete JSON object is read line by line (constant memory); otherwise it
is one document and is loaded whole.

A line (or file) that is not OTLP/JSON is reported as ``file:line: reason``; a rejected span
(bad ids, wrong types) is reported the same way with the collector's reason. Documents holding
only logs or metrics (``resourceLogs``/``resourceMetrics``) are skipped and counted. Task type,
stop reason and usage status come from the spans (budgetlens or GenAI attributes); ``--task-type``
overrides the task type of every run and call.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterator, Sequence

from collector import semconv
from collector.importers.base import (
    ImporterFormat,
    ImportOptions,
    ImportReport,
    iter_json_lines,
    load_json_document,
)

log = logging.getLogger(__name__)

NAME = "otlp-json"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SKIP_NOT_TRACES = "OTLP/JSON document without traces (logs or metrics)"


def _is_json_lines(path: Path) -> bool:
    """True when the first non-blank line of ``path`` is a whole JSON object (JSONL)."""
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    return isinstance(json.loads(line), dict)
                except ValueError:
                    return False
    return False


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield the collector mapping's calls, run records and events for each document."""
    for path in paths:
        report.files += 1
        if path.name.endswith(".gz") or _is_json_lines(path):
            for lineno, document in iter_json_lines(path, report):
                yield from _document(path, lineno, document, options, report)
        else:
            document = load_json_document(path, report)
            if document is None:
                continue
            if not isinstance(document, dict):
                report.bad_line(path, 1, "expected an OTLP/JSON object")
                continue
            yield from _document(path, None, document, options, report)


def _document(path: Path, lineno: int | None, document: dict, options: ImportOptions,
              report: ImportReport) -> Iterator[tuple]:
    from collector.mapping import map_otlp_json
    from collector.otlp_decode import OtlpError

    if "resourceSpans" not in document:
        if "resourceLogs" in document or "resourceMetrics" in document:
            report.skip(SKIP_NOT_TRACES)
        else:
            report.bad_line(path, lineno, "not an OTLP/JSON trace document (no resourceSpans)")
        return
    try:
        mapped = map_otlp_json(document, source=SOURCE)
    except OtlpError as error:
        report.bad_line(path, lineno, str(error))
        return
    for reason in mapped.errors:
        report.bad_line(path, lineno, f"span rejected: {reason}")
    for kind, rows in (("call", mapped.calls), ("record", mapped.records),
                       ("event", mapped.events)):
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
