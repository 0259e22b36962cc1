"""``Mapped``: the store rows one OTLP request maps to, as dicts keyed by store columns.

The row layout is the store schema's (``budgetlens.store.schema``): the mapping
(``budgetlens.otlp.mapping``) appends one dict per row keyed by the column names below
(``CALL_KEYS``, ``RECORD_KEYS``, ``EVENT_KEYS``; a foreign root span's record and a tool span's
event carry only ``ROOT_RECORD_KEYS`` / ``TOOL_EVENT_KEYS``; ``*_utc`` values as integer
microseconds since the Unix epoch, UTC). ``Mapped.calls``/``records``/``events`` give the same
rows with ``*_utc`` as naive UTC datetimes; ``Mapped.tables()`` as pyarrow tables with the
store's column types (a column a row lacks is NULL).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pyarrow as pa

from budgetlens.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS

_EPOCH = dt.datetime(1970, 1, 1)

#: Row layouts: the store columns a mapped row carries, in store order.
CALL_KEYS = tuple(column for column in MODEL_CALL_COLUMNS if column != "is_subagent")
RECORD_KEYS = RUN_RECORD_COLUMNS
EVENT_KEYS = BUDGET_EVENT_COLUMNS
#: Keys of the narrower rows: a foreign root span's run record, a tool span's event.
ROOT_RECORD_KEYS = tuple(
    column
    for column in RUN_RECORD_COLUMNS
    if column
    in {"run_id", "trace_id", "source", "service_name", "task_type", "agent_name", "model"}
    | {"start_utc", "end_utc", "duration_s", "stop_reason", "quality"}
)
TOOL_EVENT_KEYS = tuple(
    column
    for column in BUDGET_EVENT_COLUMNS
    if column in {"event_id", "run_id", "span_id", "ts_utc", "name", "tool_name"}
)

#: One mapped row: store column name -> value (``*_utc`` as integer µs since the epoch, UTC).
Row = dict[str, Any]

_COLUMNS = {  # store table -> its columns
    "model_calls": MODEL_CALL_COLUMNS,
    "run_records": RUN_RECORD_COLUMNS,
    "budget_events": BUDGET_EVENT_COLUMNS,
}
#: The columns a mapped row of each table carries (all but ``is_subagent``, which is False).
_GIVEN = {table: tuple(c for c in columns if c != "is_subagent") for table, columns in _COLUMNS.items()}
_REQUIRED = {
    "model_calls": ("span_id", "run_id", "source", "usage_status"),
    "run_records": ("run_id", "source"),
    "budget_events": ("event_id", "run_id", "name"),
}
_SCHEMAS: dict[str, pa.Schema] = {}


def _schema(table: str) -> pa.Schema:
    """The store's Arrow schema of ``table`` (from ``rows_to_table``, imported on first use)."""
    if table not in _SCHEMAS:
        from budgetlens.store.writer import rows_to_table

        _SCHEMAS[table] = rows_to_table(table, _COLUMNS[table], []).schema
    return _SCHEMAS[table]


def utc(micros: int | None) -> dt.datetime | None:
    """Naive UTC datetime of integer microseconds since the epoch (None stays None)."""
    return None if micros is None else _EPOCH + dt.timedelta(microseconds=micros)


def _as_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``*_utc`` values as naive UTC datetimes."""
    return [
        {name: utc(value) if name.endswith("_utc") else value for name, value in row.items()} for row in rows
    ]


def _transposed(names: tuple[str, ...], rows: list[Row]) -> dict[str, Any] | None:
    """``{name: column}`` of rows that all carry the same columns (the usual case: one pass,
    no lookup per value); a column they all lack is NULL. None when the rows differ in shape."""
    if not rows:
        return None
    present = tuple(name for name in names if name in rows[0])
    size = len(present)
    if len(present) < 2 or any(len(row) != size for row in rows):
        return None
    try:  # every row holds the ``size`` keys of ``present``: the same keys as the first
        columns = zip(*map(itemgetter(*present), rows), strict=True)
        by_name: dict[str, Any] = dict(zip(present, columns, strict=True))
    except KeyError:
        return None
    missing = [None] * len(rows)
    return {name: by_name.get(name, missing) for name in names}


def rows_table(table: str, rows: list[Row]) -> pa.Table:
    """Rows of ``table`` (dicts keyed by its columns) as a pyarrow table of the store's columns
    and types.

    A column a row lacks is NULL (``is_subagent`` False, as ``rows_to_table`` makes it).
    Raises ValueError naming the field when a required column is NULL or empty.
    """
    schema = _schema(table)
    names = _GIVEN[table]
    by_name = _transposed(names, rows)
    if by_name is None:  # rows of different shapes: a column a row lacks is NULL
        by_name = {name: [row.get(name) for row in rows] for name in names}
    for name in _REQUIRED[table]:
        column = by_name[name]
        if None in column or "" in column:
            index = next(i for i, v in enumerate(column) if v in (None, ""))
            raise ValueError(f"{table} row {index}: field {name!r} is required")
    arrays = [
        pa.array(by_name[name] if name != "is_subagent" else [False] * len(rows), type=field.type)
        for name, field in zip(schema.names, schema)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class Mapped:
    """Rows for ``budgetlens.store.write_batch`` plus what was rejected.

    ``calls``/``records``/``events`` are lists of dicts keyed by store columns (built on first
    access); ``tables()`` gives the same rows as pyarrow tables; ``spans`` is the number of spans
    seen (accepted + rejected); ``errors`` holds one reason per rejected span; ``flagged`` counts
    repaired spans by quality flag; ``prints``: the content fingerprint of each accepted span,
    ``(trace hex, span hex) -> budgetlens.otlp.memory.span_digest`` (filled when mapped with a
    ``SpanMemory``; a decode worker hands them back so the collector can check them).
    """

    spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    #: spans stored after a repair, by quality flag (``budgetlens.semconv.QUALITY_FLAGS``)
    flagged: dict[str, int] = field(default_factory=dict)
    call_rows: list[Row] = field(default_factory=list, repr=False)
    record_rows: list[Row] = field(default_factory=list, repr=False)
    event_rows: list[Row] = field(default_factory=list, repr=False)
    prints: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    @property
    def calls(self) -> list[dict]:
        """Model-call rows as dicts (``CALL_KEYS``)."""
        return _as_dicts(self.call_rows)

    @property
    def records(self) -> list[dict]:
        """Run records as dicts (``RECORD_KEYS``, or ``ROOT_RECORD_KEYS`` for a foreign root)."""
        return _as_dicts(self.record_rows)

    @property
    def events(self) -> list[dict]:
        """Budget events as dicts (``EVENT_KEYS``, or ``TOOL_EVENT_KEYS`` for a tool span)."""
        return _as_dicts(self.event_rows)

    @property
    def rows(self) -> int:
        """Rows of all three kinds."""
        return len(self.call_rows) + len(self.record_rows) + len(self.event_rows)

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        """``(calls, records, events)`` as pyarrow tables with the store's columns and types."""
        return (
            rows_table("model_calls", self.call_rows),
            rows_table("run_records", self.record_rows),
            rows_table("budget_events", self.event_rows),
        )

    def error_message(self, limit: int = 5, reason_chars: int = 200) -> str:
        """A short message for OTLP ``partial_success.error_message``: the first ``limit``
        reasons, each cut to ``reason_chars`` characters, then "and K more" (so the answer
        stays about 1 KB however large the rejected values were)."""
        shown = "; ".join(
            reason if len(reason) <= reason_chars else reason[:reason_chars] + "..."
            for reason in self.errors[:limit]
        )
        more = len(self.errors) - limit
        return f"{shown}; and {more} more" if more > 0 else shown
