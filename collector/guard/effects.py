"""External effects of a run: tool calls that write somewhere (send a mail, push a commit, pay).

A run that stops between such a write and its confirmation cannot tell whether the write
happened; retrying it could do it twice. :class:`EffectLog` keeps the effects begun and not yet
confirmed; ``RunBudget`` holds one, and its result names the unconfirmed ones and is not
``retryable`` while any is open. Names only: never tool arguments or results.
"""

from __future__ import annotations

import threading

from budgetlens.guard.results import Effect

__all__ = ["EffectLog"]


class EffectLog:
    """The open (begun, unconfirmed) external effects of one run. Thread-safe."""

    __slots__ = ("_run_id", "_open", "_next_id", "_lock")

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self._open: dict[int, Effect] = {}
        self._next_id = 0
        self._lock = threading.Lock()

    def begin(self, name: str) -> Effect:
        """Open an effect named ``name`` (a non-empty str). Raises ValueError for another name."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"an external effect is named by a non-empty string, got {name!r}")
        with self._lock:
            self._next_id += 1
            effect = Effect(self._next_id, name, self._run_id)
            self._open[effect.id] = effect
            return effect

    def confirm(self, effect: Effect) -> None:
        """Close ``effect``: the write is known to have happened (or known not to have).
        Raises ValueError for an effect of another run or one not open."""
        if not isinstance(effect, Effect) or effect.run_id != self._run_id:
            raise ValueError(f"effect {effect!r} was not begun by run {self._run_id}")
        with self._lock:
            if self._open.pop(effect.id, None) is None:
                raise ValueError(f"effect {effect.id} ({effect.name}) of run {self._run_id} is not open")

    @property
    def unconfirmed(self) -> tuple[str, ...]:
        """Names of the open effects, in the order they were begun."""
        with self._lock:
            return tuple(e.name for e in self._open.values())
