"""Which billing parts of a usage a model has no rate for (``budgetlens.pricing``'s rule).

Server tool use (web searches, code executions) and audio tokens are billed at their own rates;
a model whose genai-prices entry lacks that rate leaves the part *unpriced* (named in
``CallPrice.unpriced`` / ``model_calls.unpriced_parts``), never charged at another rate: for
audio, genai-prices would charge it at the text rate, so the priced part is the usage with the
audio taken out (:func:`without_parts`). Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from budgetlens.usage_types import Usage

__all__ = ["unpriced_audio", "unpriced_fields", "without_parts"]

#: Count fields -> genai-prices price key.
_COUNT_FIELDS = {"web_search_requests": "web_searches_kcount", "code_executions": "code_executions_kcount"}

#: Audio token parts -> (genai-prices price key, the total the part is inside). genai-prices
#: charges audio tokens of a model without an audio rate at its text rate; they are unpriced.
_AUDIO_FIELDS = {
    "input_audio_tokens": ("input_audio_mtok", "input_tokens"),
    "cache_read_audio_tokens": ("cache_audio_read_mtok", "cache_read_tokens"),
    "output_audio_tokens": ("output_audio_mtok", "output_tokens"),
}


def unpriced_fields(usage: Usage, model_price: Any) -> tuple[str, ...]:
    """The parts of ``usage`` (Usage field names) ``model_price`` has no rate for."""
    counts = tuple(
        name
        for name, price_key in _COUNT_FIELDS.items()
        if getattr(usage, name, 0) and getattr(model_price, price_key, None) is None
    )
    return unpriced_audio(usage, model_price) + counts


def unpriced_audio(usage: Usage, model_price: Any) -> tuple[str, ...]:
    """The audio parts of ``usage`` the model has no audio rate for."""
    return tuple(
        name
        for name, (price_key, _) in _AUDIO_FIELDS.items()
        if getattr(usage, name) and getattr(model_price, price_key, None) is None
    )


def without_parts(usage: Usage, names: tuple[str, ...]) -> Usage:
    """``usage`` with the audio parts ``names`` taken out of their totals (the priced part);
    taking out the input audio takes out its cached part too (a part of it)."""
    names = (*names, "cache_read_audio_tokens") if "input_audio_tokens" in names else names
    changes: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        total = _AUDIO_FIELDS[name][1]
        changes[total] = changes.get(total, getattr(usage, total)) - getattr(usage, name)
        changes[name] = 0
    return replace(usage, **changes)
