"""The guard's check of a usage payload before it is recorded (issue 23: careless clients).

A usage handed to ``RunBudget.record`` must say what it means: None (the call ended without
usage), a :class:`budgetlens.usage.Usage`, a provider usage or response (dict or SDK object).
:func:`check_usage_payload` raises instead of counting a mistake as "a call without usage"
(which under ``unknown_usage="block"`` would block the rest of the run):

- a list, tuple, string, bytes or number is not a usage: ``TypeError``;
- a mapping of numbers none of whose keys is a known usage key (a typo such as
  ``{"prompt_tokns": 12}``): ``ValueError`` naming the keys;
- a count that is a string, a float, a boolean, negative or above
  :data:`budgetlens.limits.MAX_TOKENS` (the collector's bound): ``ValueError`` naming the field
  and the rule. The guard takes whole numbers only (``{"prompt_tokens": "12"}`` is refused).

Importers read logs through :func:`budgetlens.usage.normalize_usage` directly and keep its
lenient reading of integral floats and digit strings found in files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from budgetlens.limits import MAX_TOKENS
from budgetlens.usage_shapes import as_mapping, has_usage_shape

_NOT_USAGE = (list, tuple, set, frozenset, str, bytes, int, float, bool)
_CONTAINER_KEYS = ("usage", "usageMetadata", "usage_metadata", "usageDetails")


def _is_count_key(key: str) -> bool:
    lowered = key.lower()
    return "token" in lowered or lowered in ("input", "output", "total")


def _check_counts(usage: Mapping[str, Any], where: str) -> None:
    for key, value in usage.items():
        if value is None or not isinstance(key, str) or not _is_count_key(key):
            continue
        if isinstance(value, Mapping | list | tuple):
            continue  # a details part (``prompt_tokens_details``), read by the normalizer
        if type(value) is not int or not 0 <= value <= MAX_TOKENS:
            got = "a string" if isinstance(value, str) else f"a {type(value).__name__}"
            if type(value) is int:
                got = "negative" if value < 0 else "above the bound"
            raise ValueError(
                f"usage field {where}{key!r} must be a whole number from 0 to {MAX_TOKENS:.0e} "
                f"(an int, not a string, float or boolean), got {got}"
            )


def check_usage_payload(payload: Any) -> None:
    """Raise for a usage payload the guard would otherwise misread (see the module docstring).

    ``payload``: what ``RunBudget.record`` received (not None). Raises ``TypeError`` for a
    payload that is not a mapping, a ``Usage`` or an object; ``ValueError`` naming the field
    and the rule for an unknown-keys-only mapping or a bad count. Returns None when it is fine.
    """
    if isinstance(payload, _NOT_USAGE):
        raise TypeError(
            "usage must be None, a budgetlens.usage.Usage, or a provider usage/response "
            f"(a mapping or SDK object), got a {type(payload).__name__}"
        )
    mapping = as_mapping(payload)
    if not mapping:
        return
    where = ""
    for key in _CONTAINER_KEYS:
        inner = as_mapping(mapping.get(key))
        if inner:
            mapping, where = inner, f"{key}."
            break
    _check_counts(mapping, where)
    numbers_only = all(v is None or type(v) in (int, float) for v in mapping.values())
    no_count_key = not any(isinstance(k, str) and _is_count_key(k) for k in mapping)
    if numbers_only and no_count_key and not has_usage_shape(mapping):
        keys = ", ".join(sorted(map(str, mapping)))
        raise ValueError(
            f"usage has no known token key (got {keys}); expected e.g. prompt_tokens/"
            "completion_tokens, input_tokens/output_tokens, promptTokenCount/candidatesTokenCount"
        )
