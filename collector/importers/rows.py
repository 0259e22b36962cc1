"""Building store rows from source values: stable ids, timestamps and durations, the usage
columns of a call and its price.

Unknown stays unknown: a call without usage gets NULL token columns and usage_status
``unknown`` (:func:`usage_columns`), and an unpriced call a NULL cost (:func:`price`), never 0.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

from budgetlens import semconv
from budgetlens.importers.validation import parse_timestamp
from budgetlens.usage import Usage

log = logging.getLogger(__name__)


def stable_id(*parts: object) -> str:
    """A stable 40-hex id (sha1) of ``parts``; the same identity always gives the same id."""
    text = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def parse_iso(value: object) -> dt.datetime | None:
    """An ISO-8601 timestamp (``Z`` or offset; naive means UTC) as an aware UTC datetime, or None
    when the value is missing or unparseable (lenient; see
    :func:`budgetlens.importers.validation.parse_timestamp`)."""
    try:
        return parse_timestamp(value, "timestamp")
    except ValueError:
        return None


def from_unix(value: object) -> dt.datetime | None:
    """Seconds since the epoch (int or float) as an aware UTC datetime, or None when missing,
    not a number, or <= 0. Raises ValueError when the number is beyond the datetime range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    try:
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"unix timestamp out of range: {value!r}") from None


def seconds_between(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    """``end - start`` in seconds (float, >= 0), or None when either is missing."""
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def extend_span(holder, when: dt.datetime | None) -> None:
    """Widen ``holder.first`` / ``holder.last`` (aware UTC datetimes or None) to include
    ``when``; a missing ``when`` (None) changes nothing."""
    if when is not None:
        if holder.first is None or when < holder.first:
            holder.first = when
        if holder.last is None or when > holder.last:
            holder.last = when


def usage_columns(usage: Usage | None) -> dict:
    """The token columns and usage_status of a call.

    Reported usage fills the token columns (tokens, int >= 0); ``None`` (the source has no usage
    for this call) leaves them NULL with usage_status ``unknown``, never 0.
    """
    if usage is None:
        return {
            "input_tokens": None,
            "output_tokens": None,
            "total_tokens": None,
            "cache_read_tokens": None,
            "cache_write_tokens": None,
            "reasoning_tokens": None,
            "usage_status": semconv.USAGE_UNKNOWN,
        }
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "usage_status": semconv.USAGE_REPORTED,
        # the provider's total disagrees with its parts: kept in usage_details, flagged
        "quality": None if usage.provider_total_tokens is None else "total_mismatch",
    }


def price(
    model: str | None, usage: Usage | None, provider: str | None = None, at: dt.datetime | None = None
) -> dict[str, Any]:
    """The pricing columns of one call (``cost_usd``, ``price_version``, ``usage_details``,
    ``unpriced_parts``) from ``budgetlens.pricing.price_columns``: genai-prices' own
    calculation over the whole usage at the call's time ``at`` (a datetime; None = now), or a
    NULL cost when the usage is unknown or the model unpriced (never $0 for "no price").

    The user price file (``BUDGETLENS_PRICES_FILE``) is validated once at the start of an import
    (:func:`check_price_file`).
    """
    from budgetlens.pricing import price_columns

    return price_columns(model, usage, provider, at=at)


def source_cost(cost: float | None, usage: Usage | None) -> dict[str, Any]:
    """The pricing columns of a call whose cost the source states (NULL = unknown): no
    ``price_version`` (a re-price never changes it)."""
    from budgetlens.pricing import usage_details

    return {
        "cost_usd": cost,
        "price_version": None,
        "usage_details": usage_details(usage),
        "unpriced_parts": None,
    }


def check_price_file() -> None:
    """Validate the user price file named by ``BUDGETLENS_PRICES_FILE`` (if set) before an
    import reads anything, so a bad file fails the import instead of leaving calls unpriced.

    Raises ValueError naming the file, the variable and the rule broken (missing or unreadable
    file, unknown key or unit, a price that is not a finite number >= 0, a syntax error);
    delegates to ``budgetlens.pricing.check_prices_file``.
    """
    from budgetlens.pricing import check_prices_file

    check_prices_file()


def provider_from_model(model: str | None, default: str | None = None) -> str | None:
    """The ``gen_ai.provider.name`` implied by a LiteLLM-style ``provider/model`` name, else
    ``default``."""
    if model and "/" in model:
        prefix = model.split("/", 1)[0].lower()
        return {"bedrock": "aws.bedrock", "vertex_ai": "gcp.vertex_ai", "gemini": "gcp.gemini"}.get(
            prefix, prefix
        )
    return default
