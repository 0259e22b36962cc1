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
  (``collector.usage.normalize_usage``), input = input + cache creation + cache read.
- ``progress`` lines (``agent_progress``) repeat subagent messages: ignored (the subagent
  transcript has them). Synthetic assistant lines (model ``<synthetic>``, API error notices) are
  not model calls.
- There is no cost field in real transcripts; when a line has ``costUSD`` (older versions) that
  is the call's cost, otherwise the call is priced with ``collector.pricing``.
- No exit status exists: a session's stop reason is ``completed``.

Task type: ``--task-type``, else the project folder name (for Claude's encoded folder names such
as ``-home-me-projects-shop`` the basename of the session's ``cwd``, here ``shop``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from collector import semconv
from collector.importers.base import (
    ImporterFormat,
    ImportOptions,
    ImportReport,
    iter_json_lines,
    parse_iso,
    price,
    seconds_between,
    stable_id,
    usage_columns,
)
from collector.usage import normalize_usage

log = logging.getLogger(__name__)

NAME = "claude-code"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SERVICE = "claude-code"
_SYNTHETIC_MODEL = "<synthetic>"
SKIP_REPEATED_BLOCK = "repeated line of one API response (one line per content block)"
SKIP_SYNTHETIC = "synthetic assistant line (not a model call)"
SKIP_NO_CALLS = "session without model calls"


@dataclass
class _Call:
    """One API response being assembled from its content-block lines."""

    key: tuple
    session_id: str
    is_subagent: bool
    lineno: int
    model: str | None
    provider: str
    usage_payload: dict | None
    output_tokens: int
    first_ts: str | None
    last_ts: str | None
    cost_usd: float | None
    tool_use_ids: set = field(default_factory=set)


@dataclass
class _Session:
    """What one session contributes to its run record (kept until all files are read)."""

    session_id: str
    folder: str
    cwd: str | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    calls: int = 0
    tool_calls: int = 0
    task_type: str | None = None


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


def _usage_output(usage: object) -> int:
    if isinstance(usage, dict):
        value = usage.get("output_tokens")
        if isinstance(value, int):
            return value
    return -1


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield ``("call", row)`` per API response and ``("record", row)`` per session.

    ``paths``: transcript files (main sessions and subagents, in any order). Session records are
    yielded after all files are read, so a session's subagent files may come before or after it.
    """
    sessions: dict[str, _Session] = {}
    for path in paths:
        report.files += 1
        yield from _read_file(path, options, report, sessions)
    for session in sessions.values():
        if not session.calls:
            report.skip(SKIP_NO_CALLS)
            continue
        start, end = parse_iso(session.first_ts), parse_iso(session.last_ts)
        yield "record", {
            "run_id": f"{NAME}:{session.session_id}",
            "source": SOURCE,
            "service_name": SERVICE,
            "task_type": session.task_type or _task_type(session, options),
            "agent_name": SERVICE,
            "start_utc": start,
            "end_utc": end,
            "duration_s": seconds_between(start, end),
            "tool_calls": session.tool_calls,
            "stop_reason": semconv.STOP_COMPLETED,
        }


def _read_file(path: Path, options: ImportOptions, report: ImportReport,
               sessions: dict[str, _Session]) -> Iterator[tuple]:
    folder, layout_session = _project_folder(path)
    default_session = layout_session or path.stem
    pending: dict[tuple, _Call] = {}
    turns: dict[tuple, int] = {}
    for lineno, obj in iter_json_lines(path, report):
        line_type = obj.get("type")
        message = obj.get("message")
        is_assistant = line_type == "assistant" or (
            line_type is None and isinstance(message, dict) and message.get("role") == "assistant"
        )
        session_id = obj.get("sessionId")
        if not session_id:
            if not is_assistant:
                continue  # e.g. file-history-snapshot lines: no session, no usage
            session_id = default_session
        session = sessions.get(session_id)
        if session is None:
            session = sessions[session_id] = _Session(session_id, folder)
        ts = obj.get("timestamp")
        if isinstance(ts, str):
            if session.first_ts is None or ts < session.first_ts:
                session.first_ts = ts
            if session.last_ts is None or ts > session.last_ts:
                session.last_ts = ts
        if session.cwd is None and isinstance(obj.get("cwd"), str):
            session.cwd = obj["cwd"]
        if not is_assistant:
            continue
        if not isinstance(message, dict):
            report.bad_line(path, lineno, "assistant line without a 'message' object")
            continue
        model = message.get("model")
        if model == _SYNTHETIC_MODEL:
            report.skip(SKIP_SYNTHETIC)
            continue
        is_subagent = bool(obj.get("isSidechain"))
        context = (session_id, obj.get("agentId") if is_subagent else None, is_subagent)
        message_id = message.get("id")
        request_id = obj.get("requestId")
        key = (message_id, request_id) if message_id else ("line", path.name, lineno)
        usage_payload = message.get("usage")
        current = pending.get(context)
        if current is not None and current.key == key:
            report.skip(SKIP_REPEATED_BLOCK)
            _merge(current, usage_payload, ts, message)
            continue
        if current is not None:
            yield _finish(current, sessions, options, turns, path, report)
        cost = obj.get("costUSD")
        pending[context] = call = _Call(
            key=key,
            session_id=session_id,
            is_subagent=is_subagent,
            lineno=lineno,
            model=model if isinstance(model, str) else None,
            provider="aws.bedrock" if str(message_id).startswith("msg_bdrk_") else "anthropic",
            usage_payload=usage_payload if isinstance(usage_payload, dict) else None,
            output_tokens=_usage_output(usage_payload),
            first_ts=ts if isinstance(ts, str) else None,
            last_ts=ts if isinstance(ts, str) else None,
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool)
            else None,
        )
        _add_tool_uses(call, message)
    for call in pending.values():
        yield _finish(call, sessions, options, turns, path, report)


def _add_tool_uses(call: _Call, message: dict) -> None:
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                call.tool_use_ids.add(block.get("id") or len(call.tool_use_ids))


def _merge(call: _Call, usage_payload: object, ts: object, message: dict) -> None:
    """Fold a repeated content-block line into its response: keep the largest output_tokens."""
    output = _usage_output(usage_payload)
    if isinstance(usage_payload, dict) and output >= call.output_tokens:
        call.usage_payload, call.output_tokens = usage_payload, output
    if isinstance(ts, str):
        call.last_ts = ts
    _add_tool_uses(call, message)


def _finish(call: _Call, sessions: dict[str, _Session], options: ImportOptions,
            turns: dict[tuple, int], path: Path, report: ImportReport) -> tuple:
    session = sessions[call.session_id]
    if session.task_type is None:
        session.task_type = _task_type(session, options)
    try:
        usage = normalize_usage(call.usage_payload, provider=call.provider)
    except ValueError as error:
        report.bad_line(path, call.lineno, f"unreadable usage ({error}); call kept as unknown")
        usage = None
    session.calls += 1
    session.tool_calls += len(call.tool_use_ids)
    counter = (call.session_id, call.is_subagent)
    turns[counter] = turns.get(counter, 0) + 1
    start, end = parse_iso(call.first_ts), parse_iso(call.last_ts)
    cost = call.cost_usd if call.cost_usd is not None else price(call.model, usage, call.provider)
    row = {
        "span_id": stable_id(NAME, call.session_id, *call.key),
        "run_id": f"{NAME}:{call.session_id}",
        "source": SOURCE,
        "service_name": SERVICE,
        "task_type": session.task_type,
        "operation_name": semconv.OPERATION_CHAT,
        "provider_name": call.provider,
        "request_model": call.model,
        "response_model": call.model,
        "start_utc": start,
        "end_utc": end,
        "duration_s": seconds_between(start, end),
        "turn": turns[counter],
        "cost_usd": cost if usage is not None or call.cost_usd is not None else None,
        "is_subagent": call.is_subagent,
        **usage_columns(usage),
    }
    return "call", row


FORMAT = ImporterFormat(
    name=NAME,
    description="Claude Code session JSONL (project folders with sessions and subagent files)",
    patterns=("*.jsonl",),
    read=read,
)
