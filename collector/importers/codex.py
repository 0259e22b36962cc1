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
  ``output_tokens`` (normalized with ``collector.usage.normalize_usage``).
- The model is only in ``turn_context`` events; each call takes the latest one.
- No cost field exists: calls are priced with ``collector.pricing`` (NULL when unpriced).
- A rollout without any ``token_count`` has unknown usage: its run record says usage_status
  ``unknown`` and its tokens stay NULL.
- A cumulative total that goes down (a counter reset) starts a new baseline: the call's usage is
  that event's ``last_token_usage``.

Tool calls: ``function_call``, ``custom_tool_call``, ``local_shell_call`` and ``web_search_call``
response items. Task type: ``--task-type``, else the basename of the session's ``cwd``, else
``codex``. Codex writes no exit status: the stop reason is ``completed``.
"""

from __future__ import annotations

import logging
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

NAME = "codex"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SERVICE = "codex"
_TOOL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
SKIP_HEARTBEAT = "token_count heartbeat without usage (info: null)"
SKIP_REPEATED_TOTAL = "token_count repeating the previous cumulative total (written twice)"


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


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield ``("call", row)`` per model call and one ``("record", row)`` per rollout file."""
    for path in paths:
        report.files += 1
        yield from _read_file(path, options, report)


def _read_file(path: Path, options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    session_id = None
    cwd = None
    model = None
    provider = "openai"
    first_ts = last_ts = None
    tool_calls = 0
    previous: tuple[int, ...] | None = None
    calls: list[dict] = []  # buffered only until the session id and task type are known
    n_calls = 0
    usage_seen = False

    def finish_row(row: dict) -> dict:
        row["run_id"] = f"{NAME}:{session_id or path.stem}"
        row["span_id"] = stable_id(NAME, session_id or path.stem, row.pop("_identity"))
        row["task_type"] = _task_type(cwd, options)
        return row

    for lineno, obj in iter_json_lines(path, report):
        ts = obj.get("timestamp")
        if isinstance(ts, str):
            first_ts = ts if first_ts is None or ts < first_ts else first_ts
            last_ts = ts if last_ts is None or ts > last_ts else last_ts
        line_type = obj.get("type")
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            if line_type in ("session_meta", "turn_context", "response_item", "event_msg"):
                report.bad_line(path, lineno, f"{line_type} line without a 'payload' object")
            continue
        if line_type == "session_meta":
            session_id = session_id or payload.get("id")
            cwd = cwd or payload.get("cwd")
            provider = payload.get("model_provider") or provider
            continue
        if line_type == "turn_context":
            model = payload.get("model") or model
            cwd = cwd or payload.get("cwd")
            continue
        if line_type == "response_item":
            if payload.get("type") in _TOOL_ITEMS:
                tool_calls += 1
            continue
        if line_type != "event_msg" or payload.get("type") != "token_count":
            continue
        info = payload.get("info")
        if info is None:
            report.skip(SKIP_HEARTBEAT)
            continue
        total = _counts(info.get("total_token_usage") if isinstance(info, dict) else None)
        if total is None:
            report.bad_line(path, lineno, "token_count without a valid total_token_usage")
            continue
        usage_seen = True
        if total == previous:
            report.skip(SKIP_REPEATED_TOTAL)
            continue
        if previous is not None and all(a >= b for a, b in zip(total, previous)):
            delta = dict(zip(_FIELDS, (a - b for a, b in zip(total, previous))))
        elif previous is None:
            delta = dict(zip(_FIELDS, total))
        else:
            log.info("%s:%d: cumulative token total went down; new baseline", path, lineno)
            last = info.get("last_token_usage")
            delta = last if isinstance(last, dict) else dict(zip(_FIELDS, total))
        previous = total
        try:
            usage = normalize_usage(delta, provider="openai")
        except ValueError as error:
            report.bad_line(path, lineno, f"unreadable usage ({error})")
            continue
        n_calls += 1
        when = parse_iso(ts)
        row = {
            "_identity": f"token_count:{lineno}:{ts}",
            "source": SOURCE,
            "service_name": SERVICE,
            "operation_name": semconv.OPERATION_CHAT,
            "provider_name": provider,
            "request_model": model,
            "response_model": model,
            "start_utc": when,
            "end_utc": when,
            "turn": n_calls,
            "cost_usd": price(model, usage, provider),
            **usage_columns(usage),
        }
        if session_id is None and cwd is None:
            calls.append(row)  # no session_meta yet (unusual): wait for it
            continue
        for pending in calls:
            yield "call", finish_row(pending)
        calls.clear()
        yield "call", finish_row(row)
    for pending in calls:
        yield "call", finish_row(pending)
    if first_ts is None and session_id is None and not n_calls:
        report.files_without_runs.append(str(path))
        return
    start, end = parse_iso(first_ts), parse_iso(last_ts)
    yield "record", {
        "run_id": f"{NAME}:{session_id or path.stem}",
        "source": SOURCE,
        "service_name": SERVICE,
        "task_type": _task_type(cwd, options),
        "agent_name": SERVICE,
        "model": model,
        "start_utc": start,
        "end_utc": end,
        "duration_s": seconds_between(start, end),
        "tool_calls": tool_calls,
        "stop_reason": semconv.STOP_COMPLETED,
        "usage_status": None if usage_seen else semconv.USAGE_UNKNOWN,
    }


def _task_type(cwd: str | None, options: ImportOptions) -> str:
    if options.task_type:
        return options.task_type
    if isinstance(cwd, str) and cwd.strip("/\\"):
        return Path(cwd.rstrip("/\\")).name
    return SERVICE


FORMAT = ImporterFormat(
    name=NAME,
    description="Codex CLI rollout JSONL (~/.codex/sessions/**/rollout-*.jsonl)",
    patterns=("rollout-*.jsonl", "*.jsonl"),
    read=read,
)
