"""SWE-agent ``.traj`` and mini-swe-agent ``.traj.json`` trajectories: one file is one run.

Both are one JSON document per file, so each file is loaded whole (per-run files of kilobytes to
a few MB); large directories are still processed one file at a time.

SWE-agent ``.traj`` (``{environment, trajectory, history, info}``): usage exists only as run
totals in ``info.model_stats`` (``tokens_sent``, ``tokens_received``, ``api_calls``,
``instance_cost``). The run record carries them; no per-call rows are invented. Replayed
demonstrations report zero tokens: that means "no usage recorded", so tokens and cost stay NULL
with usage_status ``unknown`` (never 0). Tool calls = ``len(trajectory)`` (one action per step).

mini-swe-agent ``.traj.json`` (``{info, messages, trajectory_format}``): every assistant message
holds the raw LiteLLM response in ``extra.response`` with its ``usage`` (``prompt_tokens`` includes
cached tokens) and ``extra.cost``. ``info.model_stats.api_calls`` also counts failed calls that
left no message: those become calls with unknown usage (``error_type`` from the exit status). The
run's cost is ``instance_cost`` (equal to the sum of ``extra.cost``).

A file with a malformed value (a cost or token count that is NaN, infinite or negative, a model
that is not a string) is reported as ``file: reason`` and skipped whole.

Exit status -> stop reason: ``submitted`` -> completed; ``exit_cost`` / cost limit -> budget_cost;
``exit_context`` -> budget_tokens; step limit / ``exit_total_execution_time`` -> budget_turns /
budget_time; errors and timeouts -> failed (retryable for server errors and timeouts).

Task type: ``--task-type``, else the benchmark (mini-swe-agent ``agent_type``
``...run.benchmarks.<name>...``; SWE-agent output folders ``<model>__<dataset>__<config>__...``),
else ``swe-agent`` / ``mini-swe-agent``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.reading import load_json_document
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import (
    from_unix,
    price,
    provider_from_model,
    source_cost,
    stable_id,
    usage_columns,
)
from budgetlens.importers.validation import as_dict, checked_rows, source_number, source_usage, text

log = logging.getLogger(__name__)

NAME = "swe-agent"
SOURCE = semconv.SOURCE_IMPORT_PREFIX + NAME
SWE_AGENT = "swe-agent"
MINI = "mini-swe-agent"
SKIP_NOT_TRAJECTORY = "file is not a SWE-agent or mini-swe-agent trajectory"
#: Most calls without a message (failed calls) one mini-swe-agent run may add.
MAX_FAILED_CALLS = 10_000
_RETRYABLE_WORDS = ("internalservererror", "timeout", "ratelimit", "apiconnection", "serviceunavailable")


def stop_reason(
    exit_status: object,
    *,
    steps: int | None = None,
    step_limit: object = None,
    cost: float | None = None,
    cost_limit: object = None,
) -> tuple[str, bool | None]:
    """Map a SWE-agent / mini-swe-agent exit status to (stop reason, retryable).

    ``steps``/``step_limit`` and ``cost``/``cost_limit`` decide which limit a generic
    ``LimitsExceeded`` hit. Unknown statuses that are not errors count as completed.
    """
    text = str(exit_status or "").strip().lower()
    if not text:
        return semconv.STOP_COMPLETED, None
    if "exit_cost" in text or "costlimit" in text:
        return semconv.STOP_BUDGET_COST, False
    if "exit_context" in text or "contextwindow" in text:
        return semconv.STOP_BUDGET_TOKENS, False
    if "exit_total_execution_time" in text:
        return semconv.STOP_BUDGET_TIME, False
    if "limitsexceeded" in text or "steplimit" in text:
        if isinstance(cost_limit, (int, float)) and cost_limit > 0 and (cost or 0) >= cost_limit:
            return semconv.STOP_BUDGET_COST, False
        return semconv.STOP_BUDGET_TURNS, False
    if text.startswith("submitted") or text in ("early_exit", "exit_forfeit"):
        return semconv.STOP_COMPLETED, None
    compact = text.replace(" ", "").replace("_", "")
    retryable = any(word in compact for word in _RETRYABLE_WORDS)
    return semconv.STOP_FAILED, retryable


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield rows for each trajectory file: calls (mini-swe-agent) and one run record."""
    for path in paths:
        report.files += 1
        document = load_json_document(path, report, options.max_line_bytes)
        if document is None:
            continue
        if isinstance(document, dict) and isinstance(document.get("messages"), list):
            yield from checked_rows(report, path, None, _mini(path, document, options, report))
        elif isinstance(document, dict) and isinstance(document.get("trajectory"), list):
            yield from checked_rows(report, path, None, _swe_agent(path, document, options, report))
        else:
            report.skip(SKIP_NOT_TRAJECTORY)
            report.files_without_runs.append(str(path))


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".traj.json", ".traj"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _folder_dataset(path: Path) -> tuple[str | None, str | None]:
    """(model, dataset) from a SWE-agent output folder ``<model>__<dataset>__<config>__t-...``."""
    for folder in (path.parent.name, path.parent.parent.name):
        parts = folder.split("__")
        if len(parts) >= 3 and any(p.startswith("t-") for p in parts):
            return parts[0], parts[1]
    return None, None


def _swe_agent(path: Path, doc: dict, options: ImportOptions, report: ImportReport):
    info = as_dict(doc.get("info"))
    stats = as_dict(info.get("model_stats"))
    model, dataset = _folder_dataset(path)
    sent = source_number(stats.get("tokens_sent"), "info.model_stats.tokens_sent", integer=True)
    received = source_number(stats.get("tokens_received"), "info.model_stats.tokens_received", integer=True)
    api_calls = source_number(stats.get("api_calls"), "info.model_stats.api_calls", integer=True)
    cost = source_number(stats.get("instance_cost"), "info.model_stats.instance_cost")
    known = bool(sent or received)  # replays and demonstrations report 0 tokens: no usage
    reason, retryable = stop_reason(info.get("exit_status"))
    run_id = f"{NAME}:{path.parent.name}/{_stem(path)}"
    yield (
        "record",
        {
            "run_id": run_id,
            "source": SOURCE,
            "service_name": SWE_AGENT,
            "task_type": options.task_type or dataset or SWE_AGENT,
            "agent_name": SWE_AGENT,
            "model": model,
            "turns": int(api_calls) if api_calls is not None else None,
            "tool_calls": len(doc["trajectory"]),
            "input_tokens": int(sent) if known and sent is not None else None,
            "output_tokens": int(received) if known and received is not None else None,
            "total_tokens": int((sent or 0) + (received or 0)) if known else None,
            "cost_usd": cost if known else None,
            "stop_reason": reason,
            "retryable": retryable,
            "usage_status": semconv.USAGE_REPORTED if known else semconv.USAGE_UNKNOWN,
        },
    )


def _mini_task_type(info: dict, path: Path) -> str | None:
    config = as_dict(info.get("config"))
    agent_type = str(config.get("agent_type") or "")
    if ".benchmarks." in agent_type:
        return agent_type.split(".benchmarks.", 1)[1].split(".", 1)[0]
    return _folder_dataset(path)[1]


def _mini(path: Path, doc: dict, options: ImportOptions, report: ImportReport):
    info = as_dict(doc.get("info"))
    stats = as_dict(info.get("model_stats"))
    config = as_dict(info.get("config"))
    model_config = as_dict(config.get("model"))
    agent_config = as_dict(config.get("agent"))
    configured_model = text(model_config.get("model_name"), "info.config.model.model_name")
    exit_status = info.get("exit_status")
    instance = doc.get("instance_id") or _stem(path)
    run_id = f"{MINI}:{path.parent.name}/{_stem(path)}"
    task_type = options.task_type or _mini_task_type(info, path) or MINI
    base = {
        "run_id": run_id,
        "source": SOURCE,
        "service_name": MINI,
        "task_type": task_type,
        "operation_name": semconv.OPERATION_CHAT,
    }
    calls, tool_calls, first, last = yield from _mini_messages(
        doc["messages"], base, run_id, configured_model
    )
    api_calls = source_number(stats.get("api_calls"), "info.model_stats.api_calls", integer=True)
    failed = int(api_calls) - calls if api_calls is not None and api_calls > calls else 0
    if failed > MAX_FAILED_CALLS:
        raise ValueError(
            f"info.model_stats.api_calls is not a plausible run: more than {MAX_FAILED_CALLS} "
            f"calls without a message (api_calls {api_calls}, messages {calls})"
        )
    for extra_index in range(failed):
        calls += 1
        yield (
            "call",
            {
                **base,
                "span_id": stable_id(MINI, run_id, "failed-call", extra_index),
                "provider_name": provider_from_model(configured_model),
                "request_model": configured_model,
                "turn": calls,
                "error_type": str(exit_status or "error"),
                "cost_usd": None,
                **usage_columns(None),
            },
        )
    cost = source_number(stats.get("instance_cost"), "info.model_stats.instance_cost")
    reason, retryable = stop_reason(
        exit_status,
        steps=calls,
        step_limit=agent_config.get("step_limit"),
        cost=cost,
        cost_limit=agent_config.get("cost_limit"),
    )
    yield (
        "record",
        {
            "run_id": run_id,
            "source": SOURCE,
            "service_name": MINI,
            "task_type": task_type,
            "agent_name": MINI,
            "model": configured_model,
            "start_utc": first,
            "end_utc": last,
            "turns": int(api_calls) if api_calls is not None else calls,
            "tool_calls": tool_calls,
            "cost_usd": cost,
            "stop_reason": reason,
            "retryable": retryable,
        },
    )
    log.debug("mini-swe-agent %s: %d calls (%d failed)", instance, calls, failed)


def _mini_messages(messages: list, base: dict, run_id: str, configured_model: str | None):
    """Yield one call row per assistant message; return (calls, tool calls, first, last time)."""
    calls = tool_calls = 0
    first = last = None
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        extra = as_dict(message.get("extra"))
        response = as_dict(extra.get("response"))
        tool_calls += len(message.get("tool_calls") or [])
        name = f"messages[{index}].extra"
        model = text(response.get("model"), f"{name}.response.model") or configured_model
        provider = provider_from_model(configured_model, default=None)
        usage = source_usage(response.get("usage"), f"{name}.response.usage", provider)
        cost = source_number(extra.get("cost"), f"{name}.cost")
        when = from_unix(extra.get("timestamp")) or from_unix(response.get("created"))
        first = when if first is None or (when and when < first) else first
        last = when if last is None or (when and when > last) else last
        calls += 1
        yield (
            "call",
            {
                **base,
                "span_id": stable_id(MINI, run_id, response.get("id"), index),
                "provider_name": provider,
                "request_model": configured_model,
                "response_model": model,
                "start_utc": when,
                "end_utc": when,
                "turn": calls,
                **(source_cost(cost, usage) if cost is not None else price(model, usage, provider, when)),
                **usage_columns(usage),
            },
        )
    return calls, tool_calls, first, last


FORMAT = ImporterFormat(
    name=NAME,
    description="SWE-agent .traj and mini-swe-agent .traj.json trajectories (one run per file)",
    patterns=("*.traj", "*.traj.json"),
    read=read,
)
