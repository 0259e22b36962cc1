"""The allow-list of span attributes the mapping reads, and their readers and validators.

``read_attributes`` turns a repeated OTLP ``KeyValue`` into ``{key: plain value}`` in one pass,
keeping only allow-listed keys (content attributes such as prompts are never materialised).
The validators (``count``, ``amount``, ``choice``, ``text``) check one value and raise
``SpanRejected`` with a message naming the attribute and the rule. Used by
``budgetlens.otlp.mapping``; no I/O.
"""

from __future__ import annotations

import contextlib
import math

from budgetlens import semconv as sc
from budgetlens.limits import LIMITS as GUARD_LIMITS
from budgetlens.limits import MAX_AMOUNT, MAX_TOKENS, model_name_problem
from budgetlens.limits import MAX_COUNT as MAX_INT32

# MAX_TOKENS (token counts, token limits / reserved / used / remaining), MAX_INT32 (turns, tool
# calls and their limits) and MAX_AMOUNT (cost, duration, percent) are the shared contract's
# bounds (budgetlens.limits), the same the guard, the preset file and the importers check.

#: (row field, attribute names in precedence order).
TOKEN_SOURCES = (
    (
        "input_tokens",
        (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS, sc.LLM_TOKEN_COUNT_PROMPT),
    ),
    (
        "output_tokens",
        (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS, sc.LLM_TOKEN_COUNT_COMPLETION),
    ),
    ("total_tokens", (sc.LLM_USAGE_TOTAL_TOKENS, sc.LLM_TOKEN_COUNT_TOTAL)),
    (
        "cache_read_tokens",
        (
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_OPENLLMETRY,
            sc.LLM_TOKEN_COUNT_CACHE_READ,
        ),
    ),
    (
        "cache_write_tokens",
        (
            sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
            sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
            sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_OPENLLMETRY,
            sc.LLM_TOKEN_COUNT_CACHE_WRITE,
        ),
    ),
    (
        "reasoning_tokens",
        (
            sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
            sc.GEN_AI_USAGE_REASONING_TOKENS_OPENLLMETRY,
            sc.LLM_TOKEN_COUNT_REASONING,
        ),
    ),
)
USAGE_KEYS = frozenset(name for _, names in TOKEN_SOURCES for name in names)
#: (record field, attribute, integral?); integral limits are capped by ``limit_maximum``.
LIMITS = tuple((spec.store_column, spec.span_attribute, spec.whole) for spec in GUARD_LIMITS)
_INT32_KEYS = frozenset(
    (sc.BUDGET_TURN, sc.BUDGET_TURNS, sc.BUDGET_TOOL_CALLS, sc.BUDGET_LIMIT_TURNS, sc.BUDGET_LIMIT_TOOL_CALLS)
)


def maximum_of(key: str) -> int:
    """The largest value ``count`` accepts for the count attribute ``key``."""
    return MAX_INT32 if key in _INT32_KEYS else MAX_TOKENS


#: (row column, span or resource attribute names in precedence order) of the attribution
#: (``budgetlens.attribution``): ours first, then the OTel conventions' (``user.id``,
#: ``session.id``, ``enduser.id``, ``enduser.pseudo.id``; OpenInference uses ``user.id`` and
#: ``session.id`` too) and the GenAI conversation id. Tags are ``budgetlens.tag.<key>``.
ATTRIBUTION_SOURCES = (
    ("service_name", (sc.BUDGET_SERVICE,)),
    ("team", (sc.BUDGET_TEAM, sc.BUDGET_TENANT)),
    ("user_id", (sc.BUDGET_USER, sc.USER_ID, sc.ENDUSER_ID, sc.ENDUSER_PSEUDO_ID)),
    ("session_id", (sc.BUDGET_SESSION_ID, sc.SESSION_ID, sc.GEN_AI_CONVERSATION_ID)),
)

EVENT_COUNTS = (
    ("reserved_tokens", sc.BUDGET_RESERVED_TOKENS),
    ("used_tokens", sc.BUDGET_USED_TOKENS),
    ("remaining_tokens", sc.BUDGET_REMAINING_TOKENS),
)
_TEXT_KEYS = (
    sc.GEN_AI_OPERATION_NAME,
    sc.GEN_AI_PROVIDER_NAME,
    sc.GEN_AI_SYSTEM,
    sc.GEN_AI_REQUEST_MODEL,
    sc.GEN_AI_RESPONSE_MODEL,
    sc.GEN_AI_AGENT_NAME,
    sc.GEN_AI_TOOL_NAME,
    sc.ERROR_TYPE,
    sc.OPENINFERENCE_SPAN_KIND,
    sc.LLM_MODEL_NAME,
    sc.LLM_PROVIDER,
    sc.LLM_SYSTEM,
    sc.LLM_REQUEST_MODEL,
    sc.LLM_RESPONSE_MODEL,
    sc.TOOL_NAME,
    sc.BUDGET_RUN_ID,
    sc.BUDGET_PARENT_RUN_ID,
    sc.BUDGET_TASK_TYPE,
    sc.BUDGET_STOP_REASON,
    sc.BUDGET_USAGE_STATUS,
    sc.BUDGET_FROM_MODEL,
    sc.BUDGET_TO_MODEL,
    sc.BUDGET_REASON,
    sc.GEN_AI_USAGE_COST_CURRENCY,
    *sc.SERVICE_TIER_RESPONSE_ATTRIBUTES,
    *sc.SERVICE_TIER_REQUEST_ATTRIBUTES,
    *(key for _, keys in ATTRIBUTION_SOURCES for key in keys),
)
_AMOUNT_KEYS = (
    sc.GEN_AI_USAGE_COST_AMOUNT,
    sc.GEN_AI_USAGE_INPUT_COST,
    sc.GEN_AI_USAGE_OUTPUT_COST,
    sc.BUDGET_COST_USD,
    sc.BUDGET_TOOL_COST_USD,
    sc.BUDGET_PERCENT,
    sc.BUDGET_LIMIT_DURATION_S,
    sc.BUDGET_LIMIT_COST_USD,
)
_COUNT_KEYS = (
    tuple(USAGE_KEYS)
    + tuple(key for _, key, integral in LIMITS if integral)
    + tuple(key for _, key in EVENT_COUNTS)
    + (sc.BUDGET_TURN, sc.BUDGET_TURNS, sc.BUDGET_TOOL_CALLS)
)

#: allow-listed key -> the ``AnyValue`` field its value usually arrives in (the fast path of
#: ``read_attributes``; a value of another type is still read, through ``WhichOneof``).
_USUAL_FIELD = {
    **dict.fromkeys(_TEXT_KEYS, "string_value"),
    **dict.fromkeys(_AMOUNT_KEYS, "double_value"),
    **dict.fromkeys(_COUNT_KEYS, "int_value"),
    sc.BUDGET_RETRYABLE: "bool_value",
}
#: The only span attributes ever read (the allow-list that keeps content out of the store).
ALLOWED_ATTRIBUTES = frozenset(_USUAL_FIELD)


def _shape(value) -> str:
    """What kind of value a rejected attribute held, never the value itself (an attribute may
    carry a secret, and rejection reasons go back to the client and into logs)."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number out of range" if value == value else "NaN"
    return f"a {type(value).__name__}"


TAG_PREFIX = sc.BUDGET_TAG_PREFIX


class SpanRejected(ValueError):
    """One span is invalid; the message names the attribute and the rule."""


def read_attributes(key_values) -> dict:
    """Allow-listed attributes of a repeated ``KeyValue`` as ``{key: str | int | float | bool |
    ArrayValue | KeyValueList | bytes}``; keys outside the allow-list and empty values are
    skipped; a repeated key keeps its last non-empty value.

    Fast path: a truthy value in the key's usual field means the ``value`` oneof holds that
    field, so ``WhichOneof`` is asked only for falsy or differently typed values.
    """
    out = {}
    usual = _USUAL_FIELD.get
    for kv in key_values:
        key = kv.key
        field = usual(key)
        if field is None:
            if key.startswith(TAG_PREFIX):
                tag = kv.value.string_value
                if tag or kv.value.WhichOneof("value") == "string_value":
                    out[key] = tag
            continue
        value = kv.value
        got = getattr(value, field)
        if got:
            out[key] = got
        else:
            which = value.WhichOneof("value")
            if which is not None:
                out[key] = getattr(value, which)
    return out


def count(attrs: dict, key: str, maximum: int | None = None):
    """``attrs[key]`` as an int from 0 to ``maximum`` (default ``maximum_of(key)``: 2^31-1 for
    turns and tool calls, 10^12 for tokens) from an int, integral float or digit string; None
    when absent. Raises SpanRejected otherwise."""
    value = attrs.get(key)
    if value is None:
        return None
    if maximum is None:
        maximum = maximum_of(key)
    kind = type(value)
    number = None
    if kind is int:
        number = value
    elif kind is float:
        if math.isfinite(value) and value.is_integer():
            number = int(value)
    elif kind is str and value.isascii() and value.isdigit() and len(value) <= 20:
        number = int(value)
    if number is not None and 0 <= number <= maximum:
        return number
    got = (
        "a number that is not an integer"
        if kind is float and math.isfinite(value) and number is None
        else None
    )
    raise SpanRejected(
        f"attribute {key} must be a non-negative integer of at most {maximum} (got {got or _shape(value)})"
    )


def first_count(attrs: dict, keys):
    """``count`` of the first of ``keys`` present in ``attrs`` (None when none is)."""
    for key in keys:
        if key in attrs:
            return count(attrs, key)
    return None


#: ``token_counts`` of a span without usage attributes.
NO_TOKENS = (None,) * len(TOKEN_SOURCES)


def token_counts(attrs: dict) -> tuple:
    """Counts in ``TOKEN_SOURCES`` order (None when absent), each from its first name present."""
    if USAGE_KEYS.isdisjoint(attrs):
        return NO_TOKENS
    get = attrs.get
    out = []
    for names in _TOKEN_NAMES:
        found = None
        for key in names:
            value = get(key)  # never None when present (``read_attributes``)
            if value is not None:
                found = (
                    value
                    if type(value) is int and 0 <= value <= MAX_TOKENS
                    else count(attrs, key, MAX_TOKENS)
                )
                break
        out.append(found)
    return tuple(out)


_TOKEN_NAMES = tuple(names for _, names in TOKEN_SOURCES)


def amount(attrs: dict, key: str):
    """``attrs[key]`` as a finite float from 0 to ``MAX_AMOUNT`` (number or numeric string);
    None when absent. Raises SpanRejected otherwise."""
    value = attrs.get(key)
    if value is None:
        return None
    kind = type(value)
    number = -1.0
    if kind is float or kind is int:
        number = value
    elif kind is str:
        with contextlib.suppress(ValueError):
            number = float(value) if len(value) <= 64 else -1.0
    if 0 <= number <= MAX_AMOUNT:  # False for NaN; inf is above the maximum
        return float(number)
    raise SpanRejected(
        f"attribute {key} must be a non-negative number of at most {MAX_AMOUNT:.0e} (got {_shape(value)})"
    )


def choice(attrs: dict, key: str, allowed: tuple):
    """``attrs[key]`` when it is one of ``allowed`` (None when absent); raises SpanRejected."""
    value = attrs.get(key)
    if value is None or value in allowed:
        return value
    raise SpanRejected(f"attribute {key} must be one of {', '.join(allowed)} (got {_shape(value)})")


def _scalar_text(key: str, value) -> str:
    """A scalar value as text of at most 200 characters; SpanRejected for an array, a key-value
    list or bytes (never stringified: they may be large or deeply nested)."""
    kind = type(value)
    if kind is str:
        return value[:200]
    if kind is int or kind is float or kind is bool:
        return str(value)[:200]
    raise SpanRejected(f"attribute {key} must be a string (got {_kind_noun(kind)})")


#: What a rejected attribute value is called in a message (OTLP's AnyValue kinds, not Python's
#: or protobuf's type names).
_KIND_NOUNS = {
    "ArrayValue": "an array",
    "list": "an array",
    "tuple": "an array",
    "KeyValueList": "a key-value list",
    "dict": "a key-value list",
    "bytes": "bytes",
    "bytearray": "bytes",
    "memoryview": "bytes",
    "NoneType": "no value",
}


def _kind_noun(kind: type) -> str:
    """``"an array"``, ``"a key-value list"``, ``"bytes"``; another type as ``a``/``an`` and its name."""
    name = kind.__name__
    if name in _KIND_NOUNS:
        return _KIND_NOUNS[name]
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def text(attrs: dict, key: str):
    """``attrs[key]`` as text of at most 200 characters; None when absent or empty.
    Raises SpanRejected for a non-scalar value."""
    value = attrs.get(key)
    if value is None or value == "":
        return None
    return _scalar_text(key, value)


#: The attributes that carry a model name (checked by ``check_models``).
MODEL_KEYS = (
    sc.GEN_AI_REQUEST_MODEL,
    sc.GEN_AI_RESPONSE_MODEL,
    sc.LLM_MODEL_NAME,
    sc.LLM_REQUEST_MODEL,
    sc.LLM_RESPONSE_MODEL,
)


def check_models(attrs: dict) -> None:
    """Reject a span whose model name is too long or holds control characters
    (``budgetlens.limits.model_name_problem``), naming the attribute, never the value."""
    for key in MODEL_KEYS:
        value = attrs.get(key)
        if type(value) is str and value not in _GOOD_MODELS:
            problem = model_name_problem(value)
            if problem is not None:
                raise SpanRejected(f"attribute {key} must be a model name {problem}")
            if len(_GOOD_MODELS) < 4096:
                _GOOD_MODELS.add(value)


#: Model names already found well formed (a few per deployment; bounded).
_GOOD_MODELS: set[str] = set()


def first_text(attrs: dict, *keys: str):
    """``text`` of the first of ``keys`` with a non-empty value (None when none has one)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return _scalar_text(key, value)
    return None


def usage_problem(attrs: dict, error: ValueError) -> str:
    """The rejection reason of a span whose row could not be built: ``error`` (the rule),
    then the usage attributes it carried (name=value)."""
    usage = ", ".join(f"{key}={attrs[key]!r}" for key in sorted(USAGE_KEYS.intersection(attrs)))
    return f"{error} (usage attributes {usage})" if usage else str(error)
