"""Turning one source line (or one-document file) into rows without ever aborting an import.

Source values are validated where they are read (:func:`source_number`, :func:`text`,
:func:`parse_timestamp`, :func:`source_usage`): a malformed one raises ValueError naming the
field and the rule. :func:`attempt` / :func:`checked_rows` are the one place that catches those
data errors (``DATA_ERRORS``) and reports the line as ``file:line: reason``; all rows of a
rejected line are dropped together. Every row is checked against the store's column types by
:func:`check_row` before it is queued, so nothing can fail later when a batch is written.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from budgetlens.importers.report import ImportReport, shorten
from budgetlens.limits import MAX_TOKENS
from budgetlens.store.schema import BUDGET_EVENT_COLUMNS, MODEL_CALL_COLUMNS, RUN_RECORD_COLUMNS
from budgetlens.usage import Usage, normalize_usage

Row = dict
Kind = str  # "call" | "record" | "event"

#: Errors a malformed value raises while a line is turned into rows (caught per line by
#: :func:`attempt`). pyarrow's ArrowTypeError/ArrowInvalid subclass TypeError/ValueError.
DATA_ERRORS = (TypeError, ValueError, ArithmeticError, LookupError, AttributeError, RecursionError)


# --- source values ---------------------------------------------------------------------------


def source_number(value: object, name: str, *, integer: bool = False) -> float | int | None:
    """A cost, token count or duration from a source: None when missing, else the number.

    Raises ValueError naming ``name`` when the value is not a number (bool and strings included),
    is NaN or infinite, or is negative; with ``integer`` also when it is not a whole number.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {shorten(repr(value))}")
    if isinstance(value, float) and not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        return int(value)
    return value


def as_dict(value: object) -> dict:
    """``value`` when it is a JSON object (dict), else an empty dict (a missing or malformed
    optional section reads as empty)."""
    return value if isinstance(value, dict) else {}


def text(value: object, name: str) -> str | None:
    """An optional string field of a source line: None when missing, else the string.
    Raises ValueError naming ``name`` for any other type (a list, an object, a number)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string, got {type(value).__name__}")


def parse_timestamp(value: object, name: str) -> dt.datetime | None:
    """A source timestamp (ISO-8601 string, ``Z`` or offset; naive means UTC) as an aware UTC
    datetime; None when missing (None or "").

    Raises ValueError naming ``name`` when the value is present but not a parseable ISO-8601
    string or out of the datetime range, so the line holding it is reported and skipped.
    Timestamps are compared as datetimes, never as strings (offsets differ).
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an ISO-8601 string, got {shorten(repr(value))}")
    try:
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=dt.UTC)
        return parsed.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"{name} is not an ISO-8601 timestamp: {shorten(repr(value))}") from None


def source_usage(payload: object, name: str, provider: str | None = None) -> Usage | None:
    """``budgetlens.usage.normalize_usage(payload, provider=provider)``: the call's usage, or None
    when the payload carries none (unknown, never 0).

    Raises ValueError prefixed with ``name`` (the field holding the payload) when a count is
    negative, not a number, NaN or infinite.
    """
    try:
        return normalize_usage(payload, provider=provider)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


# --- one line (or document) -> rows, robustly -------------------------------------------------


def describe(error: BaseException) -> str:
    """A one-line reason for a data error: ValueError messages as they are (they name the field
    and the rule), other errors prefixed with their type."""
    if type(error) is ValueError:
        return shorten(error)
    if isinstance(error, KeyError):
        return f"missing key {shorten(error)}"
    return f"{type(error).__name__}: {shorten(error)}"


def attempt(report: ImportReport, path: Path | str, lineno: int | None, fn: Callable, *args):
    """``fn(*args)``, or None after reporting ``file:line: reason`` when it raises a data error
    (``DATA_ERRORS``). The one place importers catch malformed values; anything else (a store
    error, a bug outside the data path such as a KeyboardInterrupt) propagates."""
    try:
        return fn(*args)
    except DATA_ERRORS as error:
        report.bad_line(path, lineno, describe(error))
        return None


def checked_rows(
    report: ImportReport, path: Path | str, lineno: int | None, rows: Iterable[tuple[Kind, Row]]
) -> list[tuple[Kind, Row]]:
    """All ``(kind, row)`` pairs of one line or document, each validated with
    :func:`check_row`; ``rows`` is usually a generator, run here. When producing or validating
    any of them raises a data error, the line is reported as ``file:line: reason`` and NONE of
    its rows is returned (a line is imported whole or not at all)."""
    return attempt(report, path, lineno, _checked_list, rows) or []


def _checked_list(rows: Iterable[tuple[Kind, Row]]) -> list[tuple[Kind, Row]]:
    out = [(kind, row) for kind, row in rows]
    for kind, row in out:
        check_row(kind, row)
    return out


# --- store column types ----------------------------------------------------------------------

_COLUMNS = {
    "call": frozenset(MODEL_CALL_COLUMNS),
    "record": frozenset(RUN_RECORD_COLUMNS),
    "event": frozenset(BUDGET_EVENT_COLUMNS),
}
_INT32_COLUMNS = frozenset({"turn", "turns", "tool_calls", "limit_turns", "limit_tool_calls"})
_SIGNED_COLUMNS = frozenset({"remaining_tokens"})
_BOOL_COLUMNS = frozenset({"is_subagent", "retryable"})
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1


def _column_rule(column: str) -> str:
    if column in _INT32_COLUMNS:
        return "int32"
    if column.endswith("_tokens"):
        return "int64"
    if column.endswith(("_usd", "_s")) or column == "percent":
        return "float"
    if column.endswith("_utc"):
        return "datetime"
    if column in _BOOL_COLUMNS:
        return "bool"
    return "str"


_RULES = {kind: {c: _column_rule(c) for c in cols} for kind, cols in _COLUMNS.items()}


def check_row(kind: Kind, row: Mapping) -> None:
    """Validate one row against the store's column types before it is queued.

    Rules (None is always allowed): text columns hold ``str`` (valid UTF-8, no lone
    surrogates); ``*_tokens`` ints in 0..``budgetlens.limits.MAX_TOKENS`` (10^12; ``remaining_tokens``
    may be negative down to -10^12);
    ``turn``/``turns``/``tool_calls``/``limit_turns``/``limit_tool_calls`` ints in 0..2**31-1;
    ``*_usd``, ``*_s`` and ``percent`` finite numbers >= 0; ``*_utc`` datetimes; booleans bool.
    Raises ValueError naming the column and the rule (KeyError for an unknown ``kind``).
    """
    rules = _RULES[kind]
    for column, value in row.items():
        if value is None:
            continue
        rule = rules.get(column)
        if rule is None:
            raise ValueError(f"{column!r} is not a column of a {kind} row")
        if rule == "str":
            if type(value) is str and (value.isascii() or _encodable(value)):
                continue
            problem = "a string (valid UTF-8)"
        elif rule == "int64" or rule == "int32":
            if type(value) is int:
                low = -MAX_TOKENS if column in _SIGNED_COLUMNS else 0
                if low <= value <= (_INT32_MAX if rule == "int32" else MAX_TOKENS):
                    continue
            top = _INT32_MAX if rule == "int32" else MAX_TOKENS
            problem = f"a whole number >= 0 of at most {top:.0e} (the one bound)"
        elif rule == "float":
            if (
                type(value) is float and math.isfinite(value) or type(value) is int and value <= _INT64_MAX
            ) and value >= 0:
                continue
            problem = "a finite number >= 0"
        elif rule == "datetime":
            if isinstance(value, dt.datetime):
                continue
            problem = "a timestamp"
        else:
            if type(value) is bool:
                continue
            problem = "true or false"
        raise ValueError(f"{column} must be {problem}, got {shorten(repr(value))}")


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
