"""The guard refuses a usage it would misread (issue 23): one rule, naming the field and the rule."""

from __future__ import annotations

import pytest

from budgetlens import RunBudget
from budgetlens.usage import Usage
from budgetlens.usage_check import check_usage_payload


@pytest.mark.parametrize("payload", [[1, 2], (3, 4), "12", 12, 1.5, b"x", True])
def test_a_payload_that_is_no_usage_is_a_type_error(payload):
    with pytest.raises(TypeError, match="usage must be None, a budgetlens.usage.Usage"):
        RunBudget(max_total_tokens=1000).record(payload, model="gpt-4o")


@pytest.mark.parametrize(
    "payload, keys",
    [({"foo": 1}, "foo"), ({"prompt_tokns": 12, "completion_tokns": 3}, "completion_tokns, prompt_tokns")],
)
def test_a_mapping_without_a_known_usage_key_names_its_keys(payload, keys):
    budget = RunBudget(max_total_tokens=1000, unknown_usage="block")
    with pytest.raises(ValueError, match=f"usage has no known token key \\(got {keys}\\)"):
        budget.record(payload, model="gpt-4o")
    # the typo did not count as a call without usage: the run is not blocked by it
    assert budget.record({"prompt_tokens": 10, "completion_tokens": 2}, model="gpt-4o").name == "CONTINUE"


@pytest.mark.parametrize(
    "payload, field, got",
    [
        ({"prompt_tokens": "12", "completion_tokens": 1}, "'prompt_tokens'", "a string"),
        ({"prompt_tokens": 12.0, "completion_tokens": 1}, "'prompt_tokens'", "a float"),
        ({"input_tokens": 5, "output_tokens": True}, "'output_tokens'", "a bool"),
        ({"input_tokens": -1, "output_tokens": 1}, "'input_tokens'", "negative"),
        ({"input_tokens": 10**13, "output_tokens": 1}, "'input_tokens'", "above the bound"),
        ({"usage": {"prompt_tokens": "3", "completion_tokens": 1}}, "usage.'prompt_tokens'", "a string"),
    ],
)
def test_a_bad_count_names_the_field_and_the_rule(payload, field, got):
    with pytest.raises(ValueError, match="must be a whole number from 0 to 1e\\+12") as error:
        RunBudget(max_total_tokens=1000).record(payload, model="gpt-4o")
    assert f"usage field {field}" in str(error.value) and got in str(error.value)


def test_good_payloads_pass_and_a_response_without_usage_stays_unknown():
    check_usage_payload(
        {"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}
    )
    check_usage_payload({"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}})
    check_usage_payload({"id": "resp-1", "choices": []})  # a response without usage: unknown, no error
    budget = RunBudget(max_total_tokens=100_000)
    budget.record(Usage(3, 2), model="gpt-4o")
    budget.record({"id": "resp-1", "choices": []}, model="gpt-4o")
    assert budget.finish().usage_status == "unknown"
