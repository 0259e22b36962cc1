"""Bounded series: a cap on the label *combinations* of each metric family, not on values.

A value from the wire (task type, model) can be anything a client sends, so each family keeps at
most ``max_series`` label combinations. A combination seen again stays (its last-seen time moves
on); a new one past the cap takes the place of the combination that has been quiet longest,
once that one has been quiet for ``quiet_s`` seconds (its series is removed from the registry:
the value comes back, as a fresh counter, when it is sent again); while none is that quiet the
new combination is counted under ``other`` for its free-form labels (``task_type``, ``model``).
So a flood of junk names never takes a slot from a task type that keeps sending, and the junk's
slots free up after it stops: nothing is first come, first served for life.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

#: Combinations per metric family (each a series; a histogram's is ~17 lines of exposition).
DEFAULT_MAX_SERIES = 400
#: A combination not seen for this long (s) may give its slot to a new one.
DEFAULT_QUIET_S = 3600.0
#: Labels whose values come from the wire unchecked, folded into ``other`` past the cap.
FREE_LABELS = frozenset({"task_type", "model", "service", "team"})
OTHER = "other"


class SeriesCap:
    """Admits label combinations per family (see the module docstring). Thread-safe.

    ``clock`` returns seconds (monotonic; injectable for tests). Raises ValueError for
    ``max_series`` < 1 or ``quiet_s`` < 0.
    """

    def __init__(
        self,
        max_series: int = DEFAULT_MAX_SERIES,
        quiet_s: float = DEFAULT_QUIET_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_series < 1:
            raise ValueError(f"max_series must be >= 1 (got {max_series})")
        if quiet_s < 0:
            raise ValueError(f"quiet_s must be >= 0 (got {quiet_s})")
        self.max_series = max_series
        self.quiet_s = quiet_s
        self.clock = clock
        self._seen: dict[str, OrderedDict[tuple, float]] = {}
        self._lock = threading.Lock()

    def admit(self, family, values: tuple) -> tuple:
        """The label values to count ``values`` under in ``family`` (a prometheus-client
        metric): ``values`` themselves, or their ``other`` fold. Evicts (removes from
        ``family``) the quietest combination when it is quiet enough to make room."""
        now = self.clock()
        names = tuple(family._labelnames)
        with self._lock:
            seen = self._seen.setdefault(family._name, OrderedDict())
            if values in seen:
                seen[values] = now
                seen.move_to_end(values)
                return values
            folded = tuple(OTHER if n in FREE_LABELS else v for n, v in zip(names, values))
            if len(seen) >= self.max_series:
                oldest, last = next(iter(seen.items()))
                if now - last < self.quiet_s or oldest == folded:
                    return folded  # every slot is in use by something that still sends
                del seen[oldest]
                with contextlib.suppress(KeyError):  # never created
                    family.remove(*oldest)
            seen[values] = now
            return values

    def series(self, family) -> int:
        """How many combinations ``family`` holds now."""
        with self._lock:
            return len(self._seen.get(family._name, ()))


class CappedFamily:
    """A prometheus-client metric family whose ``labels(...)`` goes through a ``SeriesCap``;
    everything else is the family's own."""

    def __init__(self, family, cap: SeriesCap):
        self._family = family
        self._cap = cap

    def labels(self, *values):
        return self._family.labels(*self._cap.admit(self._family, tuple(str(v) for v in values)))

    def __getattr__(self, name):
        return getattr(self._family, name)
