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
