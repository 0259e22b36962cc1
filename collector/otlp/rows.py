"""``Mapped``: the store rows one OTLP request maps to, held as tuples, readable as dicts or Arrow.

The mapping (``budgetlens.otlp.mapping``) appends one tuple per row in the column order below
(``CALL_KEYS``, ``RECORD_KEYS``, ``EVENT_KEYS``; ``*_utc`` values as integer microseconds since
the Unix epoch, UTC). ``Mapped.calls``/``records``/``events`` give the rows as dicts keyed by
store columns (``*_utc`` as naive UTC datetimes; each row has the keys its kind of span sets),
``Mapped.tables()`` as pyarrow tables with the store's column types: the ingest path goes
straight from tuples to Arrow columns, without a dict per row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa

from budgetlens.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS

_EPOCH = dt.datetime(1970, 1, 1)

#: Tuple layouts (store columns a mapped row carries, in store order).
CALL_KEYS = tuple(column for column in MODEL_CALL_COLUMNS if column != "is_subagent")
RECORD_KEYS = RUN_RECORD_COLUMNS
EVENT_KEYS = BUDGET_EVENT_COLUMNS
#: Dict keys of the narrower rows: a foreign root span's run record, a tool span's event.
ROOT_RECORD_KEYS = (
    "run_id",
    "trace_id",
    "source",
    "service_name",
    "task_type",
    "agent_name",
    "model",
    "start_utc",
    "end_utc",
    "duration_s",
    "stop_reason",
    "quality",
)
TOOL_EVENT_KEYS = ("event_id", "run_id", "span_id", "ts_utc", "name", "tool_name")

_LAYOUTS = {  # store table -> (store columns, tuple layout)
    "model_calls": (MODEL_CALL_COLUMNS, CALL_KEYS),
    "run_records": (RUN_RECORD_COLUMNS, RECORD_KEYS),
    "budget_events": (BUDGET_EVENT_COLUMNS, EVENT_KEYS),
}
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

        _SCHEMAS[table] = rows_to_table(table, _LAYOUTS[table][0], []).schema
    return _SCHEMAS[table]


def utc(micros):
    """Naive UTC datetime of integer microseconds since the epoch (None stays None)."""
    return None if micros is None else _EPOCH + dt.timedelta(microseconds=micros)


def _as_dicts(rows: list, layout: tuple, keys: list | None) -> list[dict]:
    out = []
    for index, row in enumerate(rows):
        full = dict(zip(layout, row))
        for name in full:
            if name.endswith("_utc"):
                full[name] = utc(full[name])
        narrow = keys[index] if keys is not None else None
        out.append(full if narrow is None else {name: full[name] for name in narrow})
    return out


def rows_table(table: str, rows: list) -> pa.Table:
    """Tuples of ``table``'s layout as a pyarrow table of the store's columns and types.

    Columns the layout lacks are NULL (``is_subagent`` False, as ``rows_to_table`` makes it).
    Raises ValueError naming the field when a required column is NULL or empty.
    """
    columns, layout = _LAYOUTS[table]
    schema = _schema(table)
    transposed = list(zip(*rows)) if rows else [()] * len(layout)
    by_name = dict(zip(layout, transposed))
    for name in _REQUIRED[table]:
        required = by_name[name]
        if None in required or "" in required:
            index = next(i for i, v in enumerate(required) if v in (None, ""))
            raise ValueError(f"{table} row {index}: field {name!r} is required")
    arrays = []
    for column in columns:
        given = by_name.get(column)
        values = (
            list(given) if given is not None else [False if column == "is_subagent" else None] * len(rows)
        )
        arrays.append(pa.array(values, type=schema.field(column).type))
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class Mapped:
    """Rows for ``budgetlens.store.write_batch`` plus what was rejected.

    ``calls``/``records``/``events`` are lists of dicts keyed by store columns (built on first
    access); ``tables()`` gives the same rows as pyarrow tables; ``spans`` is the number of spans
    seen (accepted + rejected); ``errors`` holds one reason per rejected span; ``flagged`` counts
    repaired spans by quality flag.
    """

    spans: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    #: spans stored after a repair, by quality flag (``budgetlens.semconv.QUALITY_FLAGS``)
    flagged: dict[str, int] = field(default_factory=dict)
    call_rows: list[tuple] = field(default_factory=list, repr=False)
    record_rows: list[tuple] = field(default_factory=list, repr=False)
    event_rows: list[tuple] = field(default_factory=list, repr=False)
    #: per row, the dict keys of a narrower row (None = every key of the layout)
    record_keys: list = field(default_factory=list, repr=False)
    event_keys: list = field(default_factory=list, repr=False)

    @property
    def calls(self) -> list[dict]:
        """Model-call rows as dicts (``CALL_KEYS``)."""
        return _as_dicts(self.call_rows, CALL_KEYS, None)

    @property
    def records(self) -> list[dict]:
        """Run records as dicts (``RECORD_KEYS``, or ``ROOT_RECORD_KEYS`` for a foreign root)."""
        return _as_dicts(self.record_rows, RECORD_KEYS, self.record_keys)

    @property
    def events(self) -> list[dict]:
        """Budget events as dicts (``EVENT_KEYS``, or ``TOOL_EVENT_KEYS`` for a tool span)."""
        return _as_dicts(self.event_rows, EVENT_KEYS, self.event_keys)

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
