"""A rejected attribute value is named by its OTLP kind with the right article (new-user finding
11): ``got an array``, ``got bytes``, never protobuf's ``got a ArrayValue``."""

from __future__ import annotations

import pytest

from budgetlens.otlp.attributes import SpanRejected, _scalar_text


class ArrayValue:  # protobuf's name for an OTLP array value
    pass


class KeyValueList:
    pass


@pytest.mark.parametrize(
    ("value", "noun"),
    [
        (ArrayValue(), "got an array"),
        (KeyValueList(), "got a key-value list"),
        (b"\x00\x01", "got bytes"),
        ([1, 2], "got an array"),
        ({"a": 1}, "got a key-value list"),
        (object(), "got an object"),
    ],
)
def test_a_non_scalar_attribute_is_named_by_its_kind_with_the_right_article(value, noun):
    with pytest.raises(SpanRejected) as info:
        _scalar_text("budgetlens.run_id", value)
    message = str(info.value)
    assert message == f"attribute budgetlens.run_id must be a string ({noun})"
    assert "got a ArrayValue" not in message and "got a bytes" not in message
