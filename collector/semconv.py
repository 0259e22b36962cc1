"""Attribute, span and event names of the telemetry contract (design §4), defined once.

The guard emits these names; the collector, the in-process exporter and the importers read them.
Standard names follow the OpenTelemetry GenAI semantic conventions; budgetlens's own attributes
live in the ``budgetlens.`` namespace.
"""

from __future__ import annotations

# --- OpenTelemetry GenAI semantic conventions (current names) --------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
#: The cache-creation count's newer name (semantic-conventions-genai #440); both are read, the
#: first present wins (never added twice).
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
#: A call's cost as the source states it (proposed, semantic-conventions-genai #443): kept as the
#: call's cost (read when the currency is USD or absent), never repriced.
GEN_AI_USAGE_COST_AMOUNT = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY = "gen_ai.usage.cost.currency"
#: The service tier a call was served at, every spelling the instrumentations emit: response
#: first (the tier used), then request (the tier asked for; ``auto`` means not known).
SERVICE_TIER_RESPONSE_ATTRIBUTES = (
    "openai.response.service_tier",
    "gen_ai.openai.response.service_tier",
    "gen_ai.response.service_tier",
)
SERVICE_TIER_REQUEST_ATTRIBUTES = (
    "openai.request.service_tier",
    "gen_ai.openai.request.service_tier",
    "gen_ai.request.service_tier",
)
SERVICE_NAME = "service.name"
#: Who a call or run is for (OTel general conventions; OpenInference uses the same two names).
USER_ID = "user.id"
SESSION_ID = "session.id"
ENDUSER_ID = "enduser.id"
ENDUSER_PSEUDO_ID = "enduser.pseudo.id"
#: The GenAI conventions' conversation (a session of a chat).
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"

#: gen_ai.operation.name values used by budgetlens spans.
OPERATION_INVOKE_AGENT = "invoke_agent"
OPERATION_CHAT = "chat"
OPERATION_EXECUTE_TOOL = "execute_tool"

# --- budgetlens namespace ------------------------------------------------------------------
BUDGET_RUN_ID = "budgetlens.run_id"
BUDGET_TASK_TYPE = "budgetlens.task_type"
BUDGET_TURN = "budgetlens.turn"
#: Attribution on the run span (and read from any span or resource): see budgetlens.attribution.
#: ``budgetlens.tenant`` is ``budgetlens.team``'s other name; tags are ``budgetlens.tag.<key>``.
BUDGET_SERVICE = "budgetlens.service"
BUDGET_TEAM = "budgetlens.team"
BUDGET_TENANT = "budgetlens.tenant"
BUDGET_USER = "budgetlens.user"
BUDGET_SESSION_ID = "budgetlens.session_id"
BUDGET_TAG_PREFIX = "budgetlens.tag."
BUDGET_TURNS = "budgetlens.turns"
BUDGET_TOOL_CALLS = "budgetlens.tool_calls"
BUDGET_RESERVED_TOKENS = "budgetlens.reserved_tokens"
BUDGET_USED_TOKENS = "budgetlens.used_tokens"
BUDGET_REMAINING_TOKENS = "budgetlens.remaining_tokens"
BUDGET_STOP_REASON = "budgetlens.stop_reason"
BUDGET_USAGE_STATUS = "budgetlens.usage_status"
BUDGET_COST_USD = "budgetlens.cost_usd"
#: Fees of paid tools (USD), kept apart from model cost: on a ``budgetlens.tool_call`` event (that
#: call's fee) and on the run span (the run's sum); ``budgetlens.cost_usd`` stays model cost.
BUDGET_TOOL_COST_USD = "budgetlens.tool_cost_usd"
BUDGET_RETRYABLE = "budgetlens.retryable"
#: On a child run's span (``RunBudget.child``): the run id of the run whose budget it was carved from.
BUDGET_PARENT_RUN_ID = "budgetlens.parent_run_id"
BUDGET_LIMIT_TOTAL_TOKENS = "budgetlens.limit.total_tokens"
BUDGET_LIMIT_INPUT_TOKENS = "budgetlens.limit.input_tokens"
BUDGET_LIMIT_OUTPUT_TOKENS = "budgetlens.limit.output_tokens"
BUDGET_LIMIT_TURNS = "budgetlens.limit.turns"
BUDGET_LIMIT_TOOL_CALLS = "budgetlens.limit.tool_calls"
BUDGET_LIMIT_DURATION_S = "budgetlens.limit.duration_s"
BUDGET_LIMIT_COST_USD = "budgetlens.limit.cost_usd"
#: On events: model names for a downgrade, the threshold crossed (percent, 0-100).
BUDGET_FROM_MODEL = "budgetlens.from_model"
BUDGET_TO_MODEL = "budgetlens.to_model"
BUDGET_PERCENT = "budgetlens.percent"
BUDGET_REASON = "budgetlens.reason"
#: On ``budgetlens.limit_changed`` events: the limit before and after (in its unit), and who
#: changed it (free text given to ``set_max(changed_by=...)``).
BUDGET_PREVIOUS_LIMIT = "budgetlens.previous_limit"
BUDGET_NEW_LIMIT = "budgetlens.new_limit"
BUDGET_CHANGED_BY = "budgetlens.changed_by"
#: On the run span: names of external effects (tool writes) begun and never confirmed.
BUDGET_UNCONFIRMED_EFFECTS = "budgetlens.unconfirmed_effects"
#: On the run span: the most-used token/cost limit's share at the end (1.0 = spent) and the
#: number of model downgrades.
BUDGET_UTILIZATION = "budgetlens.utilization"
BUDGET_DOWNGRADES = "budgetlens.downgrades"
#: ``budgetlens.reason`` of a ``budgetlens.warning`` event: ``max_cost_usd`` is set but a call's
#: model has no price (add one with ``BUDGETLENS_PRICES_FILE``), so its calls do not count against
#: the cost limit. Once per run and model; the run is not stopped. (On ``budgetlens.stop`` events
#: the reason is a stop reason.)
REASON_COST_UNENFORCED = "cost_unenforced"

#: Span event names (design §4: warnings, downgrades, summaries, tool calls and the stop).
EVENT_WARNING = "budgetlens.warning"
EVENT_DOWNGRADE = "budgetlens.downgrade"
EVENT_SUMMARIZE = "budgetlens.summarize"
EVENT_TOOL_CALL = "budgetlens.tool_call"
EVENT_STOP = "budgetlens.stop"
#: A limit changed during the run (``RunBudget.set_max``): ``budgetlens.reason`` is the limit's
#: name, with ``budgetlens.previous_limit`` / ``budgetlens.new_limit`` (omitted for "no limit")
#: and ``budgetlens.changed_by``.
EVENT_LIMIT_CHANGED = "budgetlens.limit_changed"
#: An alert-only limit was reached (``RunBudget(alert_limits=...)``): ``budgetlens.reason`` is the
#: limit's name; the run goes on.
EVENT_ALERT = "budgetlens.alert"
#: The run's final call from its wrap-up slice was admitted (``RunBudget(wrap_up_tokens=...)``):
#: tools removed, output capped to the slice; after that call the run stops ``budget_wrap_up``.
EVENT_WRAP_UP = "budgetlens.wrap_up"
#: A paused run was resumed from its snapshot with an authorized raise (``RunBudget.resume``):
#: ``budgetlens.reason`` is ``authorization``, ``budgetlens.changed_by`` who authorized it and why;
#: each raised limit is also a ``budgetlens.limit_changed`` event with the same ``changed_by``.
EVENT_RESUMED = "budgetlens.resumed"
EVENT_NAMES = (
    EVENT_WARNING,
    EVENT_DOWNGRADE,
    EVENT_SUMMARIZE,
    EVENT_TOOL_CALL,
    EVENT_STOP,
    EVENT_LIMIT_CHANGED,
    EVENT_ALERT,
    EVENT_WRAP_UP,
    EVENT_RESUMED,
)

# --- closed vocabularies -------------------------------------------------------------------
STOP_COMPLETED = "completed"
STOP_BUDGET_TOKENS = "budget_tokens"
STOP_BUDGET_TOOLS = "budget_tools"
STOP_BUDGET_TURNS = "budget_turns"
STOP_BUDGET_TIME = "budget_time"
STOP_BUDGET_COST = "budget_cost"
#: The budget ran out and the run still answered: its final call used the wrap-up slice (a budget
#: stop, counted in the hit rate, and one that returned an answer).
STOP_BUDGET_WRAP_UP = "budget_wrap_up"
STOP_FAILED = "failed"
STOP_REASONS = (
    STOP_COMPLETED,
    STOP_BUDGET_TOKENS,
    STOP_BUDGET_TOOLS,
    STOP_BUDGET_TURNS,
    STOP_BUDGET_TIME,
    STOP_BUDGET_COST,
    STOP_BUDGET_WRAP_UP,
    STOP_FAILED,
)
BUDGET_STOP_REASONS = tuple(r for r in STOP_REASONS if r.startswith("budget_"))

#: usage_status: ``reported`` = the provider reported usage; ``unknown`` = it did not (failed or
#: cut call, stream without usage) and the reservation was kept as a conservative charge;
#: ``partial`` = it lacked a part (input or output), charged from the reservation.
USAGE_REPORTED = "reported"
USAGE_UNKNOWN = "unknown"
#: usage that lacked a part (e.g. input): the missing part is charged from the reservation
USAGE_PARTIAL = "partial"
USAGE_STATUSES = (USAGE_REPORTED, USAGE_UNKNOWN, USAGE_PARTIAL)

#: Data-quality flags (the ``quality`` column of calls, run records and runs; the ``reason``
#: label of ``budgetlens_ingest_flagged_spans_total``): name -> what was repaired.
QUALITY_FLAGS = {
    "future_time": "a timestamp past the receive time (beyond the skew allowance), clamped to it",
    "end_before_start": "the span ended before it started; end set to start (duration 0)",
    "missing_time": "a zero (unset) start or end timestamp, stored as NULL",
    "foreign_usage": "cache parts above input (or reasoning above output): input excluded them; normalized",
    "aggregate_mismatch": "an aggregate span's usage differs from the sum of the calls below it",
    "partial_usage": "a usage lacking its input or output part; the missing part was charged",
    "total_mismatch": "the provider's total differs from input + output; the parts are the usage, the total kept",
    "parent_loop": "the span was its own ancestor (a parent loop); stored as a root, its parent dropped",
    "span_id_collision": "a different span under the ids of one received earlier; rejected, not stored",
    "rejected_span": "a span of the run was rejected (a bad value, named in partial_success); its values are "
    "missing: a rejected call has usage_status unknown, a rejected run span leaves no limits or stop reason",
}

# --- names other instrumentations send (read by the collector's mapping) ---------------------
#: Deprecated GenAI names (semconv before 1.37).
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
#: OpenLLMetry (Traceloop) names.
LLM_USAGE_TOTAL_TOKENS = "llm.usage.total_tokens"
LLM_REQUEST_MODEL = "llm.request.model"
LLM_RESPONSE_MODEL = "llm.response.model"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_OPENLLMETRY = "gen_ai.usage.cache_read_input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_OPENLLMETRY = "gen_ai.usage.cache_creation_input_tokens"
GEN_AI_USAGE_REASONING_TOKENS_OPENLLMETRY = "gen_ai.usage.reasoning_tokens"
#: OpenInference (Arize) names.
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_SYSTEM = "llm.system"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"
LLM_TOKEN_COUNT_CACHE_READ = "llm.token_count.prompt_details.cache_read"
LLM_TOKEN_COUNT_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"
LLM_TOKEN_COUNT_REASONING = "llm.token_count.completion_details.reasoning"
TOOL_NAME = "tool.name"
#: any-agent's non-standard per-call cost parts (USD).
GEN_AI_USAGE_INPUT_COST = "gen_ai.usage.input_cost"
GEN_AI_USAGE_OUTPUT_COST = "gen_ai.usage.output_cost"
#: gen_ai.operation.name values that mean "a model call" (current, older and framework names).
MODEL_CALL_OPERATIONS = ("chat", "text_completion", "generate_content", "call_llm", "completion")

#: ``source`` column of imported rows: ``import:<format>`` (e.g. ``import:claude-code``).
SOURCE_IMPORT_PREFIX = "import:"
