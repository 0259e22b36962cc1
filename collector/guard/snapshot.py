"""Pause and resume (issue 21): a run stopped at its budget is saved and resumed later, in another
process, with an authorized raise.

``run.snapshot()`` (:meth:`budgetlens.RunBudget.snapshot`) returns a :class:`RunSnapshot`: the run's
identity, limits, use, what is left, the stop reason it was paused at, the limit changes so far and
the external effects still open. ``snapshot.save(path)`` / ``RunSnapshot.load(path)`` keep it as a
JSON file. ``RunBudget.resume(snapshot, authorization=Authorization(by=..., reason=..., extra=...))``
builds the run again with the same run id, its use restored and each limit in ``extra`` raised by
that amount; the raise is an :class:`Authorization` (who, how much, when, why), given by a person or
a policy outside the agent, recorded as a ``budgetlens.resumed`` event and one
``budgetlens.limit_changed`` event per raised limit (``changed_by`` = who and why). The resumed run
reports the same run id with its whole use, so the store keeps one run: the resumed run's record
replaces the paused one's, and the calls of both processes are its calls.

Not carried over: open reservations (a paused run has none that matter: the calls were refused),
the model chain's position and fired thresholds (the resumed run starts them again), callbacks,
tracers, pools and spend windows (pass them to ``resume`` as constructor keywords).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from budgetlens import semconv as sc
from budgetlens.limits import LIMIT_KEYS

__all__ = ["Authorization", "RunSnapshot", "SNAPSHOT_VERSION"]

#: The snapshot file format's version (``version`` in the JSON).
SNAPSHOT_VERSION = 1

#: The ledger counters a snapshot carries (``RunSnapshot.used``), as :class:`budgetlens.guard.ledger.RunLedger`
#: names them: tokens (int), counts (int), USD (float).
USED_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "unknown_tokens",
    "largest_call_tokens",
    "turns",
    "tool_calls",
    "priced_calls",
    "unpriced_calls",
    "partial_calls",
    "cost_usd",
    "tool_cost_usd",
)
_ATTRIBUTION = ("service", "team", "user", "session_id", "tags")


@dataclasses.dataclass(frozen=True)
class Authorization:
    """An authorized raise of a paused run's budget, decided outside the agent.

    ``by``: who authorized it (a person or a policy; non-empty str); ``reason``: why (str, may be
    empty); ``extra``: limit name (constructor names, e.g. ``max_total_tokens``) -> amount added to the
    snapshot's limit, in the limit's unit (a number > 0; the limit must be set); ``authorized_utc``:
    when (aware UTC datetime; default now). Raises ValueError naming a bad field."""

    by: str
    extra: Mapping[str, float]
    reason: str = ""
    authorized_utc: dt.datetime = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def __post_init__(self) -> None:
        if not isinstance(self.by, str) or not self.by.strip():
            raise ValueError(f"Authorization.by must be a non-empty string (who authorized), got {self.by!r}")
        if not isinstance(self.reason, str):
            raise ValueError(f"Authorization.reason must be a string, got {self.reason!r}")
        if not isinstance(self.extra, Mapping) or not self.extra:
            raise ValueError("Authorization.extra must be a non-empty mapping of limit name -> amount added")
        for name, amount in self.extra.items():
            if name not in LIMIT_KEYS:
                raise ValueError(f"Authorization.extra: unknown limit {name!r}; known: {list(LIMIT_KEYS)}")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
                raise ValueError(f"Authorization.extra[{name!r}] must be a number > 0, got {amount!r}")
            if amount <= 0:
                raise ValueError(f"Authorization.extra[{name!r}] must be > 0 (a raise), got {amount!r}")
        if not isinstance(self.authorized_utc, dt.datetime) or self.authorized_utc.tzinfo is None:
            raise ValueError("Authorization.authorized_utc must be an aware datetime")
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def changed_by(self) -> str:
        """``by`` and ``reason`` as the ``changed_by`` of the events (``"alice: needs the last file"``)."""
        return f"{self.by}: {self.reason}" if self.reason else self.by


@dataclasses.dataclass(frozen=True)
class RunSnapshot:
    """A paused run: ``run_id``, ``task_type``, ``agent_name``, ``parent_run_id``; ``limits`` (every
    limit name -> value or None); ``used`` (:data:`USED_FIELDS` -> int, or float for ``*_usd``);
    ``remaining`` (limit name -> what is left in its unit, >= 0; None: no limit); ``stop_reason``
    (the budget stop the run was paused at, None when it was not refused); ``elapsed_s`` (seconds
    of wall time used); ``limit_changes`` (dicts: limit, previous, new, changed_by, ts_utc
    ISO text); ``open_effects`` (names of external effects begun and not confirmed);
    ``attribution`` (service, team, user, session_id, tags); ``authorizations`` (dicts of earlier
    resumes: by, reason, extra, authorized_utc); ``taken_utc`` (ISO text)."""

    run_id: str
    task_type: str
    limits: Mapping[str, float | None]
    used: Mapping[str, float]
    remaining: Mapping[str, float | None]
    stop_reason: str | None
    elapsed_s: float
    agent_name: str | None = None
    parent_run_id: str | None = None
    limit_changes: tuple[Mapping[str, Any], ...] = ()
    open_effects: tuple[str, ...] = ()
    attribution: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    authorizations: tuple[Mapping[str, Any], ...] = ()
    taken_utc: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as a JSON-ready dict (with ``version``)."""
        body = dataclasses.asdict(self)
        body["limit_changes"] = [dict(c) for c in self.limit_changes]
        body["authorizations"] = [dict(a) for a in self.authorizations]
        body["open_effects"] = list(self.open_effects)
        return {"version": SNAPSHOT_VERSION, **body}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> RunSnapshot:
        """The snapshot of a :meth:`to_dict` dict. Raises ValueError naming a missing or bad field."""
        if not isinstance(body, Mapping):
            raise ValueError("snapshot must be a JSON object")
        if body.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version must be {SNAPSHOT_VERSION}, got {body.get('version')!r}")
        for name in ("run_id", "task_type"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise ValueError(f"snapshot field {name} must be a non-empty string")
        limits = body.get("limits")
        if not isinstance(limits, Mapping) or set(limits) != set(LIMIT_KEYS):
            raise ValueError(f"snapshot field limits must name every limit: {list(LIMIT_KEYS)}")
        used = body.get("used")
        if not isinstance(used, Mapping) or not all(
            isinstance(used.get(k), (int, float)) and not isinstance(used.get(k), bool) and used[k] >= 0
            for k in USED_FIELDS
        ):
            raise ValueError(f"snapshot field used must give every counter >= 0: {list(USED_FIELDS)}")
        elapsed = body.get("elapsed_s")
        if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or elapsed < 0:
            raise ValueError("snapshot field elapsed_s must be a number >= 0 (seconds)")
        stop = body.get("stop_reason")
        if stop is not None and stop not in sc.STOP_REASONS:
            raise ValueError(f"snapshot field stop_reason must be one of {list(sc.STOP_REASONS)} or null")
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in body.items() if k in fields}
        for name in ("limit_changes", "open_effects", "authorizations"):
            kwargs[name] = tuple(kwargs.get(name) or ())
        return cls(**kwargs)

    def save(self, path: str | os.PathLike) -> None:
        """Write the snapshot to ``path`` as JSON (UTF-8), replacing it atomically."""
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, indent=2, sort_keys=True)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunSnapshot:
        """Read a snapshot written by :meth:`save`. Raises ValueError naming the file for invalid
        JSON or a bad field; OSError when it cannot be read."""
        with open(path, encoding="utf-8") as handle:
            try:
                body = json.load(handle)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not a snapshot (invalid JSON: {error})") from error
        try:
            return cls.from_dict(body)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error


def take(run: Any) -> RunSnapshot:
    """``RunBudget.snapshot``: the run now (finished or not, under its lock) as a
    :class:`RunSnapshot` (limits, use, remaining, the stop reason it was refused with, limit changes,
    open effects), to ``save(path)`` and resume later, in any process, with ``RunBudget.resume``.
    The run itself is not changed."""
    state = run._state
    with state.lock:
        use = state.use
        used = {name: getattr(use, name) for name in USED_FIELDS}
        remaining: dict[str, float | None] = {}
        for key in LIMIT_KEYS:
            limit = state.limits[key]
            amount = use.amount(key, state.elapsed_s())
            remaining[key] = None if limit is None else max(0, limit - amount)
        finished = state.finished
        stop = finished.stop_reason if finished is not None else (use.refusal.reason if use.refusal else None)
        who = state.options.attribution
        return RunSnapshot(
            run_id=state.run_id,
            task_type=state.options.task_type,
            limits=dict(state.limits),
            used=used,
            remaining=remaining,
            stop_reason=stop,
            elapsed_s=state.elapsed_s() if finished is None else finished.duration_s,
            agent_name=state.options.agent_name,
            parent_run_id=run.parent_run_id,
            limit_changes=tuple(
                {
                    "limit": c.limit,
                    "previous": c.previous,
                    "new": c.new,
                    "changed_by": c.changed_by,
                    "ts_utc": c.ts_utc.isoformat(),
                }
                for c in state.limit_changes
            ),
            open_effects=state.effects.unconfirmed,
            attribution={name: getattr(who, name) for name in _ATTRIBUTION},
            authorizations=tuple(getattr(run, "authorizations", ())),
            taken_utc=dt.datetime.now(dt.UTC).isoformat(),
        )


def resume(cls: Any, snapshot: RunSnapshot, *, authorization: Authorization, **options: Any) -> Any:
    """``RunBudget.resume``: the paused run of ``snapshot`` again (a ``cls`` instance: same run id,
    use restored, one run in the store), each limit in ``authorization.extra`` raised by that amount
    and recorded (a ``budgetlens.resumed`` event and ``limit_changed`` events naming who authorized
    it; ``RunBudget.authorizations``). ``options``: constructor keywords (callbacks, tracer...).
    Raises ValueError for a raise of a limit the snapshot does not set, or a snapshot or
    authorization of the wrong type."""
    if not isinstance(snapshot, RunSnapshot):
        raise ValueError(f"snapshot must be a RunSnapshot (RunSnapshot.load(path)), got {snapshot!r}")
    if not isinstance(authorization, Authorization):
        raise ValueError(f"authorization must be an Authorization, got {authorization!r}")
    unset = sorted(k for k in authorization.extra if snapshot.limits.get(k) is None)
    if unset:
        raise ValueError(f"Authorization.extra raises {unset}, which the paused run has no limit for")
    attribution = {k: v for k, v in snapshot.attribution.items() if v} if snapshot.attribution else {}
    kwargs = {
        **attribution,
        "agent_name": snapshot.agent_name,
        **options,
        "run_id": snapshot.run_id,
        "task_type": snapshot.task_type,
    }
    run = cls(**snapshot.limits, **kwargs)
    state = run._state
    with state.lock:
        for name in USED_FIELDS:
            setattr(state.use, name, snapshot.used[name])
        if snapshot.used["unknown_tokens"]:
            state.use.unknown_at = 0
        state.started -= snapshot.elapsed_s  # wall time goes on from where it stopped
        for name in snapshot.open_effects:
            state.effects.begin(name)
    run.parent_run_id = snapshot.parent_run_id
    record = {
        "by": authorization.by,
        "reason": authorization.reason,
        "extra": dict(authorization.extra),
        "authorized_utc": authorization.authorized_utc.isoformat(),
    }
    run.authorizations = (*snapshot.authorizations, record)
    if snapshot.parent_run_id:
        state.telemetry.span.set_attribute(sc.BUDGET_PARENT_RUN_ID, snapshot.parent_run_id)
    raised = {k: snapshot.limits[k] + v for k, v in authorization.extra.items()}  # type: ignore[operator]
    for key in ("max_total_tokens", "max_input_tokens", "max_output_tokens", "max_turns", "max_tool_calls"):
        if key in raised:
            raised[key] = int(math.ceil(raised[key]))
    with state.lock:
        state.dispatch.emit(
            None,
            state.use,
            state.limits,
            name=sc.EVENT_RESUMED,
            reason="authorization",
            changed_by=authorization.changed_by,
        )
    run.set_max(changed_by=authorization.changed_by, **raised)
    return run
