"""The collector's write-ahead journal: acknowledged batches survive a crash before DuckDB has them.

Layout: a directory next to the database (``<db>.journal/``) holding append-only segment files
``<first seq, 16 digits>.seg`` and a marker file ``loaded`` (the highest sequence number already
committed to DuckDB, written atomically by rename).

A record is ``header + payload``; header = payload length (uint32, little-endian), CRC-32 of
sequence number + payload (uint32), sequence number (uint64). The payload is a batch of store rows:
three Arrow IPC streams (model_calls, run_records, budget_events), each preceded by its length
(uint32). ``append`` writes records and ``sync`` fsyncs the segment: the collector acknowledges a
request only after the ``sync`` that covers its record (one fsync per group of concurrent
requests). A crash in the middle of an append leaves a torn last record; reading stops at the
first record whose length runs past the end of the file or whose CRC does not match (such a
record was never acknowledged). Segments found at open are sealed: nothing is ever appended to
them, the first append of this process creates a new segment named past every existing one, so
no acknowledged record can follow a torn one.

One process at a time: the journal holds an exclusive ``flock`` on ``<dir>/lock`` while open;
a second collector on the same database fails with ``JournalError``. Files in the directory
that are not ``<16 digits>.seg`` segments, ``loaded``, ``lock`` or ``dead-letter.jsonl`` are
ignored with a warning.

Not thread-safe on its own: one writer thread appends and syncs; ``mark_loaded`` may be called
from another thread (it takes the journal's lock).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IIQ")
_LENGTHS = struct.Struct("<III")
_SEQ = struct.Struct("<Q")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_MAX_RECORD_BYTES = 1 << 31
_SEGMENT_NAME = re.compile(r"^[0-9]{16}\.seg$")
_KNOWN_FILES = {"loaded", "loaded.tmp", "lock", "dead-letter.jsonl"}


class JournalError(RuntimeError):
    """The journal directory cannot be used: not a directory, or locked by another process."""


@dataclass
class Batch:
    """One journaled batch: its sequence number and rows as pyarrow tables (store columns)."""

    seq: int
    calls: pa.Table
    records: pa.Table
    events: pa.Table

    @property
    def spans(self) -> int:
        """Rows in the batch (calls + records + events), at least 1."""
        return max(1, len(self.calls) + len(self.records) + len(self.events))


@dataclass
class Encoded:
    """A batch already encoded as a record payload (``encode_batch``) and its row count."""

    payload: bytes
    rows: int


def encode_batch(calls: pa.Table, records: pa.Table, events: pa.Table) -> bytes:
    """The payload of a record: three length-prefixed Arrow IPC streams."""
    parts = []
    for table in (calls, records, events):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        parts.append(sink.getvalue())
    return _LENGTHS.pack(*(part.size for part in parts)) + b"".join(p.to_pybytes() for p in parts)


def decode_batch(seq: int, payload: bytes) -> Batch:
    """Inverse of ``encode_batch``. Raises ValueError when the payload is not three IPC streams."""
    sizes = _LENGTHS.unpack_from(payload)
    offset, tables = _LENGTHS.size, []
    buffer = pa.py_buffer(payload)
    for size in sizes:
        if offset + size > len(payload):
            raise ValueError(f"journal record {seq}: payload shorter than its table lengths")
        tables.append(pa.ipc.open_stream(buffer.slice(offset, size)).read_all())
        offset += size
    return Batch(seq, *tables)


def _read_segment(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(seq, payload, offset of the record) of every intact record of a segment, stopping at a
    torn or corrupt one."""
    data = path.read_bytes()
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, crc, seq = _HEADER.unpack_from(data, offset)
        start, end = offset + _HEADER.size, offset + _HEADER.size + length
        if end > len(data):
            log.warning("%s: torn record at byte %d (never acknowledged); ignored", path, offset)
            return
        payload = data[start:end]
        if zlib.crc32(payload, zlib.crc32(_SEQ.pack(seq))) != crc:
            log.warning("%s: record at byte %d fails its CRC (never acknowledged); ignored", path, offset)
            return
        yield seq, payload, offset
        offset = end
    if offset != len(data):
        log.warning("%s: %d trailing bytes of a torn header ignored", path, len(data) - offset)


class Journal:
    """Append-only journal in ``directory`` (created if missing).

    ``segment_bytes``: a new segment starts once the current one is larger (bytes).
    Raises OSError when the directory cannot be created or written.
    """

    def __init__(self, directory: str | os.PathLike, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1 (got {segment_bytes})")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise JournalError(
                f"{self.directory} exists but is not a directory (the journal needs it; move the file away)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_exclusive(self.directory / "lock")
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._loaded = self._read_marker()
        self._segments: dict[Path, int] = {}  # segment -> last sequence number in it
        self._next_seq = self._loaded + 1
        self._where: dict[int, tuple[Path, int, int]] = {}  # seq -> (segment, offset, size)
        for path in self._segment_paths():
            last = 0
            for seq, payload, offset in _read_segment(path):
                last = seq
                if seq > self._loaded:
                    self._where[seq] = (path, offset, _HEADER.size + len(payload))
            self._segments[path] = max(last, int(path.stem) - 1)
            # every existing segment is sealed: the first append opens a new one whose name
            # (its first sequence number) is past every existing name, so nothing is ever
            # written after a torn record that replay would stop at
            self._next_seq = max(self._next_seq, last + 1, int(path.stem) + 1)
        self._file: BinaryIO | None = None
        self._current: Path | None = None
        self._size = 0

    @property
    def loaded_seq(self) -> int:
        """The highest sequence number committed to the store (0 when none)."""
        return self._loaded

    def _segment_paths(self) -> list[Path]:
        paths = []
        for path in self.directory.iterdir():
            if _SEGMENT_NAME.match(path.name) and path.is_file():
                paths.append(path)
            elif path.name not in _KNOWN_FILES:
                log.warning("%s: not a journal file; ignored", path)
        return sorted(paths)

    def _read_marker(self) -> int:
        try:
            return int((self.directory / "loaded").read_text().strip() or 0)
        except FileNotFoundError:
            return 0
        except ValueError:
            log.warning("%s/loaded is unreadable; replaying the whole journal", self.directory)
            return 0

    def unloaded(self) -> Iterator[Batch]:
        """Every intact journaled batch not yet marked loaded, in sequence order (replay)."""
        for path in self._segment_paths():
            for seq, payload, _ in _read_segment(path):
                if seq > self._loaded:
                    try:
                        batch = decode_batch(seq, payload)
                    except (ValueError, struct.error, pa.ArrowException) as error:
                        log.error(
                            "%s: record %d passes its CRC but cannot be decoded; skipped: %s",
                            path,
                            seq,
                            error,
                        )
                        continue
                    yield batch

    def append(self, payload: bytes) -> int:
        """Write one record (not yet durable: call ``sync``); return its sequence number."""
        if len(payload) >= _MAX_RECORD_BYTES:
            raise ValueError(f"journal record of {len(payload)} bytes is too large")
        with self._lock:
            if self._file is None or self._size > self.segment_bytes:
                self._rotate()
            assert self._file is not None and self._current is not None
            seq = self._next_seq
            self._next_seq += 1
            crc = zlib.crc32(payload, zlib.crc32(_SEQ.pack(seq)))
            self._file.write(_HEADER.pack(len(payload), crc, seq))
            self._file.write(payload)
            self._where[seq] = (self._current, self._size, _HEADER.size + len(payload))
            self._size += _HEADER.size + len(payload)
            self._segments[self._current] = seq
            return seq

    def record_bytes(self, seq: int) -> int:
        """Size on disk of record ``seq`` (header + payload, bytes); 0 when unknown or loaded."""
        where = self._where.get(seq)
        return where[2] if where else 0

    def read(self, seq: int) -> Batch:
        """Record ``seq`` read back from its segment (the loader's copy was dropped to bound
        memory). Call ``sync`` first for a record of the current segment. Raises KeyError when
        ``seq`` is not an unloaded record of this journal, ValueError when it no longer reads
        back intact."""
        with self._lock:
            path, offset, size = self._where[seq]
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read(size)
        if len(data) < _HEADER.size:
            raise ValueError(f"journal record {seq}: {path} is shorter than its index says")
        length, crc, stored_seq = _HEADER.unpack_from(data)
        payload = data[_HEADER.size : _HEADER.size + length]
        if stored_seq != seq or zlib.crc32(payload, zlib.crc32(_SEQ.pack(seq))) != crc:
            raise ValueError(f"journal record {seq} in {path} fails its CRC")
        return decode_batch(seq, payload)

    def sync(self) -> None:
        """Flush and fsync the current segment: every appended record is now durable."""
        with self._lock:
            file = self._file
            if file is None:
                return
            file.flush()
        os.fsync(file.fileno())

    def _rotate(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.flush()
            os.fsync(file.fileno())
            file.close()
        current = self.directory / f"{self._next_seq:016d}.seg"
        while current.exists():  # never append to an existing segment (it may end torn)
            self._next_seq += 1
            current = self.directory / f"{self._next_seq:016d}.seg"
        self._current = current
        self._file = open(current, "xb", buffering=1024 * 1024)
        self._size = 0
        self._segments[self._current] = self._next_seq - 1
        _fsync_dir(self.directory)

    def abandon_segment(self) -> None:
        """After a failed ``append``/``sync`` (disk full, I/O error): drop the current segment's
        unsynced tail and close it, so the next append starts a new segment and no later record
        follows a torn one (replay stops at a torn record within a segment). Never raises."""
        with self._lock:
            file, self._file = self._file, None
            if file is None:
                return
            try:
                file.close()  # may try to flush the buffer once more; what lands is unacked
            except OSError as error:
                log.warning("closing journal segment %s after an error: %s", self._current, error)
            self._next_seq += 1  # a fresh segment name even if nothing was written
            self._drop_if_empty(self._current)

    def _drop_if_empty(self, path: Path | None) -> None:
        """Delete an abandoned segment that holds no byte (its first append failed: nothing in it
        was acknowledged), so a full disk does not leave one empty file per refused batch."""
        try:
            if path is None or path.stat().st_size:
                return
            path.unlink()
        except OSError:
            return  # gone already, or the directory is unwritable: replay skips it either way
        self._segments.pop(path, None)
        for seq in [seq for seq, where in self._where.items() if where[0] == path]:
            del self._where[seq]

    def mark_loaded(self, seq: int) -> None:
        """Record that every batch up to ``seq`` is committed to the store; delete the segments
        that hold nothing newer (never the one being written)."""
        with self._lock:
            if seq <= self._loaded:
                return
            self._loaded = seq
            marker, temp = self.directory / "loaded", self.directory / "loaded.tmp"
            temp.write_text(str(seq))
            os.replace(temp, marker)
            while self._where:  # in sequence order: appended (and scanned) in that order
                first = next(iter(self._where))
                if first > seq:
                    break
                del self._where[first]
            done = [path for path, last in self._segments.items() if last <= seq and path != self._current]
            for path in done:
                del self._segments[path]
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """fsync and close the current segment, release the lock (idempotent)."""
        with self._lock:
            if self._file is not None:
                file, self._file = self._file, None
                try:
                    file.flush()
                    os.fsync(file.fileno())
                finally:
                    file.close()
            if self._lock_file is not None:
                self._lock_file.close()  # closing the descriptor releases the flock
                self._lock_file = None


def _lock_exclusive(path: Path):
    """Open ``path`` and take an exclusive non-blocking flock; raise JournalError when another
    process holds it."""
    file = open(path, "a+b")
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.close()
        raise JournalError(
            f"{path.parent} is in use by another process (is a second "
            "collector running on the same database?)"
        ) from None
    return file


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
