"""The normalized usage shape (design §2): :class:`Usage`, and the rule for flat counts.

``input_tokens`` counts ALL input, including cache reads and cache writes; ``output_tokens``
counts ALL output, including reasoning; ``cache_read_tokens``, ``cache_write_tokens`` and
``reasoning_tokens`` are *parts* of those totals and are never added again. Provider payloads
are read into it by ``budgetlens.usage`` (shapes in ``budgetlens.usage_shapes``); import
``Usage`` from ``budgetlens.usage``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from budgetlens.limits import MAX_TOKENS, check_tokens

TokenCounts = tuple[int | None, int | None, int | None, int | None, int | None, int | None]
"""(input, output, total, cache read, cache write, reasoning) tokens; None = not reported."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call (or a sum of calls), in tokens (int, >= 0).

    ``input_tokens`` includes ``cache_read_tokens`` and ``cache_write_tokens``; ``output_tokens``
    includes ``reasoning_tokens``. Raises ``ValueError`` naming the field when a value is not a
    non-negative int, is above ``budgetlens.limits.MAX_TOKENS`` (10^12, the one token bound), or
    a part exceeds its total.
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
    #: The provider's own total (tokens) when it disagrees with input + output (None: it agrees
    #: or none was stated). Kept beside the parts, never used as the usage (flag
    #: ``total_mismatch``); not summed by ``+``.
    provider_total_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self._plain():
            self._check_fields()
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
        if (
            self.cache_write_1h_tokens
            or self.input_audio_tokens
            or self.input_image_tokens
            or self.input_video_tokens
            or self.cache_read_audio_tokens
            or self.output_audio_tokens
            or self.output_image_tokens
        ):  # all zero: every part is within its total
            self._check_billing_parts()

    def _plain(self) -> bool:
        """True when every count is an int from 0 to ``MAX_TOKENS`` (not a bool), the service
        tier None or a str and the provider total None or such an int: what ``_check_fields``
        accepts, asked without naming a field (the usual case, fast)."""
        for value in (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
            self.cache_write_1h_tokens,
            self.input_audio_tokens,
            self.input_image_tokens,
            self.input_video_tokens,
            self.cache_read_audio_tokens,
            self.output_audio_tokens,
            self.output_image_tokens,
            self.web_search_requests,
            self.code_executions,
        ):
            if type(value) is not int or not 0 <= value <= MAX_TOKENS:
                return False
        total, tier = self.provider_total_tokens, self.service_tier
        if total is not None and (type(total) is not int or not 0 <= total <= MAX_TOKENS):
            return False
        return tier is None or isinstance(tier, str)

    def _check_fields(self) -> None:
        """Each field of the right type and range, in field order (raises ValueError naming it)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "provider_total_tokens" and value is None:
                continue
            if f.name == "service_tier":
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"Usage.service_tier must be a str or None, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Usage.{f.name} must be an int >= 0, got {value!r}")
            check_tokens(value, f"Usage.{f.name}")

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
            if f.name not in _NOT_SUMMED
        }
        tier = self.service_tier if self.service_tier == other.service_tier else None
        return Usage(**sums, service_tier=tier)


_NOT_SUMMED = ("service_tier", "provider_total_tokens")


def including_parts(total: int, parts: int) -> int:
    """``total`` when it can hold ``parts``; ``total + parts`` when the parts exceed it (the
    source reported the total WITHOUT them: Anthropic/Bedrock input without the cache buckets,
    Gemini output without thoughts). Tokens (int, >= 0)."""
    return total + parts if parts > total else total


def normalize_counts(counts: TokenCounts) -> tuple[TokenCounts, bool, int | None]:
    """Flat token counts (``TokenCounts``, e.g. read from span attributes) in the standard
    convention, whether they had to be normalized (:func:`including_parts` for the input with
    cache read + write, and the output with reasoning), and the reported total when it disagrees
    with the parts (None when it agrees with input + output before or after that, or there is
    none). The parts are the usage: the total is then input + output, the provider's own kept
    beside it by the caller (flag ``total_mismatch``), never used in their place. Raises
    ``ValueError`` when a normalized input or output exceeds ``MAX_TOKENS`` (the one token bound)."""
    inp, outp, total, cache_read, cache_write, reasoning = counts
    fixed_inp = None if inp is None else including_parts(inp, (cache_read or 0) + (cache_write or 0))
    fixed_out = None if outp is None else including_parts(outp, reasoning or 0)
    if fixed_inp is not None and fixed_inp > MAX_TOKENS:
        raise ValueError(
            f"input {inp} + cache read {cache_read or 0} + cache write {cache_write or 0} = {fixed_inp} "
            f"exceeds the one token bound {MAX_TOKENS:.0e} (the input must include its cache)"
        )
    if fixed_out is not None and fixed_out > MAX_TOKENS:
        raise ValueError(
            f"output {outp} + reasoning {reasoning} = {fixed_out} exceeds the one token bound "
            f"{MAX_TOKENS:.0e} (the output must include its reasoning)"
        )
    normalized = (fixed_inp, fixed_out) != (inp, outp)
    disagreeing = None
    if total is not None and inp is not None and outp is not None:
        assert fixed_inp is not None and fixed_out is not None
        if total not in (inp + outp, fixed_inp + fixed_out):
            disagreeing = total
        total = fixed_inp + fixed_out
    return (fixed_inp, fixed_out, total, cache_read, cache_write, reasoning), normalized, disagreeing


__all__ = ["TokenCounts", "Usage", "including_parts", "normalize_counts"]
