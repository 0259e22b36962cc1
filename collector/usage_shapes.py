"""Provider usage shapes (design §2): each provider's raw usage mapping read into :class:`Usage`.

The rules per provider are listed in ``budgetlens.usage`` (the public entry points); this module
holds the readers (OpenAI Chat/Responses, Anthropic, Bedrock, Gemini, Langfuse), the choice of
reader by a payload's keys (:func:`read_usage`) and the billing parts beyond the five token
counts (audio/image/video tokens, 1h cache writes, server-side tool use, service tier).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from budgetlens.limits import MAX_TOKENS
from budgetlens.usage_types import Usage, including_parts

log = logging.getLogger(__name__)


def as_mapping(obj: Any) -> Mapping[str, Any] | None:
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


def token_count(value: Any, field: str) -> int:
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


def sub_mapping(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return as_mapping(mapping.get(key)) or {}


def summed(source: str, **counts: int) -> int:
    """The sum of a payload's ``counts`` (field name -> tokens) that make up one total; raises
    ``ValueError`` naming the fields when it exceeds ``MAX_TOKENS`` (the one token bound)."""
    total = sum(counts.values())
    if total > MAX_TOKENS:
        named = " + ".join(f"{field} {value}" for field, value in counts.items())
        raise ValueError(f"{source} usage exceeds the one token bound {MAX_TOKENS:.0e}: {named} = {total}")
    return total


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
        return token_count(u.get(camel, u.get(snake)), camel)

    prompt = get("promptTokenCount", "prompt_token_count")
    tool_prompt = get("toolUsePromptTokenCount", "tool_use_prompt_token_count")
    candidates = get("candidatesTokenCount", "candidates_token_count")
    thoughts = get("thoughtsTokenCount", "thoughts_token_count")
    cached = get("cachedContentTokenCount", "cached_content_token_count")
    inp = summed("gemini", promptTokenCount=prompt, toolUsePromptTokenCount=tool_prompt)
    out = summed("gemini", candidatesTokenCount=candidates, thoughtsTokenCount=thoughts)
    return _clamped(inp, out, cached, 0, thoughts, "gemini")


#: Bedrock spellings per part: Converse ``usage`` (``inputTokens``...) first, then the
#: ``*TokenCount`` spellings of InvokeModel's invocation metrics and its response headers.
BEDROCK_SPELLINGS = {
    "input": ("inputTokens", "inputTokenCount"),
    "output": ("outputTokens", "outputTokenCount"),
    "cache_read": ("cacheReadInputTokens", "cacheReadInputTokenCount"),
    "cache_write": ("cacheWriteInputTokens", "cacheWriteInputTokenCount"),
}
#: Bedrock keys that are read elsewhere or carry no count of their own (the total is the sum).
_BEDROCK_OTHER = frozenset({"totalTokens", "totalTokenCount", "cacheDetails"})
_BEDROCK_KNOWN = frozenset(name for names in BEDROCK_SPELLINGS.values() for name in names) | _BEDROCK_OTHER


def _bedrock_part(u: Mapping[str, Any], part: str) -> int:
    """One part of a Bedrock usage under whichever spelling it has (0 when absent)."""
    for name in BEDROCK_SPELLINGS[part]:
        if u.get(name) is not None:
            return token_count(u[name], name)
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
    inp = summed(
        "bedrock", inputTokens=_bedrock_part(u, "input"), cacheReadInputTokens=cr, cacheWriteInputTokens=cw
    )
    return Usage(inp, _bedrock_part(u, "output"), cr, cw, 0)


def _anthropic(u: Mapping[str, Any]) -> Usage:
    cr = token_count(u.get("cache_read_input_tokens"), "cache_read_input_tokens")
    cw = token_count(u.get("cache_creation_input_tokens"), "cache_creation_input_tokens")
    inp = token_count(u.get("input_tokens"), "input_tokens")
    inp = summed("anthropic", input_tokens=inp, cache_read_input_tokens=cr, cache_creation_input_tokens=cw)
    return Usage(inp, token_count(u.get("output_tokens"), "output_tokens"), cr, cw, 0)


def _chat(u: Mapping[str, Any]) -> Usage:
    """OpenAI Chat Completions, LiteLLM, DeepSeek, OpenHands token_usages."""
    prompt = token_count(u.get("prompt_tokens"), "prompt_tokens")
    completion = token_count(u.get("completion_tokens"), "completion_tokens")
    pdet, cdet = sub_mapping(u, "prompt_tokens_details"), sub_mapping(u, "completion_tokens_details")
    cr = max(
        token_count(pdet.get("cached_tokens"), "prompt_tokens_details.cached_tokens"),
        token_count(u.get("cache_read_input_tokens"), "cache_read_input_tokens"),
        token_count(u.get("prompt_cache_hit_tokens"), "prompt_cache_hit_tokens"),
        token_count(u.get("cache_read_tokens"), "cache_read_tokens"),
    )
    cw = max(
        token_count(u.get("cache_creation_input_tokens"), "cache_creation_input_tokens"),
        token_count(pdet.get("cache_creation_tokens"), "prompt_tokens_details.cache_creation_tokens"),
        token_count(u.get("cache_write_tokens"), "cache_write_tokens"),
    )
    rs = token_count(cdet.get("reasoning_tokens"), "completion_tokens_details.reasoning_tokens")
    # Parts larger than this total cannot be inside it: the source reported input without cache.
    prompt = including_parts(prompt, cr + cw)
    return _clamped(prompt, completion, cr, cw, rs, "chat")


def _responses(u: Mapping[str, Any]) -> Usage:
    """OpenAI Responses API and Codex CLI token_count: totals include cached and reasoning."""
    idet, odet = sub_mapping(u, "input_tokens_details"), sub_mapping(u, "output_tokens_details")
    cr = max(
        token_count(idet.get("cached_tokens"), "input_tokens_details.cached_tokens"),
        token_count(u.get("cached_input_tokens"), "cached_input_tokens"),
    )
    rs = max(
        token_count(odet.get("reasoning_tokens"), "output_tokens_details.reasoning_tokens"),
        token_count(u.get("reasoning_output_tokens"), "reasoning_output_tokens"),
    )
    inp = token_count(u.get("input_tokens"), "input_tokens")
    out = token_count(u.get("output_tokens"), "output_tokens")
    return _clamped(inp, out, cr, 0, rs, "responses")


_LANGFUSE_CACHE_READ = ("input_cache_read", "prompt_details.cache_read", "cache_read_input_tokens")
_LANGFUSE_CACHE_WRITE = ("input_cache_creation", "input_cache_write", "cache_creation_input_tokens")
_LANGFUSE_REASONING = ("output_reasoning", "completion_details.reasoning")


def _langfuse(u: Mapping[str, Any]) -> Usage:
    """Langfuse usageDetails: ``input``/``output`` plus detail keys; ``total`` disambiguates."""
    inp, out = token_count(u.get("input"), "input"), token_count(u.get("output"), "output")
    details = {k: token_count(v, k) for k, v in u.items() if k not in ("input", "output", "total")}
    cr = sum(details.get(k, 0) for k in _LANGFUSE_CACHE_READ)
    cw = sum(details.get(k, 0) for k in _LANGFUSE_CACHE_WRITE)
    rs = sum(details.get(k, 0) for k in _LANGFUSE_REASONING)
    total = u.get("total")
    exclusive = total is not None and token_count(total, "total") == inp + out + sum(details.values())
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
_BEDROCK_KEYS = tuple(name for names in BEDROCK_SPELLINGS.values() for name in names)
_BEDROCK_MAIN = frozenset(BEDROCK_SPELLINGS["input"] + BEDROCK_SPELLINGS["output"])
_CHAT_KEYS = ("prompt_tokens", "completion_tokens")
_ANTHROPIC_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_LANGFUSE_KEYS = ("input", "output")


def _shape(
    u: Mapping[str, Any], provider: str | None
) -> tuple[Callable[[Mapping[str, Any]], Usage], tuple[str, ...]] | None:
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


def read_usage(u: Mapping[str, Any], provider: str | None) -> Usage | None:
    """The :class:`Usage` of a raw usage mapping (None: no known shape, or every main count null).
    Raises ValueError naming the field for a bad count."""
    shape = _shape(u, provider)
    if shape is None or all(u.get(k) is None for k in shape[1]):
        return None  # no shape, or every count null: unknown usage, never 0
    usage = _with_billing_parts(shape[0](u), u)
    if shape[0] is not _langfuse:  # Langfuse's total tells how its details count, see _langfuse
        usage = _with_provider_total(usage, u, shape[1])
    return usage


#: The keys a provider states its own total under (OpenAI, Gemini, Bedrock).
_TOTAL_KEYS = ("total_tokens", "totalTokenCount", "total_token_count", "totalTokens")


def _with_provider_total(usage: Usage, u: Mapping[str, Any], main: tuple[str, ...]) -> Usage:
    """``usage`` with ``provider_total_tokens`` set when the payload states a total that is
    neither input + output nor the sum of its raw main counts (the total its convention makes):
    the parts stay the usage, the total is kept beside them (design §2: never added on top)."""
    for key in _TOTAL_KEYS:
        raw = u.get(key)
        if raw is None:
            continue
        total = token_count(raw, key)
        stated = sum(token_count(u.get(k), k) for k in main if u.get(k) is not None)
        if total not in (usage.total_tokens, stated):
            return replace(usage, provider_total_tokens=total)
        return usage
    return usage


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
            entry = as_mapping(item) or {}
            modality = str(entry.get("modality", "")).lower()
            count = token_count(entry.get("tokenCount", entry.get("token_count")), f"{key}.tokenCount")
            out[modality] = out.get(modality, 0) + count
    return out


def _detail(u: Mapping[str, Any], path: tuple[str, ...]) -> int:
    """A nested count (``("prompt_tokens_details", "audio_tokens")``); absent = 0."""
    node: Any = u
    for key in path[:-1]:
        node = as_mapping(node.get(key)) or {}
    return token_count(node.get(path[-1]), ".".join(path))


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
            entry = as_mapping(item) or {}
            if str(entry.get("ttl", "")).lower() == "1h":
                bedrock_1h += token_count(entry.get("inputTokens"), "cacheDetails.inputTokens")
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


def has_usage_shape(u: Mapping[str, Any]) -> bool:
    """True when the mapping's keys fit one of the usage shapes :func:`read_usage` reads."""
    return _shape(u, None) is not None
