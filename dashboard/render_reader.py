"""One reader of the store shared by the loaders of one page render (issue 25): opened at the
render's first cache miss, closed when the render ends (``budgetlens.dashboard.data``'s
``begin_run`` / ``end_run`` and ``render_reader``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class RenderReader:
    """One reader of the store (``budgetlens.store.connect``: through the running collector's
    ``/v1/store/query``, else the file read-only) shared by every loader of one page render:
    opened at the render's first cache miss (a render whose loaders all hit the cache opens
    none), closed by ``close`` (``end_run``). ``opened`` counts the readers opened."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._conn: Any = None
        self._path: str | None = None
        self.opened = 0

    def get(self, path: str, open_reader: Callable[[str], contextlib.AbstractContextManager[Any]]) -> Any:
        """The shared reader of ``path`` (opened now with ``open_reader(path)`` if none is open,
        or for another path). Raises what ``open_reader`` raises."""
        if self._conn is None or self._path != path:
            self.close()
            stack = contextlib.ExitStack()
            self._conn = stack.enter_context(open_reader(path))
            self._stack, self._path = stack, path
            self.opened += 1
        return self._conn

    def close(self) -> None:
        """Close the reader if one is open (idempotent; never raises)."""
        stack, self._stack, self._conn, self._path = self._stack, None, None, None
        if stack is not None:
            try:
                stack.close()
            except Exception:  # closing a reader must not break the page
                log.warning("closing the store reader failed", exc_info=True)
