"""Rejection reasons of OTLP/JSON values (``budgetlens.otlp.json_reasons``) and the 415's quote:
the attribute key and the rule are named, a number too large for its field is "out of range",
never "wrong type", and no value (nor more than 64 characters of a header) is echoed."""

from __future__ import annotations

import pytest

from budgetlens.otlp import OtlpError
from budgetlens.otlp.decode import decode_json_document, media_type

SECRET = "sk-live-0123456789abcdef"


def _reasons(span_fields: dict) -> list[str]:
    span = {"traceId": "1" * 32, "spanId": "2" * 16, "name": "chat", **span_fields}
    decoded = decode_json_document({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    assert decoded.rejected == 1
    return decoded.errors


def _attribute(key: str, value: dict) -> dict:
    return {"attributes": [{"key": "fine", "value": {"intValue": "3"}}, {"key": key, "value": value}]}


@pytest.mark.parametrize(
    "value, rule",
    [
        ({"intValue": SECRET}, "wrong type (intValue takes an int64"),
        ({"intValue": 1.5}, "wrong type (intValue takes an int64"),
        ({"intValue": True}, "wrong type (intValue takes an int64"),
        ({"intValue": 2**63}, "out of range for int64"),
        ({"intValue": str(2**70)}, "out of range for int64"),
        ({"intValue": -(2**63) - 1}, "out of range for int64"),
        ({"doubleValue": SECRET}, "wrong type (doubleValue takes a double"),
        ({"doubleValue": float("inf")}, "out of range for a double"),
        ({"boolValue": SECRET}, "wrong type (boolValue takes true or false)"),
        ({"boolValue": 1}, "wrong type (boolValue takes true or false)"),
        ({"stringValue": 12345}, "wrong type (stringValue takes a string)"),
        ({"arrayValue": {"values": [{"intValue": SECRET}]}}, "wrong type (intValue takes an int64"),
        ({"arrayValue": {"values": [{"intValue": 2**64}]}}, "out of range for int64"),
        ({"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": SECRET}}]}}, "boolValue takes"),
    ],
)
def test_a_value_of_the_wrong_type_or_out_of_range_names_its_attribute_key_and_the_rule(value, rule):
    (reason,) = _reasons(_attribute("gen_ai.usage.input_tokens", value))
    assert "attribute 'gen_ai.usage.input_tokens' (attributes)" in reason
    assert rule in reason
    assert SECRET not in reason and "12345" not in reason and str(2**63) not in reason


def test_an_event_or_link_attribute_is_named_with_its_place():
    (reason,) = _reasons(
        {
            "events": [
                {"name": "e"},
                {"name": "e", "attributes": [{"key": "ev.k", "value": {"intValue": "x"}}]},
            ]
        }
    )
    assert "attribute 'ev.k' (events[1].attributes) has a value of the wrong type" in reason
    link = {"traceId": "3" * 32, "spanId": "4" * 16, "attributes": [{"key": "ln", "value": {"boolValue": 2}}]}
    (reason,) = _reasons({"links": [link]})
    assert "attribute 'ln' (links[0].attributes)" in reason


def test_a_hostile_attribute_key_is_escaped_and_capped():
    (reason,) = _reasons(_attribute("\x1b[31m" + "k" * 500, {"intValue": SECRET}))
    assert "\x1b" not in reason and "\\x1b[31m" in reason
    assert "k" * 65 not in reason and "k" * 50 in reason


def test_a_span_field_of_the_wrong_type_is_named_without_its_value():
    (reason,) = _reasons({"startTimeUnixNano": SECRET})
    assert "field startTimeUnixNano has a value of the wrong type" in reason and SECRET not in reason


def test_a_resource_attribute_of_the_wrong_type_names_its_key():
    document = {
        "resourceSpans": [
            {"resource": {"attributes": [{"key": "service.name", "value": {"intValue": SECRET}}]}}
        ]
    }
    with pytest.raises(OtlpError) as refused:
        decode_json_document(document)
    assert refused.value.status == 400
    assert "resource: attribute 'service.name' (attributes)" in refused.value.reason
    assert SECRET not in refused.value.reason


def test_the_415_quotes_at_most_64_characters_of_the_content_type_escaped():
    with pytest.raises(OtlpError) as refused:
        media_type("text/plain; x=\u00e9" + SECRET * 20)
    reason = refused.value.reason
    assert refused.value.status == 415 and len(reason) < 160
    assert "'text/plain; x=\\xe9sk-live" in reason and reason.endswith("...)")
    assert SECRET * 3 not in reason
