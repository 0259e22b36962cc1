"""Why an OTLP/JSON span was rejected, in words that name the field, the attribute key and the
rule, never the value (reasons go back in ``partial_success`` and into logs, and an attribute
may hold a secret).

protobuf's JSON parser (``json_format.ParseError``) quotes the offending value and names the
field path without the attribute it belongs to. ``reason`` reads the path and the kind of
failure from that error, then finds the attribute by parsing the span's attribute lists (its
own, its events' and its links') one key-value at a time.
"""

from __future__ import annotations

import re

from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

#: The longest text of a client's (a header value, an attribute key) quoted in a reason.
MAX_QUOTED_CHARS = 64

#: The field names protobuf's JSON parser puts in its messages ("Failed to parse X field: ...").
_PARSE_FIELD = re.compile(r"Failed to parse (\w+) field")
#: The path some of its messages end with ("... at Span.attributes[0].value.intValue.").
_AT_PATH = re.compile(r" at \w+((?:\.\w+|\[\d+\])+)")
#: What its messages say when a number does not fit the field (int64 or double).
_OUT_OF_RANGE = ("Value out of range", "value too large")
#: What its messages say when a value is nested past protobuf's recursion limit.
_TOO_DEEP = "Message too deep"
#: protobuf's default recursion limit (message levels), named in the reason.
RECURSION_LIMIT = 100
#: The value fields of an OTLP ``AnyValue`` and what each one takes in OTLP/JSON.
_VALUE_RULES = {
    "intValue": "an int64 (a JSON integer or a decimal string)",
    "doubleValue": 'a double (a JSON number, or "NaN", "Infinity", "-Infinity")',
    "boolValue": "true or false",
    "stringValue": "a string",
    "bytesValue": "a base64 string",
    "arrayValue": "an object with a values list",
    "kvlistValue": "an object with a values list of key-value objects",
}


def quoted(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``text`` as a Python literal (non-printable and non-ASCII characters escaped), cut to
    its first ``limit`` characters ("..." marks a cut): safe for a log line or an error body."""
    cut = text[:limit]
    return ascii(cut) + ("..." if len(text) > limit else "")


def reason(error: Exception, span: dict) -> str:
    """The rejection reason for ``error`` raised while parsing the OTLP/JSON ``span`` (dict):
    the attribute key (quoted, capped) and where it sits, the value field, and "out of range"
    when a number does not fit it, else "wrong type" with what the field takes."""
    text = str(error)
    fields = _PARSE_FIELD.findall(text)
    at = _AT_PATH.search(text)
    path = re.sub(r"\[\d+\]", "", at.group(1)[1:]) if at else ".".join(fields)
    leaf = next((name for name in reversed(re.split(r"[.\[\]]+", path)) if name in _VALUE_RULES), None)
    out_of_range = any(marker in text for marker in _OUT_OF_RANGE)
    if _TOO_DEEP in text:
        rule = (
            f"a value nested deeper than protobuf's limit of {RECURSION_LIMIT} message levels "
            "(an AnyValue array or kvlist takes two a level)"
        )
    elif out_of_range:
        rule = f"a number out of range for {'int64' if leaf == 'intValue' else 'a double'}"
    elif leaf is not None:
        rule = f"a value of the wrong type ({leaf} takes {_VALUE_RULES[leaf]})"
    else:
        rule = "a value of the wrong type for OTLP/JSON"
    where = _failing_attribute(span)
    if where is not None:
        key, place = where
        return f"attribute {quoted(key)} ({place}) has {rule}"
    if path:
        return f"field {path} has {rule}"
    return f"a field has {rule} ({type(error).__name__})"


def _failing_attribute(span: dict) -> tuple[str, str] | None:
    """(key, where) of the first attribute of ``span`` that does not parse, where being
    ``attributes``, ``events[i].attributes`` or ``links[i].attributes``; None when every
    attribute parses (the error is elsewhere)."""
    places: list[tuple[str, object]] = [("attributes", span.get("attributes"))]
    for name in ("events", "links"):
        items = span.get(name)
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict):
                places.append((f"{name}[{index}].attributes", item.get("attributes")))
    for place, attributes in places:
        for attribute in attributes if isinstance(attributes, list) else ():
            if not isinstance(attribute, dict):
                continue
            try:
                json_format.ParseDict(attribute, KeyValue(), ignore_unknown_fields=True)
            except (json_format.ParseError, TypeError, ValueError, AttributeError):
                key = attribute.get("key")
                return (key if isinstance(key, str) else "(no key)"), place
    return None
