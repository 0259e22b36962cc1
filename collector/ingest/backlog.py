"""What intake and the loader share: the journaled batches not yet loaded (``Backlog``).

``Backlog`` holds the journaled batches waiting for the loader (``budgetlens.ingest.loader``),
their rows and journal bytes and the store's last error, all guarded by one
``threading.Condition``; intake (``budgetlens.ingest.queue.IngestQueue``) adds to it, the loader
takes groups from it. Memory is bounded by rows: past ``Backlog.memory_rows`` rows held in
memory, a batch keeps only its sequence number and is read back from the journal when its turn
comes.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from budgetlens.ingest.journal import Batch


@dataclass
class Pending:
    """One journaled batch waiting for the loader.

    ``rows``: store rows in it; ``nbytes``: its record's size in the journal (bytes);
    ``journaled_at``: ``time.monotonic()`` when it became durable; ``batch``: the rows, or None
    when dropped from memory (read back from the journal by ``seq``).
    """

    seq: int
    rows: int
    nbytes: int
    journaled_at: float
    batch: Batch | None


class Backlog:
    """Rows acknowledged (or being journaled) and not yet loaded, shared by intake and loader.

    Every field is guarded by ``cond``. ``waiting``: journaled batches in sequence order;
    ``loading``: the group the loader is committing (or retrying); ``rows``: rows accepted and
    not yet loaded, including those still being journaled; ``bytes``: journal bytes of
    ``waiting`` + ``loading``; ``memory_rows``: at most this many waiting rows are held in
    memory (the rest are read back from the journal); ``store_error``: why the last load
    failed, or None; ``closing``: intake has stopped.
    """

    def __init__(self, memory_rows: int):
        self.cond = threading.Condition()
        self.waiting: deque[Pending] = deque()
        self.loading: list[Pending] = []
        self.rows = 0
        self.bytes = 0
        self.memory_rows = memory_rows
        self.held_rows = 0
        self.store_error: BaseException | None = None
        self.closing = False

    def add(self, pending: Pending) -> None:
        """Queue a journaled batch for the loader; drop its rows from memory when
        ``memory_rows`` are already held. Caller holds ``cond``."""
        if pending.batch is not None and self.waiting and self.held_rows + pending.rows > self.memory_rows:
            pending.batch = None
        if pending.batch is not None:
            self.held_rows += pending.rows
        self.waiting.append(pending)
        self.bytes += pending.nbytes

    def take(self, max_rows: int) -> list[Pending]:
        """Move waiting batches up to ``max_rows`` rows (at least one) to ``loading``. Caller
        holds ``cond``."""
        size = 0
        while self.waiting and (not self.loading or size + self.waiting[0].rows <= max_rows):
            pending = self.waiting.popleft()
            if pending.batch is not None:
                self.held_rows -= pending.rows
            self.loading.append(pending)
            size += pending.rows
        return list(self.loading)

    def put_back(self) -> None:
        """A load failed: its group goes back to the front of ``waiting``. Caller holds ``cond``."""
        for pending in reversed(self.loading):
            if pending.batch is not None:
                self.held_rows += pending.rows
            self.waiting.appendleft(pending)
        self.loading = []

    def done(self) -> None:
        """The group in ``loading`` is committed. Caller holds ``cond``."""
        self.rows -= sum(pending.rows for pending in self.loading)
        self.bytes -= sum(pending.nbytes for pending in self.loading)
        self.loading = []

    def oldest(self) -> float | None:
        """``journaled_at`` of the oldest batch not yet loaded, or None. Caller holds ``cond``."""
        if self.loading:
            return self.loading[0].journaled_at
        return self.waiting[0].journaled_at if self.waiting else None

    def waiting_rows(self) -> int:
        """Rows in ``waiting``. Caller holds ``cond``."""
        return sum(pending.rows for pending in self.waiting)
