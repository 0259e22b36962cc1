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
- OpenAI Batch output lines (``custom_id`` + ``response.body``): the body's usage, at the batch
  rate (service tier ``batch``).
- Codex CLI ``token_count`` (``cached_input_tokens``, ``reasoning_output_tokens``): included.
- Langfuse ``usageDetails`` (``input``, ``output``, ``total`` and detail keys): the reported
  ``total`` tells whether details are exclusive (total = sum of all keys) or included.
- Streams report cumulative usage: :class:`UsageAccumulator` keeps the latest value per field,
  it never sums chunks. OpenAI Responses stream events (``response.completed``, ...) carry the
  usage in their ``response``.
- A usage whose main counts (input and output, and the cache/thinking buckets that some
  providers report beside them) are all null or absent carries no usage: None (unknown), not 0.

A provider's own total is never added on top of its parts.

Flat counts (span attributes, importer columns) follow one rule, :func:`normalize_counts`: parts
above their total mean the total excluded them, so they are added. Module layout: the
:class:`Usage` shape and that rule in ``budgetlens.usage_types``, the provider readers in
``budgetlens.usage_shapes``; import them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from budgetlens.usage_shapes import BEDROCK_SPELLINGS, as_mapping, read_usage, sub_mapping
from budgetlens.usage_types import Usage, normalize_counts

__all__ = ["Usage", "UsageAccumulator", "normalize_counts", "normalize_usage", "usage_missing_parts"]

_CONTAINER_KEYS = ("usage", "usageMetadata", "usage_metadata", "usageDetails")


_RESPONSE_EVENT_PREFIX = "response."  # OpenAI Responses stream events carry usage in "response"
#: The service tier of a call made through a batch API (genai-prices prices it as batch processing).
BATCH_TIER = "batch"


def _batch_body(mapping: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The response body of an OpenAI Batch output line (``{"custom_id": ..., "response":
    {"status_code": ..., "body": {...}}}``), None for any other payload."""
    if "custom_id" not in mapping or "response" not in mapping:
        return None
    response = sub_mapping(mapping, "response")
    return sub_mapping(response, "body") if "body" in response else None


def _usage_mapping(payload: Any) -> tuple[Mapping[str, Any] | None, str]:
    """The usage mapping inside ``payload`` (None: none) and the payload's event type ("")."""
    mapping = as_mapping(payload)
    if not mapping:
        return None, ""
    body = _batch_body(mapping)
    if body is not None:
        mapping = body
    kind = str(mapping.get("type", ""))
    if kind == "message_start" and "message" in mapping:
        mapping = sub_mapping(mapping, "message")
    elif kind.startswith(_RESPONSE_EVENT_PREFIX) and "response" in mapping:
        mapping = sub_mapping(mapping, "response")
    for key in _CONTAINER_KEYS:
        if key in mapping:
            return as_mapping(mapping.get(key)) or None, kind
    return mapping, kind


def normalize_usage(payload: Any, provider: str | None = None) -> Usage | None:
    """Normalize a provider usage payload to :class:`Usage`.

    ``payload`` may be a usage object or dict, a whole response (object or dict) holding
    ``usage`` / ``usageMetadata`` / ``usage_metadata``, an OpenAI Batch output line
    (``{"custom_id", "response": {"body": <response>}}``: its usage, service tier ``batch``), an Anthropic stream event
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
    usage = read_usage(mapping, provider) if mapping else None
    outer = as_mapping(payload)
    if usage is not None and outer and _batch_body(outer) is not None:
        return replace(usage, service_tier=BATCH_TIER)  # billed at the Batch API's rate
    if usage is not None and usage.service_tier is None:
        tier = _response_service_tier(payload)  # OpenAI states the tier on the response
        if tier is not None:
            usage = replace(usage, service_tier=tier)
    return usage


def _response_service_tier(payload: Any) -> str | None:
    """The ``service_tier`` a response states next to its usage container (None: none)."""
    outer = as_mapping(payload)
    if not outer:
        return None
    kind = str(outer.get("type", ""))
    if kind.startswith(_RESPONSE_EVENT_PREFIX) and "response" in outer:
        outer = sub_mapping(outer, "response")
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
        *BEDROCK_SPELLINGS["input"],
    ),
    "output_tokens": (
        "output_tokens",
        "completion_tokens",
        "candidatesTokenCount",
        "candidates_token_count",
        "output",
        *BEDROCK_SPELLINGS["output"],
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
    if not mapping or read_usage(mapping, provider) is None:
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
        mapping = as_mapping(chunk)
        if not mapping:
            return
        raw: Mapping[str, Any] | None
        if mapping.get("type") == "message_start":
            raw = sub_mapping(sub_mapping(mapping, "message"), "usage")
            self._provider = self._provider or "anthropic"
        elif mapping.get("type") == "message_delta":
            raw = sub_mapping(mapping, "usage")
            self._provider = self._provider or "anthropic"
        else:
            if str(mapping.get("type", "")).startswith(_RESPONSE_EVENT_PREFIX):
                mapping = sub_mapping(mapping, "response")
            raw = next((as_mapping(mapping.get(k)) for k in _CONTAINER_KEYS if mapping.get(k)), None)
            if raw is None and read_usage(mapping, self._provider) is not None:
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
        return read_usage(self._fields, self._provider)
