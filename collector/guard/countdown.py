"""A countdown the model can see (issue 21 item 5, opt-in): a one-line budget notice.

With ``RunBudget(countdown_at=(0.5, 0.75, 0.9))`` the run hands out one notice each time its use
(the share of the most-used token or cost limit, as the thresholds count it) has crossed one of
those fractions since the last notice: ``"budget: 18 % left, about 3 turns"``. The OpenAI and
Anthropic adapters add it to the next request as a last user message (see
:mod:`budgetlens.guard.adapters._countdown`); its tokens are part of that request's prompt, so they
are reserved and counted like the rest. "About n turns" is the tokens left under
``max_total_tokens`` over the run's mean tokens per turn (or the turns left under ``max_turns``,
whichever is fewer), omitted when neither is known.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from budgetlens.limits import check_fraction

__all__ = ["check_countdown", "countdown_notice", "run_notice"]


def check_countdown(countdown_at: Any) -> tuple[float, ...]:
    """The thresholds as a sorted tuple of fractions in (0, 1] (empty: no countdown). Raises
    ValueError naming ``countdown_at`` and the rule."""
    if not isinstance(countdown_at, Iterable) or isinstance(countdown_at, (str, bytes)):
        raise ValueError(f"countdown_at must be an iterable of fractions in (0, 1], got {countdown_at!r}")
    values = tuple(countdown_at)
    for value in values:
        check_fraction("countdown_at", value)
    return tuple(sorted(set(values)))


def countdown_notice(
    thresholds: tuple[float, ...], fired: set[float], limits: Mapping[str, float | None], use: Any
) -> str | None:
    """The notice to show now, or None: when the share of the most-used token/cost limit of ``use``
    (a :class:`budgetlens.guard.ledger.RunLedger`) has crossed a threshold not yet in ``fired`` (the
    crossed ones are added). Percent left is rounded down to a whole percent."""
    share = use.share(limits)
    crossed = [t for t in thresholds if share >= t and t not in fired]
    if not crossed:
        return None
    fired.update(crossed)
    left = max(0, math.floor(100 * (1 - share)))
    notice = f"budget: {left} % left"
    turns = _turns_left(limits, use)
    return notice if turns is None else f"{notice}, about {turns} turn{'s' if turns != 1 else ''}"


def _turns_left(limits: Mapping[str, float | None], use: Any) -> int | None:
    candidates = []
    total = limits["max_total_tokens"]
    if total is not None and use.turns:
        candidates.append(max(0, int(total) - use.committed_tokens) // max(1, use.used_tokens // use.turns))
    if limits["max_turns"] is not None:
        candidates.append(max(0, int(limits["max_turns"]) - use.turns))
    return min(candidates) if candidates else None


def run_notice(run: Any) -> str | None:
    """``RunBudget.countdown_notice``: the one-line budget notice to show the model now (``"budget:
    18 % left, about 3 turns"``), once per ``countdown_at`` threshold crossed; None otherwise or
    without ``countdown_at``. The adapters add it to the next request. Read under the run's lock."""
    state = run._state
    with state.lock:
        return countdown_notice(state.options.countdown_at, state.countdown_fired, state.limits, state.use)
