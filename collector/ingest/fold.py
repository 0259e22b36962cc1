"""When a collector on a DuckLake folds the staged rows into the store (``budgetlens.store.lake_ingest``).

A collector on a lake stages each load group (the journal then marks it loaded) and folds about
once every ``FOLD_INTERVAL_S`` while it has staged rows a fold may not have read yet, and every
``IDLE_FOLD_INTERVAL_S`` when idle (rows another collector staged before it died). Any fold
folds every collector's rows: before folding, a collector reads the watermarks (one small
query) and skips its fold when other collectors' folds have already read past the rows it
staged (``lake_ingest.is_folded``). A fold that loses to another one is not retried at once:
the next attempt waits twice as long (up to ``MAX_FOLD_BACKOFF_S``), each wait jittered by
±25 %, so N collectors make about one fold a second between them, not N.

Every ``CLEAN_INTERVAL_S`` the collector that just folded deletes the staged rows every fold
has read (``clean_staged``); that delete conflicts with stages committing at the same moment,
which retry it, so it is rare on purpose. Metrics are counted from each fold that committed.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import duckdb

from budgetlens.store import lake_ingest, write_connection
from budgetlens.store.lake import is_conflict
from budgetlens.store.writer import WriteResult

log = logging.getLogger(__name__)

#: Seconds between folds while this collector has staged rows (about one fold a second per lake).
FOLD_INTERVAL_S = 1.0
#: Seconds between folds of an idle collector (rows staged by a collector that stopped).
IDLE_FOLD_INTERVAL_S = 30.0
#: Longest wait after folds that lost to other collectors' folds (s).
MAX_FOLD_BACKOFF_S = 4.0
#: Seconds between deletions of the staged rows every fold has read.
CLEAN_INTERVAL_S = 60.0


def _jitter(seconds: float) -> float:
    return seconds * (0.75 + 0.5 * random.random())


class Folder:
    """Folds for one collector: ``location`` (a lake), ``observe(result)`` counts the metrics of
    a fold that committed. ``staged()`` after each stage; ``fold_if_due()`` from the loader
    thread (never raises); ``wait_s()`` says how long the loader may sleep before the next one.
    ``clock`` (``time.monotonic``) and ``connect`` (``write_connection``) may be injected (tests).
    """

    def __init__(
        self,
        location,
        observe: Callable[[WriteResult], None],
        *,
        interval_s: float = FOLD_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        connect: Callable = write_connection,
    ):
        self.location = location
        self.connect = connect
        self.observe = observe
        self.interval_s = interval_s
        self.clock = clock
        self.due = True  # at start: fold what a stopped collector left staged
        #: the bound of the rows this collector staged that a fold may not have read (None: unknown)
        self.pending: tuple[int, int, int] | None = None
        self.skipped = 0
        self.next_at = clock()
        self.backoff_s = interval_s
        self.last_clean = clock()
        self.folds = 0
        self.lost = 0
        self.error: BaseException | None = None

    def staged(self, bound: tuple[int, int, int] | None = None) -> None:
        """This collector staged rows; ``bound``: ``lake_ingest.staged_bound`` read right after
        (None: unknown). A fold is due, not before the current wait ends; it is skipped when
        other collectors' folds have read past ``bound`` meanwhile."""
        if not self.due:
            self.pending = bound
        elif self.pending is not None and bound is not None:
            self.pending = (
                max(self.pending[0], bound[0]),
                max(self.pending[1], bound[1]),
                max(self.pending[2], bound[2]),
            )
        else:
            self.pending = None  # unknown: fold
        self.due = True

    def wait_s(self) -> float:
        """Seconds until the next fold attempt (an idle fold when none is due)."""
        at = self.next_at if self.due else self.next_at + IDLE_FOLD_INTERVAL_S
        return max(0.0, at - self.clock())

    def fold_if_due(self, *, force: bool = False) -> bool:
        """Fold when one is due (``force``: now, e.g. at shutdown). True when nothing staged is
        left unfolded as far as this collector knows. Errors are logged and kept in ``error``."""
        if not force and self.wait_s() > 0:
            return not self.due
        started = time.perf_counter()
        try:
            with self.connect(self.location) as conn:
                if self.pending is not None and lake_ingest.is_folded(conn, self.pending):
                    self.skipped += 1  # another collector's fold stored this one's rows
                    result = None
                else:
                    result = lake_ingest.fold(conn)
                if result is not None:
                    self.folds += 1
                    log.debug(
                        "fold %d stored %d calls, %d records, %d events in %.3f s",
                        self.folds,
                        result.calls,
                        result.records,
                        result.events,
                        time.perf_counter() - started,
                    )
                    self._clean(conn)
        except duckdb.Error as error:
            if not is_conflict(error):
                return self._failed(error)
            self.lost += 1
            self.error = None  # the lake answered: another fold won
            log.debug("a fold lost to another collector's (%d lost so far): %s", self.lost, error)
            self.backoff_s = min(self.backoff_s * 2, MAX_FOLD_BACKOFF_S)
            self.next_at = self.clock() + _jitter(self.backoff_s)
            return False
        except Exception as error:  # the lake unreachable (StoreError), I/O
            return self._failed(error)
        self.error = None
        self.due = False
        self.pending = None
        self.backoff_s = self.interval_s
        self.next_at = self.clock() + _jitter(self.interval_s)
        if result is not None:
            self.observe(result)
        return True

    def fold_until_done(self, deadline: float | None) -> bool:
        """At shutdown: fold until a fold of this collector commits or finds nothing left,
        retrying one that lost to another collector's (whose snapshot may predate this one's
        last stage) after a jittered wait, until ``deadline`` (``time.monotonic()``; None: no
        limit). True when done; False when the lake refused (the rows stay staged: any
        collector's next fold takes them)."""
        while True:
            if self.fold_if_due(force=True):
                return True
            if self.error is not None:
                return False
            wait = self.wait_s()
            if deadline is not None and self.clock() + wait >= deadline:
                log.error("shutdown deadline: staged rows left for the next fold of any collector")
                return False
            time.sleep(wait)

    def _failed(self, error: BaseException) -> bool:
        if self.error is None or str(self.error) != str(error):
            log.error(
                "folding staged rows into %s failed (they stay staged; retrying): %s", self.location, error
            )
        self.error = error
        self.backoff_s = min(self.backoff_s * 2, MAX_FOLD_BACKOFF_S)
        self.next_at = self.clock() + _jitter(self.backoff_s)
        return False

    def _clean(self, conn) -> None:
        """Delete folded staged rows every ``CLEAN_INTERVAL_S`` (a lost delete waits its turn)."""
        if self.clock() - self.last_clean < CLEAN_INTERVAL_S:
            return
        self.last_clean = self.clock()
        try:
            deleted = lake_ingest.clean_staged(conn)
            log.debug("deleted %d folded staged rows", deleted)
        except duckdb.Error as error:
            log.info("deleting folded staged rows lost a conflict; next time: %s", error)
