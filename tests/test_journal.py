"""The write-ahead journal: records survive reopening, a torn tail is ignored, loaded batches go."""

from __future__ import annotations

import pyarrow as pa
import pytest

from budgetlens.ingest.journal import Journal, JournalError, decode_batch, encode_batch
from budgetlens.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS
from budgetlens.store.writer import rows_to_table


def _payload(run: str) -> bytes:
    calls = rows_to_table(
        "model_calls",
        MODEL_CALL_COLUMNS,
        [
            {
                "span_id": f"{run}.c1",
                "run_id": run,
                "source": "t",
                "usage_status": "reported",
                "input_tokens": 5,
            }
        ],
    )
    records = rows_to_table("run_records", RUN_RECORD_COLUMNS, [{"run_id": run, "source": "t"}])
    events = rows_to_table("budget_events", BUDGET_EVENT_COLUMNS, [])
    return encode_batch(calls, records, events)


def test_batches_round_trip_through_a_reopened_journal(tmp_path):
    journal = Journal(tmp_path / "j")
    seqs = [journal.append(_payload(f"r{i}")) for i in range(3)]
    journal.sync()
    journal.close()
    batches = list(Journal(tmp_path / "j").unloaded())
    assert [b.seq for b in batches] == seqs == [1, 2, 3]
    assert [b.calls["run_id"].to_pylist() for b in batches] == [["r0"], ["r1"], ["r2"]]
    assert batches[0].calls["input_tokens"].to_pylist() == [5] and batches[0].spans == 2


def test_a_torn_last_record_is_ignored_and_later_appends_survive(tmp_path):
    journal = Journal(tmp_path / "j")
    journal.append(_payload("r0"))
    journal.append(_payload("r1"))
    journal.close()
    (segment,) = (tmp_path / "j").glob("*.seg")
    segment.write_bytes(segment.read_bytes()[:-7])  # a crash in the middle of the second append
    reopened = Journal(tmp_path / "j")
    assert [b.calls["run_id"].to_pylist() for b in reopened.unloaded()] == [["r0"]]
    reopened.append(_payload("r2"))
    reopened.close()
    assert [b.calls["run_id"].to_pylist() for b in Journal(tmp_path / "j").unloaded()] == [["r0"], ["r2"]]


def test_a_corrupt_record_fails_its_crc_and_is_ignored(tmp_path):
    journal = Journal(tmp_path / "j")
    journal.append(_payload("r0"))
    journal.close()
    (segment,) = (tmp_path / "j").glob("*.seg")
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert list(Journal(tmp_path / "j").unloaded()) == []


def test_marking_batches_loaded_skips_them_at_replay_and_deletes_old_segments(tmp_path):
    journal = Journal(tmp_path / "j", segment_bytes=1)  # every record starts a new segment
    for i in range(4):
        journal.append(_payload(f"r{i}"))
    journal.sync()
    journal.mark_loaded(3)
    assert len(list((tmp_path / "j").glob("*.seg"))) == 1  # only the one still written
    journal.close()
    assert [b.seq for b in Journal(tmp_path / "j").unloaded()] == [4]


def test_decoding_an_empty_batch_keeps_the_table_schemas():
    empty = [pa.table({"span_id": pa.array([], pa.string())})] * 3
    batch = decode_batch(7, encode_batch(*empty))
    assert batch.seq == 7 and batch.calls.schema == empty[0].schema and batch.spans == 1


def test_stray_files_in_the_journal_directory_are_ignored(tmp_path):
    journal = Journal(tmp_path / "j")
    journal.append(_payload("r0"))
    journal.close()
    (tmp_path / "j" / "junk.seg").write_text("hello")
    (tmp_path / "j" / "9999999999999999.seg").mkdir()
    (tmp_path / "j" / "notes.txt").write_text("x")
    assert [b.calls["run_id"].to_pylist() for b in Journal(tmp_path / "j").unloaded()] == [["r0"]]


def test_a_file_in_place_of_the_journal_directory_is_a_clear_error(tmp_path):
    (tmp_path / "j").write_text("not a directory")
    with pytest.raises(JournalError, match="is not a directory"):
        Journal(tmp_path / "j")


def test_a_second_journal_on_the_same_directory_is_refused_until_the_first_closes(tmp_path):
    first = Journal(tmp_path / "j")
    with pytest.raises(JournalError, match="in use by another process"):
        Journal(tmp_path / "j")
    first.close()
    Journal(tmp_path / "j").close()


# --- fault injection: a crash tears the segment being written ---------------------------------


def _tiny(name: str) -> bytes:
    """A small decodable record payload whose only value names it."""
    table = pa.table({"name": [name]})
    return encode_batch(table, table.slice(0, 0), table.slice(0, 0))


def _names(directory) -> list[str]:
    journal = Journal(directory)
    try:
        return [batch.calls["name"][0].as_py() for batch in journal.unloaded()]
    finally:
        journal.close()


def _record_bounds(segment) -> list[tuple[int, int]]:
    """(start, end) byte offsets of each record of ``segment`` (header + payload)."""
    import struct

    data, bounds, offset = segment.read_bytes(), [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        bounds.append((offset, offset + 16 + length))
        offset += 16 + length
    return bounds


def _tear_cut_points(segment) -> list[int]:
    """Every byte offset inside (and at each boundary of) the first and the last record."""
    bounds = _record_bounds(segment)
    (first_start, first_end), (last_start, last_end) = bounds[0], bounds[-1]
    cuts = set(range(first_start, first_end + 1)) | set(range(last_start, last_end))
    cuts |= {start for start, _ in bounds}
    return sorted(cuts)


@pytest.mark.system  # crash test: tears every byte
def test_a_torn_segment_is_sealed_so_records_acknowledged_after_it_survive_the_next_crash(tmp_path):
    """Issue 14, finding 1: tear the segment being written at every record boundary and every
    byte of its first and last record; restart, acknowledge new records, crash again in the
    middle of one more append, restart: every acknowledged record replays (0 lost)."""
    import shutil

    base = tmp_path / "base"
    journal = Journal(base, segment_bytes=1)  # a new segment after every record...
    journal.append(_tiny("old-0"))
    journal.sync()
    journal.close()
    journal = Journal(base, segment_bytes=10**6)  # ...then a last segment of three records
    for i in (1, 2, 3):
        journal.append(_tiny(f"old-{i}"))
    journal.sync()
    journal.close()
    last = sorted(base.glob("*.seg"))[-1]
    bounds = _record_bounds(last)
    assert len(bounds) == 3
    lost_total = 0
    for cut in _tear_cut_points(last):
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        torn = work / last.name
        torn.write_bytes(torn.read_bytes()[:cut])  # crash 1 tears the tail at ``cut``
        survivors = ["old-0"] + [f"old-{i + 1}" for i, (_, end) in enumerate(bounds) if end <= cut]
        restarted = Journal(work)
        acknowledged = [f"new-{cut}-{i}" for i in range(2)]
        for name in acknowledged:
            restarted.append(_tiny(name))
        restarted.sync()  # acknowledged from here on
        restarted.append(_tiny("unacknowledged"))
        restarted._file.flush()
        newest = restarted._current
        restarted.close()
        newest.write_bytes(newest.read_bytes()[:-3])  # crash 2 tears the unacknowledged append
        replayed = _names(work)
        lost = [name for name in survivors + acknowledged if name not in replayed]
        lost_total += len(lost)
        assert not lost, f"cut at byte {cut}: lost {lost}"
        assert "unacknowledged" not in replayed
    assert lost_total == 0
