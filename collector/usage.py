"""Provider usage -> one normalized shape (design §2).

The internal shape follows the OpenTelemetry GenAI convention:

- ``input_tokens`` counts ALL input, including cache reads and cache writes;
- ``output_tokens`` counts ALL output, including reasoning;
- ``cache_read_tokens``, ``cache_write_tokens`` and ``reasoning_tokens`` are *parts* of those
  totals and are never added again.

Provider quirks handled by :func:`normalize_usage` (each a documented rule, never a guess):

- OpenAI Chat Completions (``prompt_tokens`` / ``completion_tokens``; cached and reasoning counts
  under ``*_details``) and Responses (``input_tokens`` / ``output_tokens`` with
  ``input_tokens_details`` / ``output_tokens_details``): the totals already include the parts.
- LiteLLM dicts are Chat Completions shaped, sometimes with Anthropic's
  ``cache_creation_input_tokens`` / ``cache_read_input_tokens`` or DeepSeek's
  ``prompt_cache_hit_tokens`` beside them; ``prompt_tokens`` includes them. If the parts are
  larger than ``prompt_tokens`` the total cannot include them and they are added instead.
- Anthropic Messages and Bedrock Converse report input WITHOUT the cache buckets:
  input = input + cache read + cache write.
- Gemini ``usageMetadata`` reports thinking outside candidates and tool-use prompt outside the
  prompt: input = prompt + tool-use prompt, output = candidates + thoughts; the prompt includes
  ``cachedContentTokenCount``.
- Codex CLI ``token_count`` (``cached_input_tokens``, ``reasoning_output_tokens``): included.
- Langfuse ``usageDetails`` (``input``, ``output``, ``total`` and detail keys): the reported
  ``total`` tells whether details are exclusive (total = sum of all keys) or included.
- Streams report cumulative usage: :class:`UsageAccumulator` keeps the latest value per field,
  it never sums chunks. OpenAI Responses stream events (``response.completed``, ...) carry the
  usage in their ``response``.
- A usage whose main counts (input and output, and the cache/thinking buckets that some
  providers report beside them) are all null or absent carries no usage: None (unknown), not 0.

A provider's own total is never added on top of its parts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["Usage", "UsageAccumulator", "normalize_usage", "usage_missing_parts"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call (or a sum of calls), in tokens (int, >= 0).

    ``input_tokens`` includes ``cache_read_tokens`` and ``cache_write_tokens``; ``output_tokens``
    includes ``reasoning_tokens``. Raises ``ValueError`` naming the field when a value is not a
    non-negative int or a part exceeds its total.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # Billing dimensions beyond the five token counts (issue 9): parts of the totals above, or
    # counts of server-side tool use; genai-prices prices each at its own rate.
    cache_write_1h_tokens: int = 0
    input_audio_tokens: int = 0
    input_image_tokens: int = 0
    input_video_tokens: int = 0
    cache_read_audio_tokens: int = 0
    output_audio_tokens: int = 0
    output_image_tokens: int = 0
    web_search_requests: int = 0
    code_executions: int = 0
    service_tier: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "service_tier":
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"Usage.service_tier must be a str or None, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Usage.{f.name} must be an int >= 0, got {value!r}")
        if self.cache_read_tokens + self.cache_write_tokens > self.input_tokens:
            raise ValueError(
                "Usage.cache_read_tokens + cache_write_tokens must not exceed input_tokens "
                f"(input includes cache): {self.cache_read_tokens} + {self.cache_write_tokens}"
                f" > {self.input_tokens}"
            )
        if self.reasoning_tokens > self.output_tokens:
            raise ValueError(
                "Usage.reasoning_tokens must not exceed output_tokens (output includes reasoning): "
                f"{self.reasoning_tokens} > {self.output_tokens}"
            )
        self._check_billing_parts()

    def _check_billing_parts(self) -> None:
        """Each billing part within its total (raises ValueError naming the fields)."""
        parts = (
            (
                "cache_write_1h_tokens",
                self.cache_write_1h_tokens,
                "cache_write_tokens",
                self.cache_write_tokens,
            ),
            (
                "input_audio_tokens + input_image_tokens + input_video_tokens",
                self.input_audio_tokens + self.input_image_tokens + self.input_video_tokens,
                "input_tokens",
                self.input_tokens,
            ),
            (
                "cache_read_audio_tokens",
                self.cache_read_audio_tokens,
                "cache_read_tokens",
                self.cache_read_tokens,
            ),
            (
                "cache_read_audio_tokens",
                self.cache_read_audio_tokens,
                "input_audio_tokens",
                self.input_audio_tokens,
            ),
            (
                "output_audio_tokens + output_image_tokens",
                self.output_audio_tokens + self.output_image_tokens,
                "output_tokens",
                self.output_tokens,
            ),
        )
        for part, value, total, limit in parts:
            if value > limit:
                raise ValueError(f"Usage.{part} must not exceed {total} (a part of it): {value} > {limit}")

    @property
    def total_tokens(self) -> int:
        """input_tokens + output_tokens (tokens); parts are already inside these."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        sums = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name != "service_tier"
        }
        tier = self.service_tier if self.service_tier == other.service_tier else None
        return Usage(**sums, service_tier=tier)


_CONTAINER_KEYS = ("usage", "usageMetadata", "usage_metadata", "usageDetails")


def _as_mapping(obj: Any) -> Mapping[str, Any] | None:
    """A dict view of a payload: dicts as is, SDK objects via model_dump / to_dict / __dict__."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj
    for method in ("model_dump", "to_dict"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                result = fn()
            except TypeError:
                continue
            if isinstance(result, Mapping):
                return result
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return None


def _int(value: Any, field: str) -> int:
    """A token count from a payload value: None -> 0; rejects negatives, non-numbers, NaN and
    infinity."""
    if value is None:
        return 0
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, str))
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise ValueError(f"usage field {field!r} must be a finite token count, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"usage field {field!r} must be a token count, got {value!r}") from None
    if number < 0 or (isinstance(value, float) and value != number):
        raise ValueError(f"usage field {field!r} must be a whole number >= 0, got {value!r}")
    return number


def _sub(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return _as_mapping(mapping.get(key)) or {}


def _clamped(inp: int, out: int, cr: int, cw: int, rs: int, source: str) -> Usage:
    """Build a Usage; a part larger than its total is clamped (logged), never added on top."""
    if cr + cw > inp:
        log.warning("%s usage: cache parts %d+%d exceed input %d; clamping", source, cr, cw, inp)
        cr = min(cr, inp)
        cw = min(cw, inp - cr)
    if rs > out:
        log.warning("%s usage: reasoning %d exceeds output %d; clamping", source, rs, out)
        rs = out
    return Usage(inp, out, cr, cw, rs)


def _gemini(u: Mapping[str, Any]) -> Usage:
    def get(camel: str, snake: str) -> int:
        return _int(u.get(camel, u.get(snake)), camel)

    prompt = get("promptTokenCount", "prompt_token_count")
    tool_prompt = get("toolUsePromptTokenCount", "tool_use_prompt_token_count")
    candidates = get("candidatesTokenCount", "candidates_token_count")
    thoughts = get("thoughtsTokenCount", "thoughts_token_count")
    cached = get("cachedContentTokenCount", "cached_content_token_count")
    return _clamped(prompt + tool_prompt, candidates + thoughts, cached, 0, thoughts, "gemini")


#: Bedrock spellings per part: Converse ``usage`` (``inputTokens``...) first, then the
#: ``*TokenCount`` spellings of InvokeModel's invocation metrics and its response headers.
_BEDROCK_SPELLINGS = {
    "input": ("inputTokens", "inputTokenCount"),
    "output": ("outputTokens", "outputTokenCount"),
    "cache_read": ("cacheReadInputTokens", "cacheReadInputTokenCount"),
    "cache_write": ("cacheWriteInputTokens", "cacheWriteInputTokenCount"),
}
#: Bedrock keys that are read elsewhere or carry no count of their own (the total is the sum).
_BEDROCK_OTHER = frozenset({"totalTokens", "totalTokenCount", "cacheDetails"})
_BEDROCK_KNOWN = frozenset(name for names in _BEDROCK_SPELLINGS.values() for name in names) | _BEDROCK_OTHER


def _bedrock_part(u: Mapping[str, Any], part: str) -> int:
    """One part of a Bedrock usage under whichever spelling it has (0 when absent)."""
    for name in _BEDROCK_SPELLINGS[part]:
        if u.get(name) is not None:
            return _int(u[name], name)
    return 0


def _bedrock(u: Mapping[str, Any]) -> Usage:
    """Bedrock Converse / InvokeModel usage: input WITHOUT the cache buckets. A token count
    under a spelling this reader does not know is refused by name (ValueError), never dropped."""
    unknown = sorted(k for k in u if "token" in k.lower() and k not in _BEDROCK_KNOWN)
    if unknown:
        raise ValueError(
            f"Bedrock usage field(s) {unknown} are not understood; known: {sorted(_BEDROCK_KNOWN)}"
        )
    cr, cw = _bedrock_part(u, "cache_read"), _bedrock_part(u, "cache_write")
    inp = _bedrock_part(u, "input") + cr + cw
    return Usage(inp, _bedrock_part(u, "output"), cr, cw, 0)


def _anthropic(u: Mapping[str, Any]) -> Usage:
    cr = _int(u.get("cache_read_input_tokens"), "cache_read_input_tokens")
    cw = _int(u.get("cache_creation_input_tokens"), "cache_creation_input_tokens")
    inp = _int(u.get("input_tokens"), "input_tokens") + cr + cw
    return Usage(inp, _int(u.get("output_tokens"), "output_tokens"), cr, cw, 0)


def _chat(u: Mapping[str, Any]) -> Usage:
    """OpenAI Chat Completions, LiteLLM, DeepSeek, OpenHands token_usages."""
    prompt = _int(u.get("prompt_tokens"), "prompt_tokens")
    completion = _int(u.get("completion_tokens"), "completion_tokens")
    pdet, cdet = _sub(u, "prompt_tokens_details"), _sub(u, "completion_tokens_details")
    cr = max(
        _int(pdet.get("cached_tokens"), "prompt_tokens_details.cached_tokens"),
        _int(u.get("cache_read_input_tokens"), "cache_read_input_tokens"),
        _int(u.get("prompt_cache_hit_tokens"), "prompt_cache_hit_tokens"),
        _int(u.get("cache_read_tokens"), "cache_read_tokens"),
    )
    cw = max(
        _int(u.get("cache_creation_input_tokens"), "cache_creation_input_tokens"),
        _int(pdet.get("cache_creation_tokens"), "prompt_tokens_details.cache_creation_tokens"),
        _int(u.get("cache_write_tokens"), "cache_write_tokens"),
    )
    rs = _int(cdet.get("reasoning_tokens"), "completion_tokens_details.reasoning_tokens")
    if cr + cw > prompt:
        # The parts cannot be inside this total: the source reported input without cache.
        prompt += cr + cw
    return _clamped(prompt, completion, cr, cw, rs, "chat")


def _responses(u: Mapping[str, Any]) -> Usage:
    """OpenAI Responses API and Codex CLI token_count: totals include cached and reasoning."""
    idet, odet = _sub(u, "input_tokens_details"), _sub(u, "output_tokens_details")
    cr = max(
        _int(idet.get("cached_tokens"), "input_tokens_details.cached_tokens"),
        _int(u.get("cached_input_tokens"), "cached_input_tokens"),
    )
    rs = max(
        _int(odet.get("reasoning_tokens"), "output_tokens_details.reasoning_tokens"),
        _int(u.get("reasoning_output_tokens"), "reasoning_output_tokens"),
    )
    inp = _int(u.get("input_tokens"), "input_tokens")
    out = _int(u.get("output_tokens"), "output_tokens")
    return _clamped(inp, out, cr, 0, rs, "responses")


_LANGFUSE_CACHE_READ = ("input_cache_read", "prompt_details.cache_read", "cache_read_input_tokens")
_LANGFUSE_CACHE_WRITE = ("input_cache_creation", "input_cache_write", "cache_creation_input_tokens")
_LANGFUSE_REASONING = ("output_reasoning", "completion_details.reasoning")


def _langfuse(u: Mapping[str, Any]) -> Usage:
    """Langfuse usageDetails: ``input``/``output`` plus detail keys; ``total`` disambiguates."""
    inp, out = _int(u.get("input"), "input"), _int(u.get("output"), "output")
    details = {k: _int(v, k) for k, v in u.items() if k not in ("input", "output", "total")}
    cr = sum(details.get(k, 0) for k in _LANGFUSE_CACHE_READ)
    cw = sum(details.get(k, 0) for k in _LANGFUSE_CACHE_WRITE)
    rs = sum(details.get(k, 0) for k in _LANGFUSE_REASONING)
    total = u.get("total")
    exclusive = total is not None and _int(total, "total") == inp + out + sum(details.values())
    if exclusive and sum(details.values()) > 0:
        inp += sum(v for k, v in details.items() if k.startswith(("input", "prompt", "cache")))
        out += sum(v for k, v in details.items() if k.startswith(("output", "completion")))
    return _clamped(inp, out, cr, cw, rs, "langfuse")


_ANTHROPIC_PROVIDERS = {"anthropic", "aws.bedrock", "bedrock", "gcp.vertex_ai.anthropic"}


#: Per shape: the counts of which at least one must be non-null for the payload to carry usage.
_GEMINI_KEYS = (
    "promptTokenCount",
    "prompt_token_count",
    "candidatesTokenCount",
    "candidates_token_count",
    "thoughtsTokenCount",
    "thoughts_token_count",
    "toolUsePromptTokenCount",
    "tool_use_prompt_token_count",
)
_BEDROCK_KEYS = tuple(name for names in _BEDROCK_SPELLINGS.values() for name in names)
_BEDROCK_MAIN = frozenset(_BEDROCK_SPELLINGS["input"] + _BEDROCK_SPELLINGS["output"])
_CHAT_KEYS = ("prompt_tokens", "completion_tokens")
_ANTHROPIC_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_LANGFUSE_KEYS = ("input", "output")


def _shape(u: Mapping[str, Any], provider: str | None):
    """(normalizer, its main count keys) for the payload's keys, or None."""
    keys = u.keys()
    if "promptTokenCount" in keys or "prompt_token_count" in keys or "candidatesTokenCount" in keys:
        return _gemini, _GEMINI_KEYS
    if not keys.isdisjoint(_BEDROCK_MAIN):
        return _bedrock, _BEDROCK_KEYS
    if "prompt_tokens" in keys or "completion_tokens" in keys:
        return _chat, _CHAT_KEYS
    if "input_tokens" in keys or "output_tokens" in keys:
        anthropic_keys = "cache_read_input_tokens" in keys or "cache_creation_input_tokens" in keys
        if anthropic_keys or (provider or "").lower() in _ANTHROPIC_PROVIDERS:
            return _anthropic, _ANTHROPIC_KEYS
        return _responses, _ANTHROPIC_KEYS[:2]
    numeric = (int, float, type(None))
    if ("input" in keys or "output" in keys) and all(
        isinstance(u.get(k), numeric) for k in ("input", "output", "total")
    ):
        return _langfuse, _LANGFUSE_KEYS
    return None


def _dispatch(u: Mapping[str, Any], provider: str | None) -> Usage | None:
    shape = _shape(u, provider)
    if shape is None or all(u.get(k) is None for k in shape[1]):
        return None  # no shape, or every count null: unknown usage, never 0
    return _with_billing_parts(shape[0](u), u)


# --- billing dimensions beyond the five token counts (issue 9) -----------------------------------

#: Gemini ``*TokensDetails`` lists: [{"modality": "AUDIO", "tokenCount": 900}, ...].
_GEMINI_DETAILS = {
    "input": (
        "promptTokensDetails",
        "prompt_tokens_details",
        "toolUsePromptTokensDetails",
        "tool_use_prompt_tokens_details",
    ),
    "cache": ("cacheTokensDetails", "cache_tokens_details"),
    "output": ("candidatesTokensDetails", "candidates_tokens_details"),
}


def _modalities(u: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    """Gemini modality token counts summed over the detail lists under ``keys`` (lower-case)."""
    out: dict[str, int] = {}
    for key in keys:
        items = u.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            entry = _as_mapping(item) or {}
            modality = str(entry.get("modality", "")).lower()
            count = _int(entry.get("tokenCount", entry.get("token_count")), f"{key}.tokenCount")
            out[modality] = out.get(modality, 0) + count
    return out


def _detail(u: Mapping[str, Any], path: tuple[str, ...]) -> int:
    """A nested count (``("prompt_tokens_details", "audio_tokens")``); absent = 0."""
    node: Any = u
    for key in path[:-1]:
        node = _as_mapping(node.get(key)) or {}
    return _int(node.get(path[-1]), ".".join(path))


def _first(u: Mapping[str, Any], *paths: tuple[str, ...]) -> int:
    return max((_detail(u, p) for p in paths), default=0)


def _billing_counts(u: Mapping[str, Any]) -> dict[str, int]:
    """The billing parts a raw usage reports, by provider spelling (0 when absent).

    OpenAI Chat ``prompt_tokens_details.audio_tokens``/``image_tokens`` and
    ``completion_tokens_details.audio_tokens``; Realtime/Responses ``input_token(s)_details``
    (with ``cached_tokens_details.audio_tokens``) and ``output_token(s)_details``; Gemini
    ``promptTokensDetails``/``toolUsePromptTokensDetails``/``cacheTokensDetails``/
    ``candidatesTokensDetails`` by modality; Anthropic (and LiteLLM) ``cache_creation
    .ephemeral_1h_input_tokens`` and ``server_tool_use.web_search_requests``; Bedrock
    ``cacheDetails`` entries with ``ttl: "1h"``.
    """
    gemini_in = _modalities(u, _GEMINI_DETAILS["input"])
    gemini_cache = _modalities(u, _GEMINI_DETAILS["cache"])
    gemini_out = _modalities(u, _GEMINI_DETAILS["output"])
    bedrock_1h = 0
    details = u.get("cacheDetails")
    if isinstance(details, list):
        for item in details:
            entry = _as_mapping(item) or {}
            if str(entry.get("ttl", "")).lower() == "1h":
                bedrock_1h += _int(entry.get("inputTokens"), "cacheDetails.inputTokens")
    return {
        "cache_write_1h_tokens": max(_detail(u, ("cache_creation", "ephemeral_1h_input_tokens")), bedrock_1h),
        "input_audio_tokens": max(
            _first(
                u,
                ("prompt_tokens_details", "audio_tokens"),
                ("input_token_details", "audio_tokens"),
                ("input_tokens_details", "audio_tokens"),
            ),
            gemini_in.get("audio", 0),
        ),
        "input_image_tokens": max(
            _first(
                u,
                ("prompt_tokens_details", "image_tokens"),
                ("input_token_details", "image_tokens"),
                ("input_tokens_details", "image_tokens"),
            ),
            gemini_in.get("image", 0),
        ),
        "input_video_tokens": gemini_in.get("video", 0),
        "cache_read_audio_tokens": max(
            _first(
                u,
                ("input_token_details", "cached_tokens_details", "audio_tokens"),
                ("input_tokens_details", "cached_tokens_details", "audio_tokens"),
                ("prompt_tokens_details", "cached_tokens_details", "audio_tokens"),
            ),
            gemini_cache.get("audio", 0),
        ),
        "output_audio_tokens": max(
            _first(
                u,
                ("completion_tokens_details", "audio_tokens"),
                ("output_token_details", "audio_tokens"),
                ("output_tokens_details", "audio_tokens"),
            ),
            gemini_out.get("audio", 0),
        ),
        "output_image_tokens": max(
            _first(
                u, ("completion_tokens_details", "image_tokens"), ("output_tokens_details", "image_tokens")
            ),
            gemini_out.get("image", 0),
        ),
        "web_search_requests": _detail(u, ("server_tool_use", "web_search_requests")),
        "code_executions": _detail(u, ("server_tool_use", "code_execution_requests")),
    }


def _with_billing_parts(usage: Usage, u: Mapping[str, Any], service_tier: Any = None) -> Usage:
    """``usage`` with the billing parts of the raw usage ``u`` (each clamped to its total, logged)
    and its service tier (``u["service_tier"]``, else ``service_tier`` from the response)."""
    counts = _billing_counts(u)
    tier = u.get("service_tier", service_tier)
    realtime_cached = _detail(u, ("input_token_details", "cached_tokens"))  # Realtime's spelling
    if realtime_cached and not usage.cache_read_tokens:
        usage = replace(
            usage,
            cache_read_tokens=_part(
                realtime_cached, usage.input_tokens - usage.cache_write_tokens, "cached tokens"
            ),
        )
    counts["cache_write_1h_tokens"] = _part(
        counts["cache_write_1h_tokens"], usage.cache_write_tokens, "1h cache writes"
    )
    inputs = ("input_audio_tokens", "input_image_tokens", "input_video_tokens")
    room = usage.input_tokens
    for name in inputs:
        counts[name] = _part(counts[name], room, name)
        room -= counts[name]
    counts["cache_read_audio_tokens"] = _part(
        counts["cache_read_audio_tokens"],
        min(usage.cache_read_tokens, counts["input_audio_tokens"]),
        "cached audio",
    )
    room = usage.output_tokens
    for name in ("output_audio_tokens", "output_image_tokens"):
        counts[name] = _part(counts[name], room, name)
        room -= counts[name]
    if not any(counts.values()) and not isinstance(tier, str):
        return usage
    return replace(
        usage, **counts, service_tier=tier if isinstance(tier, str) and tier else usage.service_tier
    )


def _part(value: int, total: int, what: str) -> int:
    if value > total:
        log.warning("usage: %s %d exceed their total %d; clamping", what, value, total)
        return total
    return value


_RESPONSE_EVENT_PREFIX = "response."  # OpenAI Responses stream events carry usage in "response"


def _usage_mapping(payload: Any) -> tuple[Mapping[str, Any] | None, str]:
    """The usage mapping inside ``payload`` (None: none) and the payload's event type ("")."""
    mapping = _as_mapping(payload)
    if not mapping:
        return None, ""
    kind = str(mapping.get("type", ""))
    if kind == "message_start" and "message" in mapping:
        mapping = _sub(mapping, "message")
    elif kind.startswith(_RESPONSE_EVENT_PREFIX) and "response" in mapping:
        mapping = _sub(mapping, "response")
    for key in _CONTAINER_KEYS:
        if key in mapping:
            return _as_mapping(mapping.get(key)) or None, kind
    return mapping, kind


def normalize_usage(payload: Any, provider: str | None = None) -> Usage | None:
    """Normalize a provider usage payload to :class:`Usage`.

    ``payload`` may be a usage object or dict, a whole response (object or dict) holding
    ``usage`` / ``usageMetadata`` / ``usage_metadata``, an Anthropic stream event
    (``message_start`` / ``message_delta``) or an OpenAI Responses stream event
    (``response.completed``, usage in its ``response``). ``provider`` (an OTel ``gen_ai.provider.name`` such
    as ``"anthropic"``) only disambiguates payloads whose keys fit several providers.

    Returns None when the payload carries no usage (None, no usage keys, ``usage: null``, or
    main counts that are all null): the caller must treat that as *unknown*, never as 0. Raises
    ``ValueError`` naming the field when a count is negative, not a number, NaN or infinite, or
    (Bedrock) a token count under an unknown spelling. An existing :class:`Usage` is returned as
    is. A usage lacking its input or output part reads that part as 0: see
    :func:`usage_missing_parts` to tell such a *partial* usage apart.
    """
    if isinstance(payload, Usage):
        return payload
    mapping, _ = _usage_mapping(payload)
    usage = _dispatch(mapping, provider) if mapping else None
    if usage is not None and usage.service_tier is None:
        tier = _response_service_tier(payload)  # OpenAI states the tier on the response
        if tier is not None:
            usage = replace(usage, service_tier=tier)
    return usage


def _response_service_tier(payload: Any) -> str | None:
    """The ``service_tier`` a response states next to its usage container (None: none)."""
    outer = _as_mapping(payload)
    if not outer:
        return None
    kind = str(outer.get("type", ""))
    if kind.startswith(_RESPONSE_EVENT_PREFIX) and "response" in outer:
        outer = _sub(outer, "response")
    if not any(key in outer for key in _CONTAINER_KEYS):
        return None
    tier = outer.get("service_tier")
    return tier if isinstance(tier, str) and tier else None


#: Per part: the keys any shape reports it under (one present and non-null = the part is there).
_PART_KEYS = {
    "input_tokens": (
        "input_tokens",
        "prompt_tokens",
        "promptTokenCount",
        "prompt_token_count",
        "input",
        *_BEDROCK_SPELLINGS["input"],
    ),
    "output_tokens": (
        "output_tokens",
        "completion_tokens",
        "candidatesTokenCount",
        "candidates_token_count",
        "output",
        *_BEDROCK_SPELLINGS["output"],
    ),
}


def usage_missing_parts(payload: Any, provider: str | None = None) -> tuple[str, ...]:
    """The parts (``"input_tokens"``, ``"output_tokens"``) a payload's usage does not report.

    A usage that carries counts but lacks one part is *partial*: e.g. Anthropic's final
    ``message_delta`` carries only ``output_tokens`` (its input is in ``message_start``; an
    input of 0 there is no report either, since no call has an empty prompt). ``()`` for a
    complete usage, a :class:`Usage`, or a payload without usage (that one is *unknown*, see
    :func:`normalize_usage`).
    """
    if isinstance(payload, Usage):
        return ()
    mapping, kind = _usage_mapping(payload)
    if not mapping or _dispatch(mapping, provider) is None:
        return ()
    missing = [part for part, keys in _PART_KEYS.items() if all(mapping.get(k) is None for k in keys)]
    if kind == "message_delta" and "input_tokens" not in missing and not mapping.get("input_tokens"):
        missing.insert(0, "input_tokens")
    return tuple(missing)


class UsageAccumulator:
    """Usage of one streamed response, built from its chunks or events.

    Streamed usage is cumulative, never per chunk: Anthropic's ``message_start`` carries the
    input and cache counts and ``message_delta`` the running ``output_tokens`` (newer APIs repeat
    input counts there too); OpenAI sends usage only in the last chunk (with
    ``stream_options={"include_usage": True}``); Gemini repeats ``usageMetadata`` per chunk. So the
    accumulator keeps the latest reported value of each raw field and never sums chunks.

    OpenAI Responses streams report usage once, in the ``response`` of ``response.completed``
    (or ``response.incomplete`` / ``response.failed``).

    Use ``add(chunk)`` for every chunk or event, then ``usage`` (None when no chunk had usage:
    the call's usage is unknown, never 0).
    """

    __slots__ = ("_fields", "_provider")

    def __init__(self, provider: str | None = None) -> None:
        self._fields: dict[str, Any] = {}
        self._provider = provider

    def add(self, chunk: Any) -> None:
        """Take the usage of one chunk or event (chunks without usage are ignored)."""
        mapping = _as_mapping(chunk)
        if not mapping:
            return
        raw: Mapping[str, Any] | None
        if mapping.get("type") == "message_start":
            raw = _sub(_sub(mapping, "message"), "usage")
            self._provider = self._provider or "anthropic"
        elif mapping.get("type") == "message_delta":
            raw = _sub(mapping, "usage")
            self._provider = self._provider or "anthropic"
        else:
            if str(mapping.get("type", "")).startswith(_RESPONSE_EVENT_PREFIX):
                mapping = _sub(mapping, "response")
            raw = next((_as_mapping(mapping.get(k)) for k in _CONTAINER_KEYS if mapping.get(k)), None)
            if raw is None and _dispatch(mapping, self._provider) is not None:
                raw = mapping
            if raw:
                self._fields = {}  # a whole usage object replaces the previous one
        for key, value in (raw or {}).items():
            if value is not None:
                self._fields[key] = value

    @property
    def usage(self) -> Usage | None:
        """The normalized usage so far, or None when no chunk reported any."""
        if not self._fields:
            return None
        return _dispatch(self._fields, self._provider)
