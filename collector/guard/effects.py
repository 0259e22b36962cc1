"""External effects of a run: tool calls that write somewhere (send a mail, push a commit, pay).

A run that stops between such a write and its confirmation cannot tell whether the write
happened; retrying it could do it twice. :class:`EffectLog` keeps the effects begun and not yet
confirmed; ``RunBudget`` holds one, and its result names the unconfirmed ones and is not
``retryable`` while any is open. Names only: never tool arguments or results.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from budgetlens.guard.results import Effect

__all__ = ["EffectLog", "begin_effect", "confirm_effect", "external_effect"]


def begin_effect(run: Any, name: str) -> Effect:
    """``RunBudget.begin_effect``: note that an external effect named ``name`` (a tool that sends,
    pushes, pays) starts. Until ``confirm_effect``, a run that ends is not ``retryable`` and its
    result names it in ``unconfirmed_effects``. Raises ValueError for an empty name; RuntimeError
    after ``finish()``."""
    with run._state.lock:
        run._state.check_open()
    return run._state.effects.begin(name)


def confirm_effect(run: Any, effect: Effect) -> None:
    """``RunBudget.confirm_effect``: confirm an effect begun by ``begin_effect`` (its outcome is
    known). Raises ValueError for an effect that is not open or of another run; allowed after
    ``finish()`` (the result keeps the names it ended with)."""
    run._state.effects.confirm(effect)


@contextlib.contextmanager
def external_effect(run: Any, name: str) -> Iterator[Effect]:
    """``RunBudget.external_effect``: ``with run.external_effect("send_mail"):`` begins an effect
    and confirms it when the block ends without an exception; an exception leaves it unconfirmed
    (the write may or may not have happened) and propagates."""
    effect = run.begin_effect(name)
    yield effect
    run.confirm_effect(effect)


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
