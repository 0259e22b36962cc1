"""Writing imported rows into the store in chunks: one ``write_connection`` per batch, so a
running collector or dashboard can interleave, with distinct and inserted counts in the report."""

from __future__ import annotations

import os
from collections.abc import Mapping

from budgetlens.importers.report import ImportReport
from budgetlens.importers.validation import Kind

#: Rows per written batch (model calls); records and events are flushed with them.
DEFAULT_CHUNK_SIZE = 5000


class ChunkedWriter:
    """Collect rows and write them with ``budgetlens.store.write_batch`` every ``chunk_size`` calls.

    Each flush opens the store with ``write_connection`` (the file is held only for one batch, so a
    running collector or dashboard can interleave). Counts of distinct and inserted rows go to
    ``report``.
    """

    def __init__(
        self, db_path: str | os.PathLike, report: ImportReport, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> None:
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
        from budgetlens.store import write_batch, write_connection

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
