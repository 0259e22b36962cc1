"""OpenHands evaluation output (``output.jsonl``: one run per line) and runtime trajectories
(``*.json``: a JSON array of events, one run per file, loaded whole).

Evaluation output lines are ``{instance_id, metadata, history, metrics, error, ...}`` (and the
issue resolver's ``{issue, metrics, success, error, ...}``). Quirks handled (SOURCES.md §5):

- ``metrics.token_usages`` is the per-call list (one call each; ``prompt_tokens`` includes cache
  reads and writes). The ``llm_metrics`` snapshots inside ``history`` are cumulative and ignored.
- ``response_latencies`` may hold more entries than ``token_usages``: a latency whose
  ``response_id`` has no usage is a call that failed or had no usage -> a call with unknown usage.
  Latencies are seconds and become the calls' ``duration_s``.
- ``metrics.costs`` are per-call costs (floats, or ``{cost, ...}``); the run's cost is
  ``accumulated_cost``. When ``accumulated_cost`` is 0 with no cost entries although tokens are
  present, the model was unpriced by OpenHands: calls are priced with ``budgetlens.pricing``
  instead and the run cost is NULL when that fails too (never $0).
- Resolver runs have costs but no tokens: their calls have unknown usage and the source's cost.
- ``accumulated_token_usage.model`` is the placeholder ``default``: models come from the calls.
- Tool calls are counted from ``history`` (``openhands_history.tool_calls``): agent actions with
  ``tool_call_metadata`` or a tool action (``TOOL_ACTIONS``: the resolver's output has no
  metadata); a line without ``history`` has unknown tool calls (NULL, never 0).

Runtime trajectories repeat the same ``model_response`` (same id and usage) on an action, its
observation and every action of a multi-tool response: calls are deduplicated by
``model_response.id``.

A line (or trajectory file) with a malformed value (a cost or token count that is NaN, infinite
or negative, an id or model that is not a string, a list that is not a list) is reported as
``file:line: reason`` and skipped whole. A file with no OpenHands run is listed as a file that
held no run of this format.

Stop reason: no error -> completed; "maximum iteration" -> budget_turns; "budget" ->
budget_cost; any other error -> failed. Task type: ``--task-type``, else the benchmark from
``metadata.dataset`` (its last ``__`` segment without ``.jsonl``), else ``openhands-resolver`` or
``openhands``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from budgetlens import semconv
from budgetlens.importers.base import ImporterFormat, ImportOptions
from budgetlens.importers.openhands_history import (  # noqa: F401  (re-exported)
    NAME,
    SERVICE,
    SKIP_REPEATED_RESPONSE,
    SOURCE,
    TOOL_ACTIONS,
    history_span,
    run_identity,
    stop_reason,
    tool_calls,
    trajectory_rows,
)
from budgetlens.importers.reading import iter_json_lines, load_json_document
from budgetlens.importers.report import ImportReport
from budgetlens.importers.rows import (
    parse_iso,
    price,
    provider_from_model,
    seconds_between,
    source_cost,
    stable_id,
    usage_columns,
)
from budgetlens.importers.validation import as_dict, checked_rows, source_number, source_usage, text

log = logging.getLogger(__name__)

SKIP_NOT_A_RUN = "line without OpenHands metrics (not an evaluation output run)"
SKIP_NOT_TRAJECTORY = "JSON file that is not an event array (not a runtime trajectory)"


def benchmark(metadata: object) -> str | None:
    """The benchmark of an evaluation run from ``metadata.dataset`` (or None)."""
    if not isinstance(metadata, dict):
        return None
    dataset = metadata.get("dataset")
    if not isinstance(dataset, str) or not dataset:
        return None
    name = dataset.rsplit("__", 1)[-1]
    for ext in (".jsonl", ".json"):
        name = name.replace(ext, "")
    return name or None


def read(paths: Sequence[Path], options: ImportOptions, report: ImportReport) -> Iterator[tuple]:
    """Yield calls and one run record per evaluation line or runtime trajectory file."""
    for path in paths:
        report.files += 1
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            runs = 0
            for lineno, obj in iter_json_lines(path, report, options.max_line_bytes):
                if "metrics" not in obj:
                    report.skip(SKIP_NOT_A_RUN)
                    continue
                runs += 1
                yield from checked_rows(report, path, lineno, _eval_run(path, lineno, obj, options, report))
            if not runs:
                report.files_without_runs.append(str(path))
        else:
            events = load_json_document(path, report, options.max_line_bytes)
            if events is None:
                continue
            if not isinstance(events, list):  # e.g. metadata.json beside output.jsonl
                report.skip(SKIP_NOT_TRAJECTORY)
                report.files_without_runs.append(str(path))
                continue
            yield from checked_rows(report, path, None, trajectory_rows(path, events, options, report))


def _objects(value: object, name: str) -> list:
    """A list of objects from a source field (None -> []); raises ValueError naming the field."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list, got {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{name}[{index}] must be an object, got {type(item).__name__}")
    return value


def _cost_of(entry: object, name: str) -> float | None:
    if isinstance(entry, dict):
        return source_number(entry.get("cost"), f"{name}.cost")
    return source_number(entry, name)


def _eval_run(path: Path, lineno: int, obj: dict, options: ImportOptions, report: ImportReport):
    """The call rows and the run record of one evaluation-output line (raises ValueError)."""
    metrics = obj["metrics"]
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics must be an object, got {type(metrics).__name__}")
    metadata = as_dict(obj.get("metadata"))
    run_id, configured_model, task_type = _eval_identity(path, lineno, obj, metadata, options)
    base = {
        **run_identity(run_id, task_type),
        "operation_name": semconv.OPERATION_CHAT,
    }
    calls, accumulated, source_priced = yield from _eval_calls(metrics, base, run_id, configured_model)
    if not calls:
        report.skip("OpenHands run without model calls")
    start, end = history_span(obj.get("history"))
    start = start or parse_iso(metadata.get("start_time"))
    yield (
        "record",
        {
            **run_identity(run_id, task_type),
            "agent_name": text(metadata.get("agent_class"), "metadata.agent_class") or SERVICE,
            "model": configured_model,
            "start_utc": start,
            "end_utc": end,
            "duration_s": seconds_between(start, end),
            "tool_calls": tool_calls(obj.get("history")),
            "cost_usd": accumulated if source_priced else None,
            "stop_reason": stop_reason(obj.get("error")),
            "usage_status": None if calls else semconv.USAGE_UNKNOWN,
        },
    )


def _eval_identity(
    path: Path, lineno: int, obj: dict, metadata: dict, options: ImportOptions
) -> tuple[str, str | None, str]:
    """(run id, configured model, task type) of an evaluation-output line."""
    issue = obj.get("issue") if isinstance(obj.get("issue"), dict) else None
    instance_id = obj.get("instance_id")
    if instance_id is not None and (isinstance(instance_id, bool) or not isinstance(instance_id, (str, int))):
        raise ValueError(f"instance_id must be a string, got {type(instance_id).__name__}")
    if instance_id:
        instance = str(instance_id)
    elif issue:
        instance = f"{issue.get('owner')}/{issue.get('repo')}#{issue.get('number')}"
    else:
        instance = f"{path.name}:{lineno}"
    llm = as_dict(metadata.get("llm_config"))
    configured_model = text(llm.get("model"), "metadata.llm_config.model")
    run_key = stable_id(
        instance, metadata.get("eval_output_dir"), configured_model, metadata.get("start_time")
    )
    run_id = f"{NAME}:{instance}:{run_key[:12]}"
    task_type = options.task_type or benchmark(metadata) or ("openhands-resolver" if issue else SERVICE)
    return run_id, configured_model, task_type


def _eval_calls(metrics: dict, base: dict, run_id: str, configured_model: str | None):
    """Yield the call rows of ``metrics``; return (calls, accumulated cost, whether the source
    priced the run)."""
    usages = _objects(metrics.get("token_usages"), "metrics.token_usages")
    raw_costs = metrics.get("costs")
    if raw_costs is not None and not isinstance(raw_costs, list):
        raise ValueError(f"metrics.costs must be a list, got {type(raw_costs).__name__}")
    costs = [_cost_of(c, f"metrics.costs[{i}]") for i, c in enumerate(raw_costs or [])]
    latencies: dict[str | None, dict] = {}
    for i, entry in enumerate(_objects(metrics.get("response_latencies"), "metrics.response_latencies")):
        name = f"metrics.response_latencies[{i}]"
        text(entry.get("model"), f"{name}.model")
        source_number(entry.get("latency"), f"{name}.latency")
        latencies[text(entry.get("response_id"), f"{name}.response_id")] = entry
    accumulated = source_number(metrics.get("accumulated_cost"), "metrics.accumulated_cost")
    source_priced = bool(costs) or bool(accumulated)
    per_call_costs = costs if len(costs) == max(len(usages), len(costs)) else []

    calls = 0
    seen_ids = set()
    for index, entry in enumerate(usages):
        name = f"metrics.token_usages[{index}]"
        model = text(entry.get("model"), f"{name}.model") or configured_model
        provider = provider_from_model(model)
        usage = source_usage(entry, name)
        response_id = text(entry.get("response_id"), f"{name}.response_id") or None
        seen_ids.add(response_id)
        latency = (
            source_number((latencies.get(response_id) or {}).get("latency"), "latency")
            if response_id
            else None
        )
        if per_call_costs:
            cost = source_cost(per_call_costs[index], usage)
        else:
            cost = (
                source_cost(None, usage)
                if source_priced
                else price(model, usage, provider, base.get("start_utc"))
            )
        calls += 1
        yield (
            "call",
            {
                **base,
                "span_id": stable_id(run_id, "token_usage", index, response_id),
                "provider_name": provider,
                "request_model": configured_model,
                "response_model": model,
                "duration_s": latency,
                "turn": calls,
                **cost,
                **usage_columns(usage),
            },
        )
    # Calls with a latency but no usage (failed mid-way), or with a cost but no tokens (resolver).
    unmatched = [entry for rid, entry in latencies.items() if rid not in seen_ids]
    extra = max(len(unmatched), len(costs) - len(usages))
    for index in range(extra):
        pending: dict = unmatched[index] if index < len(unmatched) else {}
        cost_index = len(usages) + index
        calls += 1
        yield (
            "call",
            {
                **base,
                "span_id": stable_id(run_id, "no_usage", index, pending.get("response_id")),
                "provider_name": provider_from_model(pending.get("model") or configured_model),
                "request_model": configured_model,
                "response_model": pending.get("model"),
                "duration_s": source_number(pending.get("latency"), "latency"),
                "turn": calls,
                "cost_usd": costs[cost_index] if cost_index < len(costs) else None,
                **usage_columns(None),
            },
        )
    return calls, accumulated, source_priced


FORMAT = ImporterFormat(
    name=NAME,
    description="OpenHands evaluation output JSONL (metrics: token_usages, accumulated_cost) "
    "and runtime trajectory JSON",
    patterns=("*.jsonl", "*.json"),
    read=read,
)
