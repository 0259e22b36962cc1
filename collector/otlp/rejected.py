"""What a rejected span leaves behind: a mark on the run it belonged to (design §4).

A span with a bad value is rejected alone (named in OTLP ``partial_success``), none of its
values is stored. So that its run does not look clean and complete without it, the span's
place is kept by a stub row carrying the quality flag ``rejected_span``
(``budgetlens.semconv.QUALITY_FLAGS``):

- a model-call span → a ``model_calls`` row with NULL token counts and usage_status ``unknown``
  (its run's usage is then ``unknown``, never ``reported`` with tokens missing);
- the guard's run span (or a foreign root span) → a ``run_records`` row with only its identity
  and times (no limits, no stop reason: they were in the rejected span);
- any other span (a tool span) leaves nothing.

The stub's run id is resolved as the mapping resolves it (``budgetlens.run_id`` when valid,
else the nearest named ancestor's run, else the trace id).
"""

from __future__ import annotations

from typing import Any

from budgetlens import semconv as sc
from budgetlens.otlp.attributes import USAGE_KEYS
from budgetlens.otlp.rows import CALL_KEYS, ROOT_RECORD_KEYS, Row
from budgetlens.otlp.span_rows import SpanContext, is_text

#: The quality flag of a run (and of the stub call) one of whose spans was rejected.
REJECTED_SPAN = "rejected_span"
_AGENT_KINDS = ("AGENT", "CHAIN")


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
