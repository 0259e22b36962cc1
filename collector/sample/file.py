"""The portable sample file: gzip JSONL of store rows, written from the seeded generator
(``budgetlens.sample.generator``) and loaded into a store; the committed ``SAMPLE_FILE`` is what
``budgetlens demo`` loads into an empty store.

Format (``SAMPLE_FORMAT`` 1): line 1 is a header ``{"budgetlens_sample": 1, "seed", "days",
"end_utc", "runs_per_day"}``; then one line per run ``{"record": {...}, "calls": [...],
"events": [...]}`` with store column names (``budgetlens.store.schema``), ISO-8601 UTC
timestamps, NULLs omitted, and the run's shared fields (run_id, trace_id, source, service_name,
task_type) omitted from its calls and events.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import logging
import os
import zlib
from pathlib import Path

from budgetlens.sample.generator import (
    SAMPLE_END_UTC,
    SAMPLE_SEED,
    default_end_utc,
    generate_sample,
)

log = logging.getLogger(__name__)

#: The committed sample: ``sample_data/`` at the repository root (absent from a wheel install).
SAMPLE_FILE = Path(__file__).resolve().parents[2] / "sample_data" / "budgetlens_sample.jsonl.gz"
SAMPLE_FORMAT = 1
#: Fields every call of a run shares with its run record (omitted per call in the file).
_SHARED_CALL_FIELDS = ("run_id", "trace_id", "source", "service_name", "task_type")


def _encode(row: dict, skip: tuple[str, ...] = ()) -> dict:
    out = {}
    for key, value in row.items():
        if value is None or key in skip:
            continue
        out[key] = value.isoformat() if isinstance(value, dt.datetime) else value
    return out


def _decode(row: dict, shift: dt.timedelta = dt.timedelta(0)) -> dict:
    return {k: dt.datetime.fromisoformat(v) + shift if k.endswith("_utc") else v for k, v in row.items()}


def demo_end_utc() -> dt.datetime:
    """Where ``budgetlens demo`` makes the sample end: now (naive UTC), to the minute."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, second=0, microsecond=0)


def export_sample_jsonl(
    path,
    days: int = 14,
    seed: int = SAMPLE_SEED,
    runs_per_day: int = 300,
    end_utc: dt.datetime | None = SAMPLE_END_UTC,
) -> int:
    """Write a sample from ``budgetlens.sample.generator.generate_sample`` as gzip JSONL (format in the
    module docstring) to ``path``; return the number of runs. The same arguments (and prices)
    give the same bytes. ``end_utc`` None means today 00:00 UTC."""
    end = end_utc or default_end_utc()
    header = {
        "budgetlens_sample": SAMPLE_FORMAT,
        "seed": seed,
        "days": days,
        "end_utc": end.isoformat(),
        "runs_per_day": runs_per_day,
    }
    runs = 0
    # mtime=0 and no file name in the gzip header: the same arguments give the same bytes.
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0) as packed,
        io.TextIOWrapper(packed, encoding="utf-8", newline="\n") as out,
    ):
        out.write(json.dumps(header, separators=(",", ":")) + "\n")
        for calls, records, events in generate_sample(days, seed, runs_per_day, end):
            by_run: dict[str, dict] = {r["run_id"]: {"calls": [], "events": []} for r in records}
            for call in calls:
                by_run[call["run_id"]]["calls"].append(_encode(call, _SHARED_CALL_FIELDS))
            for event in events:
                by_run[event["run_id"]]["events"].append(_encode(event, ("run_id",)))
            for record in records:
                line = {"record": _encode(record), **by_run[record["run_id"]]}
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
                runs += 1
    return runs


def read_sample_file(path=SAMPLE_FILE, batch_runs: int = 1000, end_utc: dt.datetime | None = None):
    """Yield (calls, records, events) batches of store rows from a portable sample file.

    ``end_utc`` (naive UTC) moves every timestamp (``*_utc``) by the same amount so the sample
    ends there instead of at the header's ``end_utc``; None keeps the file's times. Only times
    move: ids, usage and costs stay as the seed made them.

    Raises ValueError naming the file (and the line, where one is to blame) when the file is
    not gzip, is truncated or corrupt, is not UTF-8, or is not a budgetlens sample; OSError
    (FileNotFoundError, IsADirectoryError, PermissionError) when it cannot be read.
    """
    try:
        yield from _read_sample_lines(path, batch_runs, end_utc)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(
            f"{path}: not a gzip-compressed budgetlens sample file (gzip JSONL expected: {error})"
        ) from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a budgetlens sample file (not UTF-8 text: {error.reason})") from None


def _read_sample_lines(path, batch_runs: int, end_utc: dt.datetime | None):
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        try:
            header = json.loads(next(lines, "{}"))
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("budgetlens_sample") != SAMPLE_FORMAT:
            raise ValueError(
                f"{path}: line 1 is not a budgetlens sample header (budgetlens_sample: {SAMPLE_FORMAT})"
            )
        try:
            shift = end_utc - dt.datetime.fromisoformat(header["end_utc"]) if end_utc else dt.timedelta(0)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: line 1: the header's end_utc is not an ISO-8601 time") from None
        calls, records, events = [], [], []
        for number, text in enumerate(lines, start=2):
            try:
                item = json.loads(text)
                record = _decode(item["record"], shift)
                shared = {k: record.get(k) for k in _SHARED_CALL_FIELDS}
                run_calls = [{**shared, **_decode(c, shift)} for c in item.get("calls", ())]
                run_events = [
                    {"run_id": record["run_id"], **_decode(e, shift)} for e in item.get("events", ())
                ]
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise ValueError(f"{path}: line {number}: not a sample run ({error})") from None
            records.append(record)
            calls += run_calls
            events += run_events
            if len(records) >= batch_runs:
                yield calls, records, events
                calls, records, events = [], [], []
        if records:
            yield calls, records, events


def load_sample_file(path=SAMPLE_FILE, db_path=None, end_utc: dt.datetime | None = None) -> tuple[int, int]:
    """Load a portable sample file into the store at ``db_path``; ``end_utc`` (naive UTC) shifts
    its times to end there (``read_sample_file``), None keeps the file's own.

    Returns ``(runs read, runs new to the store)``: loading the same file twice adds nothing the
    second time (the store is idempotent), and the second figure says so."""
    from budgetlens.config import resolve_db_path
    from budgetlens.store import write_batch, write_connection

    db = resolve_db_path(db_path)
    runs = new_runs = 0
    for calls, records, events in read_sample_file(path, end_utc=end_utc):
        with write_connection(db) as conn:
            new_runs += write_batch(conn, calls, records, events).records
        runs += len(records)
    log.info("loaded %d sample runs (%d new) from %s into %s", runs, new_runs, path, db)
    return runs, new_runs


def ensure_demo_store(db_path, end_utc: dt.datetime | None = None) -> bool:
    """Load the committed sample into ``db_path`` when the store is missing or has no runs,
    shifted to end at ``end_utc`` (naive UTC; default ``demo_end_utc()``, now): the demo opens on
    14 days that end now, the same runs from the same seed whenever it is built.

    Returns True when it loaded the sample, False when the store already had runs. Where
    ``SAMPLE_FILE`` is not on disk (a wheel install has no ``sample_data/``), the same sample is
    generated from its seed and shifted the same way.
    """
    from budgetlens.store import StoreMissing, read_connection, schema_version

    try:
        with read_connection(db_path) as conn:
            row = conn.execute("SELECT count(*) FROM runs").fetchone() if schema_version(conn) > 0 else None
            has_runs = row is not None and row[0] > 0
    except StoreMissing:
        has_runs = False
    if has_runs:
        return False
    end = end_utc or demo_end_utc()
    if not os.path.exists(SAMPLE_FILE):
        log.warning("%s not found; generating the sample from seed %d", SAMPLE_FILE, SAMPLE_SEED)
        _write_shifted_sample(db_path, end)
        return True
    load_sample_file(SAMPLE_FILE, db_path, end_utc=end)
    return True


def _write_shifted_sample(db_path, end_utc: dt.datetime) -> None:
    """The committed sample's runs from its seed (same ids as the file), times moved to end at
    ``end_utc``."""
    from budgetlens.store import write_batch, write_connection

    shift = end_utc - SAMPLE_END_UTC
    for calls, records, events in generate_sample(14, SAMPLE_SEED, 300, SAMPLE_END_UTC):
        moved = [[_moved(row, shift) for row in rows] for rows in (calls, records, events)]
        with write_connection(db_path) as conn:
            write_batch(conn, *moved)


def _moved(row: dict, shift: dt.timedelta) -> dict:
    return {k: v + shift if k.endswith("_utc") and isinstance(v, dt.datetime) else v for k, v in row.items()}
