"""OpenHands event histories: the names of the format, its stop reasons, the tool calls and time
span of an event list (an evaluation line's ``history`` or a runtime trajectory), and the rows of a
runtime trajectory file (``trajectory_rows``). ``budgetlens.importers.openhands`` (the format,
quirks in its docstring) reads evaluation output and calls this for trajectories.
"""

from __future__ import annotations

from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImportOptions
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import (
    from_unix,
    parse_iso,
    price,
    provider_from_model,
    seconds_between,
    stable_id,
    usage_columns,
)
from budgetlens.importers.validation import as_dict, source_usage, text

NAME = "openhands"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SERVICE = "openhands"
SKIP_REPEATED_RESPONSE = "repeated model_response on an action or observation"


def run_identity(run_id: str, task_type: str) -> dict[str, str]:
    """The columns every call row and run record of one OpenHands run share."""
    return {"run_id": run_id, "source": SOURCE, "service_name": SERVICE, "task_type": task_type}


def stop_reason(error: object, final_state: str | None = None) -> str:
    """Map an OpenHands ``error`` (or the final agent state of a trajectory) to a stop reason."""
    text = str(error or "").lower()
    if not text:
        return semconv.STOP_FAILED if final_state == "error" else semconv.STOP_COMPLETED
    if "maximum iteration" in text:
        return semconv.STOP_BUDGET_TURNS
    if "budget" in text:
        return semconv.STOP_BUDGET_COST
    return semconv.STOP_FAILED


def history_span(history: object) -> tuple:
    """(first, last) event timestamp of an event list (naive UTC), (None, None) without any."""
    stamps = (
        [parse_iso(e.get("timestamp")) for e in history if isinstance(e, dict)]
        if isinstance(history, list)
        else []
    )
    known = [s for s in stamps if s is not None]
    return (min(known), max(known)) if known else (None, None)


#: Actions that run a tool (OpenHands ``ActionType``): counted even without
#: ``tool_call_metadata`` (the resolver's older CodeAct output has none). ``message``,
#: ``finish``, ``think``, ``system``, ``recall`` and state changes are not tool runs by themselves.
TOOL_ACTIONS = frozenset(
    {
        "run",
        "run_ipython",
        "edit",
        "str_replace_editor",
        "browse",
        "browse_interactive",
        "read",
        "write",
        "mcp",
    }
)


def tool_calls(events: object) -> int | None:
    """The tool calls of a run's events (``history`` or a trajectory), None without an event list.

    An agent action event is a tool call when it carries ``tool_call_metadata`` (a function call
    of the model: each ``tool_call_id`` counted once) or when its ``action`` is in
    ``TOOL_ACTIONS``. Observations (``observation`` events, which repeat the metadata) and
    user/environment events are not counted.
    """
    if not isinstance(events, list):
        return None
    ids, plain = set(), 0
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("action") is None:
            continue
        if event.get("source") not in (None, "agent"):
            continue
        meta = event.get("tool_call_metadata")
        if isinstance(meta, dict):
            ids.add(meta.get("tool_call_id") or ("event", index))
        elif event.get("action") in TOOL_ACTIONS:
            plain += 1
    return len(ids) + plain


def trajectory_rows(path: Path, events: list, options: ImportOptions, report: ImportReport):
    """Yield the ("call", row) items and the ("record", row) of one runtime trajectory file
    (``events``: its JSON array); repeated ``model_response`` ids are skipped."""
    first_ts = next((e.get("timestamp") for e in events if isinstance(e, dict)), None)
    run_id = f"{NAME}:{path.stem}:{stable_id(path.stem, first_ts)[:12]}"
    task_type = options.task_type or SERVICE
    seen: set = set()
    calls = 0
    final_state = None
    models = []
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            report.bad_line(path, None, f"events[{index}] is not an object")
            continue
        if event.get("observation") == "agent_state_changed":
            extras = as_dict(event.get("extras"))
            final_state = extras.get("agent_state") or final_state
        meta = event.get("tool_call_metadata")
        response = meta.get("model_response") if isinstance(meta, dict) else None
        if not isinstance(response, dict):
            continue
        name = f"events[{index}].tool_call_metadata.model_response"
        response_id = text(response.get("id"), f"{name}.id")
        if response_id in seen:
            report.skip(SKIP_REPEATED_RESPONSE)
            continue
        seen.add(response_id)
        model = text(response.get("model"), f"{name}.model")
        models.append(model)
        usage = source_usage(response.get("usage"), f"{name}.usage")
        when = parse_iso(event.get("timestamp")) or from_unix(response.get("created"))
        provider = provider_from_model(model)
        calls += 1
        yield (
            "call",
            {
                **run_identity(run_id, task_type),
                "operation_name": semconv.OPERATION_CHAT,
                "span_id": stable_id(run_id, response_id, index if response_id is None else ""),
                "provider_name": provider,
                "request_model": model,
                "response_model": model,
                "start_utc": when,
                "end_utc": when,
                "turn": calls,
                **price(model, usage, provider, when),
                **usage_columns(usage),
            },
        )
    start, end = history_span(events)
    yield (
        "record",
        {
            **run_identity(run_id, task_type),
            "agent_name": SERVICE,
            "model": models[0] if models else None,
            "start_utc": start,
            "end_utc": end,
            "duration_s": seconds_between(start, end),
            "tool_calls": tool_calls(events),
            "stop_reason": stop_reason(None, final_state),
            "usage_status": None if calls else semconv.USAGE_UNKNOWN,
        },
    )
