"""OpenTelemetry spans and span events of a guarded run (design §4), through the OTel API only.

- Run span ``invoke_agent {task_type}`` (INTERNAL): run id, task type, agent name, the limits,
  the attribution (``budgetlens.service``/``team``/``user``/``session_id``/``tag.<key>``);
  at the end turns, tool calls, used tokens (unknown-usage charges included), ``gen_ai.usage.*``
  totals over the calls that reported usage (omitted when none did), cost = the sum of the priced
  calls (omitted when none was priced), stop reason, usage status, retryable; status ERROR when
  the stop reason is ``failed``.
- Model-call span ``chat {model}`` (CLIENT, child of the run span) per recorded call.
- Span events on the run span: warning, downgrade, summarize, tool_call, stop, limit_changed,
  alert.

Attribute names come only from :mod:`budgetlens.semconv`. Never prompts, completions, messages,
tool arguments or results. With no SDK configured the tracer is a no-op: attributes are only
built when the span is recording, so the cost is a few attribute lookups.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from budgetlens import semconv as sc
from budgetlens.attribution import Attribution
from budgetlens.guard.calls import RecordedCall
from budgetlens.guard.results import BudgetEvent, RunResult
from budgetlens.limits import LIMITS
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

TRACER_NAME = "budgetlens"

_LIMIT_ATTRIBUTES = tuple((spec.name, spec.span_attribute) for spec in LIMITS)


def usage_attributes(usage: Usage) -> dict[str, int]:
    """``gen_ai.usage.*`` attributes of a usage (tokens); parts under their own names. A
    provider total that disagrees with the parts goes out as ``llm.usage.total_tokens`` so the
    collector keeps it beside them and flags the call (``total_mismatch``)."""
    attributes = {
        sc.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
        sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_write_tokens,
        sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
    }
    if usage.provider_total_tokens is not None:
        attributes[sc.LLM_USAGE_TOTAL_TOKENS] = usage.provider_total_tokens
    return attributes


def attribution_attributes(attribution: Attribution) -> dict[str, str]:
    """The run span's attribution attributes: ``budgetlens.service``/``team``/``user``/
    ``session_id`` (when set) and one ``budgetlens.tag.<key>`` per tag."""
    out = {
        name: value
        for name, value in (
            (sc.BUDGET_SERVICE, attribution.service),
            (sc.BUDGET_TEAM, attribution.team),
            (sc.BUDGET_USER, attribution.user),
            (sc.BUDGET_SESSION_ID, attribution.session_id),
        )
        if value is not None
    }
    for key, value in attribution.tags.items():
        out[sc.BUDGET_TAG_PREFIX + key] = value
    return out


class RunTelemetry:
    """Emits one run's spans and events. Created by ``RunBudget``; never raises into the agent."""

    __slots__ = ("_tracer", "_span", "_context", "_recording", "_run_id", "_task_type")

    def __init__(
        self,
        tracer: trace.Tracer | None,
        run_id: str,
        task_type: str,
        agent_name: str | None,
        limits: dict[str, Any],
        attribution: Attribution | None = None,
    ) -> None:
        if tracer is None:
            from budgetlens.guard.otel_setup import auto_configure

            auto_configure()  # OTEL_EXPORTER_OTLP_ENDPOINT alone sends the spans (once per process)
        self._tracer = tracer if tracer is not None else trace.get_tracer(TRACER_NAME)
        self._run_id, self._task_type = run_id, task_type
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
            sc.BUDGET_RUN_ID: run_id,
            sc.BUDGET_TASK_TYPE: task_type,
        }
        if agent_name:
            attributes[sc.GEN_AI_AGENT_NAME] = agent_name
        for key, name in _LIMIT_ATTRIBUTES:
            if limits.get(key) is not None:
                attributes[name] = limits[key]
        if attribution is not None:
            attributes.update(attribution_attributes(attribution))
        self._span = self._tracer.start_span(
            f"{sc.OPERATION_INVOKE_AGENT} {task_type}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        self._recording = self._span.is_recording()
        self._context = trace.set_span_in_context(self._span)

    @property
    def recording(self) -> bool:
        """True when spans are recorded (an SDK is configured and the run is sampled)."""
        return self._recording

    @property
    def span(self) -> trace.Span:
        """The run span (to parent the agent's own spans: ``trace.use_span(run.span)``)."""
        return self._span

    def set_limits(self, limits: dict[str, Any]) -> None:
        if self._recording:
            for key, name in _LIMIT_ATTRIBUTES:
                if limits.get(key) is not None:
                    self._span.set_attribute(name, limits[key])

    def model_call(
        self,
        call: RecordedCall,
        response_model: str | None,
        provider: str | None,
        usage_status: str | None,
        error_type: str | None,
    ) -> None:
        """Emit one ``chat {model}`` span for ``call`` (a recorded call: model, start, usage, tokens
        reserved, used and remaining, cost), child of the run span, ending now. One span with one
        attribute set, given at its start (no events, no context attach)."""
        if not self._recording:
            return  # no SDK, or the run is not sampled: its children would not be either
        model, usage = call.model, call.usage
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
            sc.BUDGET_RUN_ID: self._run_id,
            sc.BUDGET_TASK_TYPE: self._task_type,
            sc.BUDGET_TURN: call.turn,
            sc.BUDGET_RESERVED_TOKENS: call.reserved_tokens,
            sc.BUDGET_USED_TOKENS: call.used_tokens,
            sc.BUDGET_USAGE_STATUS: usage_status
            or (sc.USAGE_UNKNOWN if usage is None else sc.USAGE_REPORTED),
        }
        if call.remaining_tokens is not None:
            attributes[sc.BUDGET_REMAINING_TOKENS] = call.remaining_tokens
        if provider:
            attributes[sc.GEN_AI_PROVIDER_NAME] = provider
        if model:
            attributes[sc.GEN_AI_REQUEST_MODEL] = model
        if response_model or model:
            attributes[sc.GEN_AI_RESPONSE_MODEL] = response_model or model
        if usage is not None:
            attributes.update(usage_attributes(usage))
        if call.cost_usd is not None:
            attributes[sc.BUDGET_COST_USD] = call.cost_usd
        if error_type:
            attributes[sc.ERROR_TYPE] = error_type
        span = self._tracer.start_span(
            f"{sc.OPERATION_CHAT} {model or 'unknown'}",
            context=self._context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=call.start_ns,
        )
        if error_type:
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()

    def event(self, event: BudgetEvent) -> None:
        """Add a budget event to the run span."""
        if not self._recording:
            return
        attributes: dict[str, Any] = {
            sc.BUDGET_USED_TOKENS: event.used_tokens,
            sc.BUDGET_PERCENT: event.percent,
        }
        if event.remaining_tokens is not None:
            attributes[sc.BUDGET_REMAINING_TOKENS] = event.remaining_tokens
        if event.reason:
            attributes[sc.BUDGET_REASON] = event.reason
        if event.from_model:
            attributes[sc.BUDGET_FROM_MODEL] = event.from_model
        if event.to_model:
            attributes[sc.BUDGET_TO_MODEL] = event.to_model
        if event.tool_name:
            attributes[sc.GEN_AI_TOOL_NAME] = event.tool_name
        if event.model:
            attributes[sc.GEN_AI_REQUEST_MODEL] = event.model
        if event.previous_limit is not None:
            attributes[sc.BUDGET_PREVIOUS_LIMIT] = event.previous_limit
        if event.new_limit is not None:
            attributes[sc.BUDGET_NEW_LIMIT] = event.new_limit
        if event.changed_by:
            attributes[sc.BUDGET_CHANGED_BY] = event.changed_by
        if event.tool_cost_usd is not None:
            attributes[sc.BUDGET_TOOL_COST_USD] = event.tool_cost_usd
        self._span.add_event(event.name, attributes=attributes, timestamp=time.time_ns())

    def finish(
        self,
        result: RunResult,
        limits: dict[str, Any],
        usage_known: bool = True,
        model_cost_usd: float | None = None,
    ) -> None:
        """Set the run's end attributes and end the run span (idempotence is the caller's).

        ``usage_known``: False when no call reported usage; the ``gen_ai.usage.*`` totals are then
        omitted (unknown, never 0; ``budgetlens.used_tokens`` still carries the charges), so the
        collector does not store 0 tokens for the run. ``budgetlens.cost_usd`` is the model cost
        (``model_cost_usd``, default ``result.cost_usd``; None is omitted likewise) and
        ``budgetlens.tool_cost_usd`` the paid tools' fees (USD), kept apart."""
        if self._recording:
            self.set_limits(limits)
            attributes: dict[str, Any] = {
                sc.BUDGET_TURNS: result.turns,
                sc.BUDGET_TOOL_CALLS: result.tool_calls,
                sc.BUDGET_USED_TOKENS: result.used_tokens,
                sc.BUDGET_STOP_REASON: result.stop_reason,
                sc.BUDGET_USAGE_STATUS: result.usage_status,
                sc.BUDGET_RETRYABLE: result.retryable,
                sc.BUDGET_DOWNGRADES: result.downgrades,
            }
            if math.isfinite(result.utilization):  # infinite: something used under a limit of 0
                attributes[sc.BUDGET_UTILIZATION] = result.utilization
            if result.unconfirmed_effects:
                attributes[sc.BUDGET_UNCONFIRMED_EFFECTS] = list(result.unconfirmed_effects)
            if usage_known:
                attributes.update(usage_attributes(result.usage))
            model_cost = result.cost_usd if model_cost_usd is None else round(model_cost_usd, 9)
            if result.cost_usd is not None and model_cost is not None:
                attributes[sc.BUDGET_COST_USD] = model_cost
            attributes[sc.BUDGET_TOOL_COST_USD] = result.tool_cost_usd
            if result.error_type:
                attributes[sc.ERROR_TYPE] = result.error_type
            self._span.set_attributes(attributes)
            if result.stop_reason == sc.STOP_FAILED:
                self._span.set_status(Status(StatusCode.ERROR, result.error_type or "failed"))
        self._span.end()
