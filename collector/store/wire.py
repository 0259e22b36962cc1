"""The read endpoint's wire format, shared by the collector and its readers: query
parameters as JSON values (datetimes and dates tagged), results as an Arrow IPC stream."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def encode_params(params: Any) -> Any:
    """``params`` (a list or dict of query parameters) as JSON values: datetimes and dates
    tagged (see the module docstring), lists and dicts element by element."""
    if isinstance(params, dt.datetime):
        return {"$datetime": params.isoformat()}
    if isinstance(params, dt.date):
        return {"$date": params.isoformat()}
    if isinstance(params, dict):
        return {str(k): encode_params(v) for k, v in params.items()}
    if isinstance(params, (list, tuple)):
        return [encode_params(v) for v in params]
    return params


def decode_params(value: Any) -> Any:
    """The inverse of ``encode_params``. Raises ValueError naming a malformed tagged value."""
    if isinstance(value, dict):
        if len(value) == 1 and "$datetime" in value:
            return dt.datetime.fromisoformat(value["$datetime"])
        if len(value) == 1 and "$date" in value:
            return dt.date.fromisoformat(value["$date"])
        return {k: decode_params(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_params(v) for v in value]
    return value


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream (bytes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
