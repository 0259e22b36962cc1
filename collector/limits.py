"""The shared contract's limit table: every limit's name, unit and rounding, and its validation.

:data:`LIMITS` is the one vocabulary of run limits (design §1, style habit 16): the guard's
constructor and preset keys, the run span attributes, the ``runs`` store columns, the baseline
metrics and the preset rounding all derive from it. :func:`check_limit` is the one owner of "is
this a valid limit value". The guard (:mod:`budgetlens.guard`), the store, the OTLP mapping and the
analysis import this module; it imports only :mod:`budgetlens.semconv`, never the guard.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from budgetlens import semconv as sc

__all__ = [
    "DEFAULT_MAX_TOTAL_TOKENS",
    "MAX_AMOUNT",
    "MAX_COUNT",
    "MAX_MODEL_CHARS",
    "MAX_TOKENS",
    "LIMITS",
    "LIMIT_KEYS",
    "LIMIT_SPECS",
    "SIGNIFICANT",
    "WHOLE_NUMBER_LIMITS",
    "LimitSpec",
    "check_fraction",
    "check_limit",
    "check_limits",
    "check_tokens",
    "resolve_limits",
]


class LimitSpec(NamedTuple):
    """One row of :data:`LIMITS`, the one limit table every limit name is derived from.

    ``name``: the constructor / preset key (``max_total_tokens``); ``unit``: ``tokens``,
    ``count``, ``s`` or ``USD``; ``whole``: True when the limit counts tokens or calls (a whole
    number); ``metric``: the baseline metric (column of the baselines and of ``runs``) that the
    limit bounds; ``span_attribute``: the run span attribute that carries it
    (:mod:`budgetlens.semconv`); ``store_column``: the ``runs`` column holding the limit a run
    ran under; ``preset_step``: the preset rounding step (a number: round up to a multiple of it;
    :data:`SIGNIFICANT`: up to 2 significant figures).
    """

    name: str
    unit: str
    whole: bool
    metric: str
    span_attribute: str
    store_column: str
    preset_step: float | str


#: The preset rounding marker for "up to 2 significant figures" (USD).
SIGNIFICANT = "2 significant figures"


def _row(metric: str, unit: str, whole: bool, step: float | str, attribute: str) -> LimitSpec:
    return LimitSpec("max_" + metric, unit, whole, metric, attribute, "limit_" + metric, step)


#: The one limit table (order: the guard's constructor order).
LIMITS: tuple[LimitSpec, ...] = (
    _row("total_tokens", "tokens", True, 1000, sc.BUDGET_LIMIT_TOTAL_TOKENS),
    _row("input_tokens", "tokens", True, 1000, sc.BUDGET_LIMIT_INPUT_TOKENS),
    _row("output_tokens", "tokens", True, 1000, sc.BUDGET_LIMIT_OUTPUT_TOKENS),
    _row("turns", "count", True, 1, sc.BUDGET_LIMIT_TURNS),
    _row("tool_calls", "count", True, 1, sc.BUDGET_LIMIT_TOOL_CALLS),
    _row("duration_s", "s", False, 5, sc.BUDGET_LIMIT_DURATION_S),
    _row("cost_usd", "USD", False, SIGNIFICANT, sc.BUDGET_LIMIT_COST_USD),
)
#: Limit name -> its row of :data:`LIMITS`.
LIMIT_SPECS: dict[str, LimitSpec] = {spec.name: spec for spec in LIMITS}
#: Limit keys of one preset, in the guard's constructor argument names (units in the names).
LIMIT_KEYS: tuple[str, ...] = tuple(spec.name for spec in LIMITS)
#: The one token bound (tokens, int): the largest token count of one call, and the largest token
#: limit, reservation or per-run use. Far above any model call, and low enough that per-run sums
#: stay inside DuckDB's BIGINT. Checked where a value enters: the guard (limits, reservations,
#: recorded usage through ``budgetlens.usage.Usage``), the preset file, the importers and the
#: collector's span attributes; a value beyond it is refused with a ValueError naming it.
MAX_TOKENS = 10**12
#: Largest turn / tool-call count and turn or tool-call limit (the store's INTEGER).
MAX_COUNT = 2**31 - 1
#: Largest amount (cost in USD, duration in s, percent) a limit or a span may carry.
MAX_AMOUNT = 1e12
#: A bare guard (no limit given) allows this many tokens.
DEFAULT_MAX_TOTAL_TOKENS = 64_000
#: Limits that count tokens or calls: whole numbers (``2.0`` passes, ``2.5`` does not).
WHOLE_NUMBER_LIMITS: tuple[str, ...] = tuple(spec.name for spec in LIMITS if spec.whole)


_FRACTIONAL = frozenset(spec.name for spec in LIMITS if not spec.whole)


# --- validation ---------------------------------------------------------------------------------
def check_limit(name: str, value: Any, *, label: str | None = None) -> None:
    """Check one limit value: None (no limit), or a finite number >= 0 (not NaN, not infinity,
    not a bool); a whole number unless ``name`` is ``max_duration_s`` or ``max_cost_usd``; at most
    :data:`MAX_TOKENS` (token limits), :data:`MAX_COUNT` (turns, tool calls) or
    :data:`MAX_AMOUNT` (seconds, USD), the bounds the collector stores.
    A limit of 0 is valid and allows nothing of its kind.

    ``label`` names the value in the message (default ``name``, e.g. ``"file: presets.qa.max_turns"``).
    Raises ValueError naming it and the rule.
    """
    if value is None:
        return
    label = label or name
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{label} must be a finite number >= 0, or None for no limit; got {value!r}")
    if name not in _FRACTIONAL and value != int(value):
        raise ValueError(f"{label} must be a whole number, got {value!r}")
    unit = LIMIT_SPECS[name].unit if name in LIMIT_SPECS else "tokens"
    maximum = MAX_TOKENS if unit == "tokens" else MAX_COUNT if unit == "count" else MAX_AMOUNT
    if value > maximum:
        raise ValueError(
            f"{label} must be at most {maximum:.0e} {unit} (the collector's bound), got {value!r}"
        )


def check_tokens(value: int, label: str) -> None:
    """Check one token count against :data:`MAX_TOKENS` (the value is already an int >= 0).

    Raises ValueError naming ``label`` and the bound."""
    if value > MAX_TOKENS:
        raise ValueError(
            f"{label} must be at most {MAX_TOKENS:.0e} tokens (the one token bound), got {value}"
        )


def check_limits(limits: Mapping[str, Any]) -> None:
    """Check limits keyed by :data:`LIMIT_KEYS` names, in order.

    Raises ValueError naming an unknown limit or, as :func:`check_limit`, an invalid value.
    """
    for name, value in limits.items():
        if name not in LIMIT_KEYS:
            raise ValueError(f"unknown limit {name!r}; expected one of {LIMIT_KEYS}")
        check_limit(name, value)


def resolve_limits(limits: Mapping[str, Any], *, default: bool = True) -> dict[str, float | None]:
    """All :data:`LIMIT_KEYS` (missing ones None) after :func:`check_limits`; with no limit given
    and ``default``, ``max_total_tokens`` is :data:`DEFAULT_MAX_TOTAL_TOKENS` (a guard with only
    alert-only limits passes ``default=False``). Raises ValueError as :func:`check_limits`."""
    check_limits(limits)
    resolved = {name: limits.get(name) for name in LIMIT_KEYS}
    if default and all(v is None for v in resolved.values()):
        resolved["max_total_tokens"] = DEFAULT_MAX_TOTAL_TOKENS
    return resolved


def check_fraction(name: str, value: Any) -> None:
    """Check a threshold: a number in (0, 1]. Raises ValueError naming ``name`` and the rule."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")


#: The longest model name the collector stores (the cap style of ``budgetlens.run_id``).
MAX_MODEL_CHARS = 256


def model_name_problem(name: str) -> str | None:
    """What is wrong with a model name (None: nothing): longer than :data:`MAX_MODEL_CHARS`
    characters, or holding a control character (NUL, newline, ... : U+0000-U+001F, U+007F)."""
    if len(name) > MAX_MODEL_CHARS:
        return f"of at most {MAX_MODEL_CHARS} characters (got {len(name)})"
    if _CONTROL_CHARACTER.search(name):
        return "without control characters (got one, e.g. NUL or a newline)"
    return None


_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")

#: Longest run id (``budgetlens.run_id``, characters); it is the store's primary key.
MAX_RUN_ID_CHARS = 256


def run_id_problem(value: object) -> str | None:
    """What is wrong with a run id (None: nothing), as a rule to name after the field: a
    string of 1-:data:`MAX_RUN_ID_CHARS` characters, not only whitespace, without control
    characters. The guard refuses such an id at construction and the collector rejects the span
    that carries it, so nothing the guard accepts is refused by the collector."""
    if type(value) is not str or not value or len(value) > MAX_RUN_ID_CHARS:
        return f"a non-empty string of at most {MAX_RUN_ID_CHARS} characters"
    if value.isspace():
        return "a string with at least one character that is not whitespace"
    if _CONTROL_CHARACTER.search(value):
        return "a string without control characters (NUL, newline, ...)"
    return None
