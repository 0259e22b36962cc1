"""Claude Code session transcripts (``~/.claude/projects/<project>/<sessionId>.jsonl``).

One session is one run (``run_id = claude-code:<sessionId>``). Its subagent transcripts
(``<sessionId>/subagents/agent-*.jsonl``, or ``agent-*.jsonl`` beside the session in older
versions; lines with ``isSidechain: true``) carry the same ``sessionId``: their calls belong to
the session's run and are marked ``is_subagent``.

Quirks handled (see ../shared/realdata/SOURCES.md §3):

- One API response is written as one line per content block, each repeating ``message.id``,
  ``requestId`` and the usage; only the last has the final ``output_tokens``. A call is counted
  once per (message id, request id), keeping the line with the largest ``output_tokens``; the
  other lines are counted as skipped. Lines of one response are consecutive within a
  transcript, so at most one response per transcript context is held in memory.
- ``input_tokens`` excludes the cache buckets: usage is normalized as Anthropic usage
  (``budgetlens.usage.normalize_usage``), input = input + cache creation + cache read.
- ``progress`` lines (``agent_progress``) repeat subagent messages: ignored (the subagent
  transcript has them). Synthetic assistant lines (model ``<synthetic>``, API error notices) are
  not model calls.
- There is no cost field in real transcripts; when a line has ``costUSD`` (older versions) that
  is the call's cost, otherwise the call is priced with ``budgetlens.pricing``.
- No exit status exists: a session's stop reason is ``completed``.
- Timestamps are parsed to UTC datetimes once per line and compared as datetimes (offsets and
  ``Z`` mix). A line with a malformed value (an unparseable timestamp, a ``sessionId`` or model
  that is not a string, a usage count or ``costUSD`` that is not a finite number >= 0) is
  reported as ``file:line: reason`` and skipped.
- A file with no Claude Code line (no ``sessionId``, no assistant message: e.g. a Codex rollout)
  adds no run and is listed as a file that held no run of this format.
- A resumed or continued session starts a new transcript with copies of the earlier session's
  responses (same ``message.id`` and ``requestId``, the new ``sessionId``). A response is counted
  once per import, in the session that made it: files are read oldest first (by their first
  timestamp, then modification time) and a later copy is counted as skipped. Across imports the
  store decides: each call carries ``response_id`` (message id + request id, the same in every
  copy), and a call whose response is already stored is not stored again (the import's
  ``new_calls`` leave it out).

Task type: ``--task-type``, else the project folder name (for Claude's encoded folder names such
as ``-home-me-projects-shop`` the basename of the session's ``cwd``, here ``shop``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.reading import iter_json_lines
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import (
    extend_span,
    parse_iso,
    price,
    seconds_between,
    source_cost,
    stable_id,
    usage_columns,
)
from budgetlens.importers.validation import (
    attempt,
    check_row,
    checked_rows,
    parse_timestamp,
    source_number,
    text,
)
from budgetlens.usage import Usage, normalize_usage

log = logging.getLogger(__name__)

NAME = "claude-code"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SERVICE = "claude-code"
_SYNTHETIC_MODEL = "<synthetic>"
SKIP_REPEATED_BLOCK = "repeated line of one API response (one line per content block)"
SKIP_SYNTHETIC = "synthetic assistant line (not a model call)"
SKIP_NO_CALLS = "session without model calls"
SKIP_COPIED = "response copied from an earlier session (resumed or continued session)"


@dataclass
class _Call:
    """One API response being assembled from its content-block lines."""

    key: tuple
    session_id: str
    is_subagent: bool
    lineno: int
    model: str | None
    provider: str
    usage: Usage | None
    output_tokens: int
    first: dt.datetime | None
    last: dt.datetime | None
    cost_usd: float | None
    tool_use_ids: set = field(default_factory=set)


@dataclass
class _Session:
    """What one session contributes to its run record (kept until all files are read)."""

    session_id: str
    folder: str
    path: Path
    cwd: str | None = None
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    calls: int = 0
    tool_calls: int = 0
    task_type: str | None = None


@dataclass
class _File:
    """State of one transcript while it is read."""

    path: Path
    folder: str
    default_session: str
    pending: dict = field(default_factory=dict)  # context -> _Call being assembled
    turns: dict = field(default_factory=dict)  # (session, is_subagent) -> calls so far
    seen: bool = False  # a Claude Code line was found


def _encoded(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def _project_folder(path: Path) -> tuple[str, str | None]:
    """(project folder name, session id implied by the layout or None) of a transcript path."""
    parent = path.parent
    if parent.name == "subagents":
        return parent.parent.parent.name, parent.parent.name
    return parent.name, None


def _task_type(session: _Session, options: ImportOptions) -> str:
    if options.task_type:
        return options.task_type
    folder = session.folder
    if session.cwd and (folder.startswith("-") or not folder) and _encoded(session.cwd) == folder:
        return Path(session.cwd).name or folder
    return folder or SERVICE


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield ``("call", row)`` per API response and ``("record", row)`` per session.

    ``paths``: transcript files (main sessions and subagents, in any order). Session records are
    yielded after all files are read, so a session's subagent files may come before or after it.
    """
    sessions: dict[str, _Session] = {}
    owners: dict[int, str] = {}  # hash of (message id, request id) -> the session that made it
    for path in sorted(paths, key=_age):
        report.files += 1
        yield from _read_file(path, options, report, sessions, owners)
    for session in sessions.values():
        if not session.calls:
            report.skip(SKIP_NO_CALLS)
            continue
        yield from checked_rows(report, session.path, None, _record(session, options))


def _age(path: Path) -> tuple:
    """Sort key: the first timestamp in the file's first lines, then its modification time
    (an original session before the transcripts that copy it)."""
    first = ""
    try:
        with path.open("rb") as handle:
            for _, raw in zip(range(20), handle):
                try:
                    stamp = json.loads(raw).get("timestamp")
                except (ValueError, AttributeError):
                    continue
                if isinstance(stamp, str):
                    parsed = parse_iso(stamp)
                    first = parsed.isoformat() if parsed else ""
                    break
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0  # reported when the file is read
    return (first == "", first, mtime)


def _record(session: _Session, options: ImportOptions) -> Iterator[tuple]:
    yield (
        "record",
        {
            "run_id": f"{NAME}:{session.session_id}",
            "source": SOURCE,
            "service_name": SERVICE,
            "session_id": session.session_id,  # attribution (issue 19): the transcript's sessionId
            "task_type": session.task_type or _task_type(session, options),
            "agent_name": SERVICE,
            "start_utc": session.first,
            "end_utc": session.last,
            "duration_s": seconds_between(session.first, session.last),
            "tool_calls": session.tool_calls,
            "stop_reason": semconv.STOP_COMPLETED,
        },
    )


def _read_file(
    path: Path,
    options: ImportOptions,
    report: ImportReport,
    sessions: dict[str, _Session],
    owners: dict[int, str],
) -> Iterator[tuple]:
    folder, layout_session = _project_folder(path)
    state = _File(path, folder, layout_session or path.stem)
    for lineno, obj in iter_json_lines(path, report, options.max_line_bytes):
        done = attempt(report, path, lineno, _line, state, sessions, lineno, obj, report)
        if done is not None and _owned(done, owners, report):
            yield from checked_rows(report, path, done.lineno, _finish(done, sessions, options, state.turns))
    for call in state.pending.values():
        if _owned(call, owners, report):
            yield from checked_rows(report, path, call.lineno, _finish(call, sessions, options, state.turns))
    if not state.seen:
        report.files_without_runs.append(str(path))


def _owned(call: _Call, owners: dict[int, str], report: ImportReport) -> bool:
    """True when ``call`` belongs to its session: the first session of the import that has this
    response; a copy in a later session is counted as skipped."""
    if call.key[0] == "line":  # no message id: nothing to match copies by
        return True
    owner = owners.setdefault(hash(call.key), call.session_id)  # 64-bit hash: small state
    if owner != call.session_id:
        report.skip(SKIP_COPIED)
        return False
    return True


def _line(
    state: _File, sessions: dict[str, _Session], lineno: int, obj: dict, report: ImportReport
) -> _Call | None:
    """Fold one transcript line into ``state``; returns the previous response of the same
    context when this line starts a new one (it is complete), else None.

    Every value used is read and validated before anything changes, so a line rejected with a
    ValueError/TypeError leaves no trace.
    """
    line_type = obj.get("type")
    message = obj.get("message")
    is_assistant = line_type == "assistant" or (
        line_type is None and isinstance(message, dict) and message.get("role") == "assistant"
    )
    session_id = text(obj.get("sessionId"), "sessionId")
    if not session_id:
        if not is_assistant:
            return None  # e.g. file-history-snapshot lines: no session, no usage
        session_id = state.default_session
    when = parse_timestamp(obj.get("timestamp"), "timestamp")
    cwd = text(obj.get("cwd"), "cwd")
    call = None
    model = None
    if is_assistant:
        if not isinstance(message, dict):
            raise ValueError("assistant line without a 'message' object")
        model = text(message.get("model"), "message.model")
        if model != _SYNTHETIC_MODEL:
            call = _new_call(state, session_id, lineno, obj, message, model, when)
    # Valid: apply.
    state.seen = True
    session = sessions.get(session_id)
    if session is None:
        session = sessions[session_id] = _Session(session_id, state.folder, state.path)
    extend_span(session, when)
    if session.cwd is None and cwd:
        session.cwd = cwd
    if not is_assistant:
        return None
    if call is None:
        report.skip(SKIP_SYNTHETIC)
        return None
    context = (session_id, obj.get("agentId") if call.is_subagent else None, call.is_subagent)
    current = state.pending.get(context)
    if current is not None and current.key == call.key:
        report.skip(SKIP_REPEATED_BLOCK)
        if call.usage is not None and call.output_tokens >= current.output_tokens:
            current.usage, current.output_tokens = call.usage, call.output_tokens
        extend_span(current, when)
        current.tool_use_ids |= call.tool_use_ids
        return None
    state.pending[context] = call
    return current


def _new_call(
    state: _File,
    session_id: str,
    lineno: int,
    obj: dict,
    message: dict,
    model: str | None,
    when: dt.datetime | None,
) -> _Call:
    """The response one assistant line belongs to, read and validated (raises ValueError)."""
    is_subagent = bool(obj.get("isSidechain"))
    if is_subagent:
        text(obj.get("agentId"), "agentId")
    message_id = text(message.get("id"), "message.id")
    request_id = text(obj.get("requestId"), "requestId")
    key = (message_id, request_id) if message_id else ("line", state.path.name, lineno)
    provider = "aws.bedrock" if (message_id or "").startswith("msg_bdrk_") else "anthropic"
    payload = message.get("usage")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError(f"message.usage must be an object, got {type(payload).__name__}")
    usage = normalize_usage(payload, provider=provider) if payload else None
    tool_ids: set = set()
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                tool_ids.add(text(block.get("id"), "tool_use.id") or len(tool_ids))
    return _Call(
        key=key,
        session_id=session_id,
        is_subagent=is_subagent,
        lineno=lineno,
        model=model,
        provider=provider,
        usage=usage,
        output_tokens=usage.output_tokens if usage is not None else -1,
        first=when,
        last=when,
        cost_usd=source_number(obj.get("costUSD"), "costUSD"),
        tool_use_ids=tool_ids,
    )


def _finish(
    call: _Call, sessions: dict[str, _Session], options: ImportOptions, turns: dict[tuple, int]
) -> Iterator[tuple]:
    """The ``model_calls`` row of a complete response; the session counts it once it is valid."""
    session = sessions[call.session_id]
    task_type = session.task_type or _task_type(session, options)
    counter = (call.session_id, call.is_subagent)
    turn = turns.get(counter, 0) + 1
    usage = call.usage
    cost = (
        source_cost(call.cost_usd, usage)
        if call.cost_usd is not None
        else price(call.model, usage, call.provider, call.first)
    )
    row = {
        "span_id": stable_id(NAME, call.session_id, *call.key),
        "run_id": f"{NAME}:{call.session_id}",
        "source": SOURCE,
        "service_name": SERVICE,
        "task_type": task_type,
        "operation_name": semconv.OPERATION_CHAT,
        "provider_name": call.provider,
        "request_model": call.model,
        "response_model": call.model,
        "start_utc": call.first,
        "end_utc": call.last,
        "duration_s": seconds_between(call.first, call.last),
        "turn": turn,
        **cost,
        "is_subagent": call.is_subagent,
        **usage_columns(usage),
        # the same in every transcript that copies this response: stored once across imports
        "response_id": None if call.key[0] == "line" else f"{NAME}:{stable_id(NAME, *call.key)}",
    }
    check_row("call", row)
    session.task_type = task_type
    session.calls += 1
    session.tool_calls += len(call.tool_use_ids)
    turns[counter] = turn
    yield "call", row


FORMAT = ImporterFormat(
    name=NAME,
    description="Claude Code session JSONL (project folders with sessions and subagent files)",
    patterns=("*.jsonl",),  # recognised by content (see the module docstring)
    read=read,
)
