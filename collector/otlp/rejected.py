"""What a rejected span leaves behind: a mark on the run it belonged to (design §4).

A span with a bad value is rejected alone (named in OTLP ``partial_success``), none of its
values is stored. So that its run does not look clean and complete without it, the span's
place is kept by a stub row carrying the quality flag ``rejected_span``
(``budgetlens.semconv.QUALITY_FLAGS``):

- a model-call span → a ``model_calls`` row with NULL token counts and usage_status ``unknown``
  (its run's usage is then ``unknown``, never ``reported`` with tokens missing);
- the guard's run span (or a foreign root span) → a ``run_records`` row with only its identity
  and times (no limits, no stop reason: they were in the rejected span);
- any other span (a tool span), a span whose attributes cannot be read, a span rejected for a
  span id collision, and an OTLP/JSON span rejected while decoding (``budgetlens.otlp.decode``)
  leave no row of their own: when their trace id is known, the flag goes on a row of their run
  in the same request instead (its run record, else its first call; ``mark_runs``). A run with
  no row in the request is not marked (the rejection is still counted and named).

The stub's run id is resolved as the mapping resolves it (``budgetlens.run_id`` when valid,
else the nearest named ancestor's run, else the trace id).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from budgetlens import semconv as sc
from budgetlens.limits import run_id_problem
from budgetlens.otlp.attributes import USAGE_KEYS
from budgetlens.otlp.rows import CALL_KEYS, ROOT_RECORD_KEYS, Mapped, Row
from budgetlens.otlp.span_rows import SpanContext, is_text
from budgetlens.otlp.tree import SpanTree

#: The quality flag of a run (and of the stub call) one of whose spans was rejected.
REJECTED_SPAN = "rejected_span"
_AGENT_KINDS = ("AGENT", "CHAIN")


def stub_context(
    source: str, ids: tuple[str, str, str], attrs: dict, service: str | None, times: Any, failed: bool
) -> SpanContext:
    """The ``SpanContext`` of a rejected span: ``ids`` (trace, span, parent hex), its run id
    (``budgetlens.run_id`` when valid, else the trace id; inherited later like any other)."""
    trace_hex, span_hex, parent_hex = ids
    budget_run = named_run(attrs.get(sc.BUDGET_RUN_ID))
    return SpanContext(
        source=source,
        attrs=attrs,
        span_hex=span_hex,
        run_id=budget_run or trace_hex,
        trace_hex=trace_hex,
        parent_hex=parent_hex,
        service=service,
        times=times,
        failed=failed,
        budget_run=budget_run,
    )


def stub_rows(ctx: SpanContext, op: Any, kind: Any, name: str) -> list[tuple[str, Row, list[str]]]:
    """The pending rows ``(table kind, row, flags)`` a rejected span leaves (see the module)."""
    start, end, duration = ctx.times
    agentish = op == sc.OPERATION_INVOKE_AGENT or kind in _AGENT_KINDS
    flags = [REJECTED_SPAN]
    rows: list[tuple[str, Row, list[str]]] = []
    run_span = ctx.budget_run and (op == sc.OPERATION_INVOKE_AGENT or name.startswith("invoke_agent"))
    is_call = not agentish and (
        op in sc.MODEL_CALL_OPERATIONS or kind == "LLM" or not USAGE_KEYS.isdisjoint(ctx.attrs)
    )
    if is_call and not run_span:
        call: Row = dict.fromkeys(CALL_KEYS)
        call.update(
            span_id=ctx.span_hex,
            call_id=f"{ctx.trace_hex}:{ctx.span_hex}",
            run_id=ctx.run_id,
            trace_id=ctx.trace_hex,
            parent_span_id=ctx.parent_hex or None,
            source=ctx.source,
            service_name=ctx.service,
            operation_name=op if is_text(op) else None,
            start_utc=start,
            end_utc=end,
            duration_s=duration,
            usage_status=sc.USAGE_UNKNOWN,
            error_type="_OTHER" if ctx.failed else None,
        )
        rows.append(("call", call, flags))
    if run_span or (not ctx.parent_hex and not ctx.budget_run and (op or kind or is_call)):
        record: Row = dict.fromkeys(ROOT_RECORD_KEYS)
        record.update(
            run_id=ctx.run_id,
            trace_id=ctx.trace_hex,
            source=ctx.source,
            service_name=ctx.service,
            start_utc=start,
            end_utc=end,
            duration_s=duration,
            stop_reason=sc.STOP_FAILED if ctx.failed else None,
        )
        rows.append(("record", record, flags))
    return rows


#: A rejected span that left no row: (trace hex, parent span hex or "", the run it names or None).
Mark = tuple[str, str, str | None]


def named_run(value: Any) -> str | None:
    """``value`` when it is a valid ``budgetlens.run_id`` (:func:`budgetlens.limits.run_id_problem`
    finds nothing wrong), else None."""
    return value if run_id_problem(value) is None else None


def mark_of(span: Any) -> Mark | None:
    """The mark of a rejected protobuf ``Span`` whose trace id is well formed (None otherwise):
    its run id read leniently (the string value of ``budgetlens.run_id``, if any)."""
    trace, parent = span.trace_id, span.parent_span_id
    if len(trace) != 16 or not any(trace):
        return None
    run = None
    for kv in span.attributes:
        if kv.key == sc.BUDGET_RUN_ID and kv.value.WhichOneof("value") == "string_value":
            run = named_run(kv.value.string_value)
    return trace.hex(), parent.hex() if len(parent) == 8 else "", run


def mark_runs(
    marks: Iterable[Mark],
    tree: SpanTree,
    out: Mapped,
    call_flags: dict[int, set[str]],
    record_flags: dict[int, set[str]],
    dropped: set[int],
) -> None:
    """Add ``rejected_span`` to the flags of one row of each marked run in ``out``: its run
    record, else its first call (not one of the ``dropped`` aggregates). The run is the one
    the span names, else its nearest named ancestor's (``SpanTree.run_above``), else the
    trace id. Call after the run inheritance, before the flags are written."""
    records: dict[str, int] = {}
    for index, row in enumerate(out.record_rows):
        records.setdefault(row["run_id"], index)
    calls: dict[str, int] = {}
    for index, row in enumerate(out.call_rows):
        if index not in dropped:
            calls.setdefault(row["run_id"], index)
    for trace_hex, parent_hex, run in marks:
        run = run or tree.run_above(trace_hex, parent_hex) or trace_hex
        if run in records:
            record_flags.setdefault(records[run], set()).add(REJECTED_SPAN)
        elif run in calls:
            call_flags.setdefault(calls[run], set()).add(REJECTED_SPAN)
