"""Every file the collector (and so ``budgetlens demo``) writes beside the store is covered by
``.gitignore`` (new-user finding 4): a ``git add -A`` while the demo runs commits no token."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from budgetlens.ingest.ledger_api import ledger_path
from budgetlens.ingest.queue import journal_dir
from budgetlens.store.readers import sidecar_paths

ROOT = Path(__file__).resolve().parents[1]


def _store_files(db: Path) -> list[Path]:
    ledger = ledger_path(db)
    return [
        db,
        db.with_name(db.name + ".wal"),
        journal_dir(db) / "00000001.batch",
        *sidecar_paths(db),
        ledger,
        ledger.with_name(ledger.name + "-wal"),
        ledger.with_name(ledger.name + "-shm"),
    ]


@pytest.mark.system
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gitignore_covers_every_file_the_collector_writes_beside_the_store():
    files = [p.relative_to(ROOT).as_posix() for p in _store_files(ROOT / "budgetlens.duckdb")]
    assert any(name.endswith(".collector.token") for name in files)
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-v", *files], cwd=ROOT, capture_output=True, text=True
    )
    ignored = {line.split("\t", 1)[1] for line in result.stdout.splitlines()}
    assert ignored == set(files), set(files) - ignored


def test_demo_removes_the_sidecars_of_a_collector_it_had_to_kill(tmp_path):
    from budgetlens.cli.demo import _remove_sidecars
    from budgetlens.store.readers import publish

    db = tmp_path / "budgetlens.duckdb"
    db.write_bytes(b"store")
    publish(db, "http://127.0.0.1:1", "secret-token")
    assert all(p.exists() for p in sidecar_paths(db))

    class Killed:
        returncode = -9

    _remove_sidecars(db, Killed())
    assert not any(p.exists() for p in sidecar_paths(db))
    assert db.exists()  # the store stays


def test_demo_leaves_the_sidecars_of_a_collector_that_stopped_cleanly_alone(tmp_path):
    from budgetlens.cli.demo import _remove_sidecars

    db = tmp_path / "budgetlens.duckdb"
    info, token = sidecar_paths(db)
    info.write_text("{}")  # a clean collector already removed its own; nothing else is touched

    class Clean:
        returncode = 0

    _remove_sidecars(db, Clean())
    assert info.exists()
