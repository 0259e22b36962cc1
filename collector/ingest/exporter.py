"""``DuckDBSpanExporter``: an OpenTelemetry SDK span exporter writing budget rows to DuckDB.

For single-process use (no collector): add it to a ``TracerProvider`` with a
``BatchSpanProcessor`` and the guard's spans (and any GenAI spans of the same process) become rows
of the store, mapped exactly as the collector maps OTLP (``budgetlens.otlp.mapping``). Each ``export``
call opens the file, commits one batch and closes it, so a dashboard can read in between.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from budgetlens.config import resolve_db_path

log = logging.getLogger(__name__)


class DuckDBSpanExporter(SpanExporter):
    """Export finished spans into the DuckDB store at ``db_path`` (default: ``--db`` resolution,
    ``BUDGETLENS_DB``, else ``budgetlens.duckdb``).

    ``export`` returns ``SpanExportResult.SUCCESS`` once the batch is committed (invalid spans are
    logged and skipped), ``FAILURE`` when the store cannot be written or after ``shutdown``; it
    never raises into the agent. ``shutdown`` is idempotent. ``source`` fills the rows' ``source``
    column (default ``otel-sdk``).
    """

    def __init__(self, db_path: str | os.PathLike | None = None, *, source: str = "otel-sdk"):
        if not source:
            raise ValueError("source must be a non-empty string")
        self.db_path = resolve_db_path(db_path)
        self.source = source
        self._lock = threading.Lock()
        self._shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Map and commit ``spans``; SUCCESS when committed, FAILURE otherwise (never raises)."""
        if self._shut_down:
            log.warning("DuckDBSpanExporter.export called after shutdown; %d spans dropped", len(spans))
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            from budgetlens.otlp.mapping import map_request
            from budgetlens.store import write_batch, write_connection

            mapped = map_request(encode_spans(spans), source=self.source)
            if mapped.rejected:
                log.warning("skipped %d invalid spans: %s", mapped.rejected, mapped.error_message())
            if mapped.calls or mapped.records or mapped.events:
                with self._lock, write_connection(self.db_path) as conn:
                    write_batch(conn, mapped.calls, mapped.records, mapped.events)
            return SpanExportResult.SUCCESS
        except Exception:  # the OTel contract: report FAILURE, never raise into the agent
            log.exception("DuckDBSpanExporter could not write %d spans to %s", len(spans), self.db_path)
            return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Stop exporting (idempotent); later ``export`` calls return FAILURE."""
        self._shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here: every ``export`` commits before returning."""
        return True
