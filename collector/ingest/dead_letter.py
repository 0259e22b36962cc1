"""Rows the store refuses for their data: load around them, keep them in a dead-letter file.

The mapping validates every value against the store's column ranges, so DuckDB refusing a
journaled batch for its *data* (a conversion or range error, a constraint, an overflow while
rolling up a run) should not happen; if it does, one bad row must not block the loader (and so
every client) forever. ``load_around_bad_rows`` retries the group batch by batch, a
refused batch table by table in halves down to single rows, writes each row the store still refuses to the dead-letter file
``<db>.journal/dead-letter.jsonl`` (one JSON object per line: ``table``, ``error``, ``row``;
fsynced) and counts it in ``budgetlens_spans_dead_lettered_total``. Errors that are not about
the data (a lock held by another process, I/O) propagate: the loader retries the whole group
later, and what was already written is skipped then (primary keys).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

log = logging.getLogger(__name__)

DEAD_LETTER_FILE = "dead-letter.jsonl"

#: Errors that say "this data cannot be stored" (as opposed to "the store is busy/broken").
DATA_ERRORS = (
    duckdb.DataError,
    duckdb.IntegrityError,
    duckdb.InvalidInputException,
    ValueError,
    TypeError,
    OverflowError,
    pa.ArrowException,
)

#: ``commit(calls, records, events)`` with pyarrow tables; returns a ``WriteResult`` or None.
Commit = Callable[[pa.Table, pa.Table, pa.Table], object]


def is_data_error(error: BaseException) -> bool:
    """True when ``error`` is about the rows themselves, not the store's availability."""
    return isinstance(error, DATA_ERRORS)


def load_around_bad_rows(
    batches, commit: Commit, dead_letter_path: Path, on_result: Callable[[object], None]
) -> int:
    """Commit each of ``batches`` (objects with ``calls``/``records``/``events`` pyarrow tables
    and ``seq``) alone; a batch refused for its data is committed row by row and the refused
    rows go to ``dead_letter_path``. ``on_result`` gets each commit's result (metrics) after
    that commit succeeded; what it raises propagates and never causes a commit to be re-run.

    Returns the number of rows dead-lettered. Raises what ``commit`` raises when it is not a
    data error (``is_data_error``), and OSError when the dead-letter file cannot be written.
    """
    dead = 0
    for batch in batches:
        tables = (batch.calls, batch.records, batch.events)
        try:
            result = commit(*tables)
        except Exception as error:
            if not is_data_error(error):
                raise
            log.error("journal batch %d refused by the store (%s); loading it row by row", batch.seq, error)
        else:  # outside the try: an error in ``on_result`` never re-runs a commit that succeeded
            on_result(result)
            continue
        for position, (name, table) in enumerate(
            zip(("model_calls", "run_records", "budget_events"), tables)
        ):
            dead += _bisect(tables, position, name, table, commit, dead_letter_path, on_result)
    return dead


def _bisect(tables, position: int, name: str, rows: pa.Table, commit: Commit, path: Path, on_result) -> int:
    """Commit ``rows`` (of table number ``position``; the other tables empty), halving on a
    data error down to single rows, which go to the dead-letter file. Returns rows
    dead-lettered (a bad row costs about 2 log2(n) commits)."""
    if not len(rows):
        return 0
    single = [t.slice(0, 0) for t in tables]
    single[position] = rows
    try:
        result = commit(*single)
    except Exception as error:
        if not is_data_error(error):
            raise
        if len(rows) == 1:
            _append(path, name, rows.to_pylist()[0], error)
            return 1
    else:
        on_result(result)
        return 0
    half = len(rows) // 2
    return _bisect(tables, position, name, rows.slice(0, half), commit, path, on_result) + _bisect(
        tables, position, name, rows.slice(half), commit, path, on_result
    )


def _append(path: Path, table: str, row: dict, error: BaseException) -> None:
    """Append one refused row to the dead-letter file and fsync it."""
    line = json.dumps(
        {"table": table, "error": f"{type(error).__name__}: {error}"[:500], "row": row},
        default=_plain,
        ensure_ascii=False,
    )
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())
    log.error("dead-lettered a %s row (run_id %r) to %s: %s", table, str(row.get("run_id"))[:80], path, error)


def _plain(value):
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)
