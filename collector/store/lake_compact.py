"""DuckLake maintenance: fold what collectors staged, then compact and expire.

Above :mod:`budgetlens.store.lake` and :mod:`budgetlens.store.lake_ingest` (it calls both), so
neither of them imports the other's callers: the lake module stays a leaf below the writer.
"""

from __future__ import annotations

import duckdb

from budgetlens.store import lake_ingest
from budgetlens.store.lake import LAKE_ALIAS, retry_on_conflict

__all__ = ["compact"]


def compact(conn: duckdb.DuckDBPyConnection, *, expire_older_than_s: float = 3600.0) -> dict[str, int]:
    """Compact the lake: flush inlined rows to Parquet, merge small files, rewrite files with
    many deleted rows, expire snapshots older than ``expire_older_than_s`` seconds and delete
    the files no snapshot needs any more.

    First folds what collectors staged and deletes the staged rows every fold has read
    (``budgetlens.store.lake_ingest``). Returns counts: ``folds``, ``cleaned_staged_rows``,
    ``flushed_tables``, ``merged_files``, ``rewritten_files``, ``expired_snapshots``,
    ``deleted_files``. Each step retries while it loses a conflict with a concurrent writer.
    Raises ValueError for a negative age.
    """
    if expire_older_than_s < 0:
        raise ValueError(f"expire_older_than_s must be >= 0 (got {expire_older_than_s})")
    folds = lake_ingest.fold_all(conn)
    cleaned = retry_on_conflict(lambda: lake_ingest.clean_staged(conn), what="compact")

    def count(statement: str, params: list | None = None) -> int:
        def run() -> int:  # arrow: the TIMESTAMP WITH TIME ZONE columns need no pytz
            return conn.execute(statement, params or []).to_arrow_table().num_rows

        return retry_on_conflict(run, what="compact")

    older = "now() - to_microseconds(CAST(? * 1e6 AS BIGINT))"
    # merging first, then rewriting files whose rows are >= 10 % deleted (the rollup tables
    # replace a run's row on every commit that touches it)
    merge = f"SELECT * FROM ducklake_merge_adjacent_files('{LAKE_ALIAS}')"
    flushed = count(f"SELECT * FROM ducklake_flush_inlined_data('{LAKE_ALIAS}')")
    merged = count(merge)
    rewritten = count(f"SELECT * FROM ducklake_rewrite_data_files('{LAKE_ALIAS}', delete_threshold => 0.1)")
    return {
        "folds": folds,
        "cleaned_staged_rows": cleaned,
        "flushed_tables": flushed,
        "merged_files": merged + (count(merge) if rewritten else 0),
        "rewritten_files": rewritten,
        "expired_snapshots": count(
            f"SELECT * FROM ducklake_expire_snapshots('{LAKE_ALIAS}', older_than => {older})",
            [expire_older_than_s],
        ),
        "deleted_files": count(
            f"SELECT * FROM ducklake_cleanup_old_files('{LAKE_ALIAS}', older_than => {older})",
            [expire_older_than_s],
        ),
    }
