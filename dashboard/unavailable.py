"""Why the dashboard cannot read the store right now (``DataUnavailable``) and whether an error is
worth a retry (``is_busy``): the states ``budgetlens.dashboard.data`` falls back on or shows."""

from __future__ import annotations

import duckdb

from budgetlens.store import StoreError
from budgetlens.store.connection import is_lock_conflict
from budgetlens.store.readers import RemoteError

__all__ = ["DataUnavailable", "is_busy"]


class DataUnavailable(RuntimeError):
    """The store cannot be read right now and there is no earlier result to show.

    ``missing`` is True when no store file exists yet (nothing to retry until one appears);
    ``invalid`` is True when the path is not a budgetlens store at all (a file DuckDB cannot
    open, a directory, no permission): retrying cannot help, the message says why.
    """

    def __init__(self, message: str, *, missing: bool = False, invalid: bool = False):
        super().__init__(message)
        self.missing = missing
        self.invalid = invalid

    @property
    def state(self) -> str:
        """``"missing"``, ``"invalid"`` or ``"busy"`` (the value of ``UNAVAILABLE_KEY``)."""
        return "missing" if self.missing else "invalid" if self.invalid else "busy"


def is_busy(error: BaseException) -> bool:
    """True when ``error`` (a StoreError or DuckDB error) is a lock conflict with a writer, or
    an I/O hiccup while reading: worth a retry. False for a StoreError saying the file cannot
    be opened at all (not a DuckDB file, a directory, no permission, a newer schema)."""
    if isinstance(error, RemoteError):  # the collector did not answer, or cannot open the file
        return error.status in (0, 503)
    if isinstance(error, StoreError):
        cause = error.__cause__
        return cause is not None and is_lock_conflict(cause)
    return isinstance(error, (duckdb.IOException, duckdb.ConnectionException))
