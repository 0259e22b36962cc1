"""The billing parts of a usage as ``model_calls`` stores them (``usage_details``), and back.

Pure; no I/O. ``budgetlens.pricing`` re-exports :func:`usage_details` and
:func:`usage_from_details`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from budgetlens.price_file import USAGE_KEYS
from budgetlens.usage import Usage

__all__ = ["TOKEN_COLUMNS", "usage_details", "usage_from_details"]

#: The ``model_calls`` token columns (the rest of a usage is in ``usage_details``).
TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)

#: Usage fields stored in ``model_calls.usage_details`` (the token columns hold the rest).
_DETAIL_FIELDS = (
    *(name for name in USAGE_KEYS if name not in TOKEN_COLUMNS),
    "service_tier",
    "provider_total_tokens",
)


def usage_details(usage: Usage | None) -> str | None:
    """``model_calls.usage_details``: a JSON object of the billing parts of ``usage`` beyond the
    token columns (audio/image/video tokens, 1h cache writes, web searches, service tier, the
    provider's own total when it disagrees with the parts), only
    those reported; None when there are none."""
    if usage is None:
        return None
    parts = {name: getattr(usage, name) for name in _DETAIL_FIELDS if getattr(usage, name)}
    return json.dumps(parts, sort_keys=True) if parts else None


def usage_from_details(columns: Mapping[str, Any]) -> Usage | None:
    """The :class:`Usage` of a stored ``model_calls`` row (token columns + ``usage_details``), or
    None when its input or output tokens are unknown (NULL). Raises ValueError for a malformed
    ``usage_details``."""
    if columns.get("input_tokens") is None or columns.get("output_tokens") is None:
        return None
    values: dict[str, Any] = {name: int(columns.get(name) or 0) for name in TOKEN_COLUMNS}
    raw = columns.get("usage_details")
    extra = json.loads(raw) if raw else {}
    if not isinstance(extra, dict) or set(extra) - set(_DETAIL_FIELDS):
        raise ValueError(f"usage_details must be an object with keys among {_DETAIL_FIELDS}, got {raw!r}")
    return Usage(**{**values, **extra})
