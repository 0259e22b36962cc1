"""OpenAI Codex CLI session rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One rollout file is one run (``run_id = codex:<session id>`` from ``session_meta``, else the file
name). Lines are ``{timestamp, type, payload}``.

Quirks handled (see ../shared/realdata/SOURCES.md §4):

- ``token_count`` events carry ``total_token_usage``, cumulative for the session. Each change of
  the cumulative total is one model call whose usage is the difference to the previous total, so
  the calls of a run add up to exactly the session's final ``total_token_usage``.
- Some Codex versions write every ``token_count`` twice: a snapshot equal to the previous total
  adds nothing and is counted as skipped (summing ``last_token_usage`` would double the usage).
- The first ``token_count`` is often a heartbeat with ``info: null`` (rate limits only): skipped.
- ``cached_input_tokens`` is part of ``input_tokens`` and ``reasoning_output_tokens`` part of
  ``output_tokens`` (normalized with ``budgetlens.usage.normalize_usage``).
- The model is only in ``turn_context`` events; each call takes the latest one.
- No cost field exists: calls are priced with ``budgetlens.pricing`` (NULL when unpriced).
- A rollout without any ``token_count`` has unknown usage: its run record says usage_status
  ``unknown`` and its tokens stay NULL.
- A cumulative total that goes down (a counter reset) starts a new baseline: the call's usage is
  that event's ``last_token_usage``.
- A forked (or resumed-as-new) rollout names its parent in ``session_meta.forked_from_id`` and
  starts with a copy of the parent's history, ``token_count`` events included: those copied
  calls belong to the parent's run, never twice. Parents are read before their forks; a copied
  ``token_count`` is one whose cumulative total the parent reported; when the parent rollout is
  not in the import, the copy is what the fork wrote within ``FORK_COPY_WINDOW_S`` seconds of
  its ``session_meta`` (Codex writes the copy when the fork starts). Copies are counted as
  skipped and only move the baseline, so the fork's calls are its own.

A file is a Codex rollout when it holds ``session_meta``, ``turn_context`` or ``event_msg``
lines (``{type, payload}``); any other JSONL (a Claude Code transcript, an OpenHands output)
adds no run and is listed as a file that held no run of this format. A line with a malformed
value (a model that is not a string, a token count that is not a whole number >= 0, an
unparseable timestamp) is reported as ``file:line: reason`` and skipped.

Tool calls: ``function_call``, ``custom_tool_call``, ``local_shell_call`` and ``web_search_call``
response items. Task type: ``--task-type``, else the basename of the session's ``cwd``, else
``codex``. Codex writes no exit status: the stop reason is ``completed``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.reading import iter_json_lines
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import extend_span, price, seconds_between, stable_id, usage_columns
from budgetlens.importers.validation import checked_rows, parse_timestamp, text
from budgetlens.usage import normalize_usage

log = logging.getLogger(__name__)

NAME = "codex"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SERVICE = "codex"
_TOOL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
SKIP_HEARTBEAT = "token_count heartbeat without usage (info: null)"
SKIP_REPEATED_TOTAL = "token_count repeating the previous cumulative total (written twice)"
SKIP_FORK_COPY = "token_count copied from the parent session into a forked rollout"
#: Without the parent rollout, a fork's copied history is what it wrote this soon after starting.
FORK_COPY_WINDOW_S = 2.0
#: Line types only Codex rollouts have: a file with none of them is not a rollout.
_ROLLOUT_TYPES = frozenset({"session_meta", "turn_context", "event_msg"})


def _counts(total: object) -> tuple[int, ...] | None:
    """The cumulative counters of a ``total_token_usage``, or None when it is not one."""
    if not isinstance(total, dict):
        return None
    values = []
    for name in _FIELDS:
        value = total.get(name, 0)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
        values.append(value)
    return tuple(values)


def _session_meta(path: Path) -> tuple[str | None, str | None]:
    """(session id, forked_from_id) from the first lines of a rollout (None when absent)."""
    try:
        with path.open("rb") as handle:
            for _, raw in zip(range(5), handle):
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                payload = obj.get("payload") if isinstance(obj, dict) else None
                if obj.get("type") == "session_meta" and isinstance(payload, dict):
                    session, parent = payload.get("id"), payload.get("forked_from_id")
                    return (
                        session if isinstance(session, str) else None,
                        parent if isinstance(parent, str) else None,
                    )
    except OSError:
        pass  # reported when the file is read
    return None, None


def parents_first(paths: Sequence[Path]) -> list[Path]:
    """``paths`` with every forked rollout after the rollout it was forked from (when both are
    there); otherwise in the given order."""
    metas = {path: _session_meta(path) for path in paths}
    by_session = {session: path for path, (session, _) in metas.items() if session}
    ordered: list[Path] = []
    placed: set[Path] = set()

    def place(path: Path, depth: int = 0) -> None:
        if path in placed:
            return
        parent = by_session.get(metas[path][1] or "")
        if parent is not None and parent != path and depth < 100:
            place(parent, depth + 1)
        if path not in placed:
            placed.add(path)
            ordered.append(path)

    for path in paths:
        place(path)
    return ordered


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield ``("call", row)`` per model call and one ``("record", row)`` per rollout file
    (forks after their parents, see the module docstring)."""
    totals: dict[str, set[tuple[int, ...]]] = {}  # session id -> cumulative totals it reported
    for path in parents_first(paths):
        report.files += 1
        yield from _read_file(path, options, report, totals)


@dataclass
class _Rollout:
    """What one rollout file has told so far."""

    path: Path
    session_id: str | None = None
    cwd: str | None = None
    model: str | None = None
    provider: str = "openai"
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    tool_calls: int = 0
    previous: tuple[int, ...] | None = None
    n_calls: int = 0
    usage_seen: bool = False
    forked_from: str | None = None
    started: dt.datetime | None = None  # the session_meta line's time
    copying: bool = True  # a fork's copied history has not ended yet
    totals: set[tuple[int, ...]] = field(default_factory=set)
    recognised: bool = False
    waiting: list = field(default_factory=list)  # calls before session_meta (unusual)

    @property
    def run_key(self) -> str:
        return self.session_id or self.path.stem


def _read_file(
    path: Path, options: ImportOptions, report: ImportReport, totals: dict[str, set[tuple[int, ...]]]
) -> Iterator[tuple]:
    state = _Rollout(path)
    for lineno, obj in iter_json_lines(path, report, options.max_line_bytes):
        yield from checked_rows(report, path, lineno, _line(state, lineno, obj, options, report, totals))
    if state.session_id:
        totals.setdefault(state.session_id, set()).update(state.totals)
    if not state.recognised:
        report.files_without_runs.append(str(path))
        return
    yield from checked_rows(report, path, None, _finish(state, options))


def _line(
    state: _Rollout,
    lineno: int,
    obj: dict,
    options: ImportOptions,
    report: ImportReport,
    totals: dict[str, set[tuple[int, ...]]],
) -> Iterator[tuple]:
    """The rows of one rollout line. Everything is read and validated before ``state`` changes,
    so a rejected line leaves no trace."""
    when = parse_timestamp(obj.get("timestamp"), "timestamp")
    line_type = obj.get("type")
    payload = obj.get("payload")
    if isinstance(line_type, str) and line_type in _ROLLOUT_TYPES or line_type == "response_item":
        if not isinstance(payload, dict):
            raise ValueError(f"{line_type} line without a 'payload' object")
    elif not state.recognised:
        return  # not (yet) known to be a rollout: a foreign line adds nothing
    if not isinstance(payload, dict):
        payload = {}  # a line of another type: its payload is not read
    row = None
    if line_type == "session_meta":
        session_id = text(payload.get("id"), "session_meta.payload.id")
        cwd = text(payload.get("cwd"), "session_meta.payload.cwd")
        provider = text(payload.get("model_provider"), "session_meta.payload.model_provider")
        forked_from = text(payload.get("forked_from_id"), "session_meta.payload.forked_from_id")
    elif line_type == "turn_context":
        model = text(payload.get("model"), "turn_context.payload.model")
        cwd = text(payload.get("cwd"), "turn_context.payload.cwd")
    elif line_type == "event_msg" and payload.get("type") == "token_count":
        row = _token_count(state, lineno, obj.get("timestamp"), when, payload, report, totals)
        if row is None:
            extend_span(state, when)
            state.recognised = True
            return
    # Valid: apply.
    extend_span(state, when)
    if line_type in _ROLLOUT_TYPES:
        state.recognised = True
    if line_type == "session_meta":
        state.session_id = state.session_id or session_id
        state.cwd = state.cwd or cwd
        state.provider = provider or state.provider
        if state.started is None:
            state.forked_from, state.started = forked_from, when
    elif line_type == "turn_context":
        state.model = model or state.model
        state.cwd = state.cwd or cwd
    elif line_type == "response_item" and payload.get("type") in _TOOL_ITEMS:
        state.tool_calls += 1
    if row is None:
        return
    usage_row, total = row
    state.usage_seen = True
    state.previous = total
    state.totals.add(total)
    state.n_calls += 1
    usage_row["turn"] = state.n_calls
    if state.session_id is None and state.cwd is None:
        state.waiting.append(usage_row)  # no session_meta yet (unusual): wait for it
        return
    for pending in state.waiting:
        yield "call", _finish_row(state, pending, options)
    state.waiting.clear()
    yield "call", _finish_row(state, usage_row, options)


def _token_count(
    state: _Rollout,
    lineno: int,
    raw_ts: object,
    when: dt.datetime | None,
    payload: dict,
    report: ImportReport,
    totals: dict[str, set[tuple[int, ...]]],
) -> tuple[dict, tuple] | None:
    """(call row without run id, cumulative total) of a token_count event, or None when it adds
    nothing (a heartbeat, a repeated total or a fork's copy of its parent's call, counted as
    skipped). Raises ValueError when the usage is malformed."""
    info = payload.get("info")
    if info is None:
        report.skip(SKIP_HEARTBEAT)
        return None
    total = _counts(info.get("total_token_usage") if isinstance(info, dict) else None)
    if total is None:
        raise ValueError(
            "token_count without a valid total_token_usage (token counts must be whole numbers >= 0)"
        )
    previous = state.previous
    if total == previous:
        state.usage_seen = True
        report.skip(SKIP_REPEATED_TOTAL)
        return None
    if state.forked_from and state.copying:
        if _is_fork_copy(state, total, when, totals.get(state.forked_from)):
            state.previous = total  # the baseline the fork's own calls start from
            report.skip(SKIP_FORK_COPY)
            return None
        state.copying = False
    if previous is not None and all(a >= b for a, b in zip(total, previous)):
        delta = dict(zip(_FIELDS, (a - b for a, b in zip(total, previous))))
    elif previous is None:
        delta = dict(zip(_FIELDS, total))
    else:
        log.info("%s:%d: cumulative token total went down; new baseline", state.path, lineno)
        last = info.get("last_token_usage")
        delta = last if isinstance(last, dict) else dict(zip(_FIELDS, total))
    usage = normalize_usage(delta, provider="openai")
    row = {
        "_identity": f"token_count:{lineno}:{raw_ts}",  # as in earlier versions: stable ids
        "source": SOURCE,
        "service_name": SERVICE,
        "operation_name": semconv.OPERATION_CHAT,
        "provider_name": state.provider,
        "request_model": state.model,
        "response_model": state.model,
        "start_utc": when,
        "end_utc": when,
        **price(state.model, usage, state.provider, when),
        **usage_columns(usage),
    }
    return row, total


def _is_fork_copy(
    state: _Rollout, total: tuple[int, ...], when: dt.datetime | None, parent: set[tuple[int, ...]] | None
) -> bool:
    """Whether a fork's token_count (cumulative ``total`` at ``when``) is a copy of a parent's
    call: a total the parent reported, else (parent not imported) one written within
    ``FORK_COPY_WINDOW_S`` of the fork's session_meta."""
    if parent is not None:
        return total in parent
    if when is None or state.started is None:
        return False
    return (when - state.started).total_seconds() <= FORK_COPY_WINDOW_S


def _finish_row(state: _Rollout, row: dict, options: ImportOptions) -> dict:
    row = dict(row)
    row["run_id"] = f"{NAME}:{state.run_key}"
    row["span_id"] = stable_id(NAME, state.run_key, row.pop("_identity"))
    row["task_type"] = _task_type(state.cwd, options)
    return row


def _finish(state: _Rollout, options: ImportOptions) -> Iterator[tuple]:
    for pending in state.waiting:
        yield "call", _finish_row(state, pending, options)
    yield (
        "record",
        {
            "run_id": f"{NAME}:{state.run_key}",
            "source": SOURCE,
            "service_name": SERVICE,
            "session_id": state.session_id,  # attribution (issue 19): session_meta.payload.id
            "task_type": _task_type(state.cwd, options),
            "agent_name": SERVICE,
            "model": state.model,
            "start_utc": state.first,
            "end_utc": state.last,
            "duration_s": seconds_between(state.first, state.last),
            "tool_calls": state.tool_calls,
            "stop_reason": semconv.STOP_COMPLETED,
            "usage_status": None if state.usage_seen else semconv.USAGE_UNKNOWN,
        },
    )


def _task_type(cwd: str | None, options: ImportOptions) -> str:
    if options.task_type:
        return options.task_type
    if isinstance(cwd, str) and cwd.strip("/\\"):
        return Path(cwd.rstrip("/\\")).name
    return SERVICE


FORMAT = ImporterFormat(
    name=NAME,
    description="Codex CLI rollout JSONL (~/.codex/sessions/**/rollout-*.jsonl)",
    patterns=("rollout-*.jsonl", "*.jsonl"),  # recognised by content (see the module docstring)
    read=read,
)
