"""Price and preset paths: regular files only (a FIFO is refused at once, never waited on), and
model names in a price file that differ only by case are refused."""

from __future__ import annotations

import json
import os
import threading

import pytest

from budgetlens.guard.preset_file import read_preset_document
from budgetlens.price_file import load_price_file


@pytest.mark.parametrize("reader", [load_price_file, read_preset_document])
def test_a_fifo_as_a_price_or_preset_file_is_refused_not_hung_on(tmp_path, reader):
    fifo = tmp_path / "prices.yaml"
    os.mkfifo(fifo)
    outcome: list = []

    def read():
        try:
            reader(fifo)
        except ValueError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # unblock the reader so the test process can end
        with open(fifo, "wb"):
            pass
    assert outcome and "must be a regular file" in outcome[0] and str(fifo) in outcome[0]


def test_a_directory_as_a_price_file_is_refused(tmp_path):
    folder = tmp_path / "prices.json"
    folder.mkdir()
    with pytest.raises(ValueError, match="regular file"):
        load_price_file(folder)


def test_model_names_differing_only_by_case_are_refused(tmp_path):
    entry = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"m1": entry, "M1": {**entry, "input_usd_per_mtok": 9.0}}}))
    with pytest.raises(ValueError, match=r"'m1' and 'M1' differ only by case"):
        load_price_file(path)
    path.write_text(json.dumps({"models": {"m1": entry, "m2": entry}}))
    assert set(load_price_file(path)) == {"m1", "m2"}
