"""A rejected attribute's value never comes back: ``partial_success`` and the collector's logs
name the attribute and the rule, not the value (an attribute may carry a secret)."""

from __future__ import annotations

import json
import logging

import pytest
import requests
from _collector_helpers import SpanRecorder, live_collector, otlp_json, otlp_protobuf
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from budgetlens import semconv as sc
from budgetlens.otlp import JSON, PROTOBUF
from budgetlens.otlp.attributes import SpanRejected, amount, choice, count

SECRET = "sk-live-SECRET-4f9a2c"

#: One bad span per rule that quotes nothing: (attribute, value holding the secret).
PLANTS = [
    ("gen_ai.usage.input_tokens", SECRET),
    ("gen_ai.usage.output_tokens", f"12{SECRET}"),
    (sc.BUDGET_STOP_REASON, SECRET),
    (sc.BUDGET_USAGE_STATUS, SECRET),
    (sc.BUDGET_COST_USD, SECRET),
    (sc.BUDGET_RETRYABLE, SECRET),
    (sc.BUDGET_RUN_ID, SECRET * 40),
]


@pytest.mark.parametrize(
    "check",
    [
        lambda: count({"k": SECRET}, "k"),
        lambda: amount({"k": SECRET}, "k"),
        lambda: choice({"k": SECRET}, "k", ("a", "b")),
    ],
)
def test_attribute_rules_name_the_attribute_and_the_rule_not_the_value(check):
    with pytest.raises(SpanRejected) as error:
        check()
    assert "attribute k must be" in str(error.value) and SECRET not in str(error.value)
    assert f"a string of {len(SECRET)} characters" in str(error.value)


def _spans():
    recorder = SpanRecorder()
    recorder.guard_run("run-ok", "triage", [("gpt-4o", 10, 2)])
    for key, value in PLANTS:
        with recorder.tracer.start_as_current_span("chat bad") as bad:
            bad.set_attributes({"gen_ai.operation.name": "chat", key: value})
    return recorder.spans()


def _json_with_bad_types() -> bytes:
    document = otlp_json(_spans())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["attributes"].append({"key": "x", "value": {"intValue": SECRET}})
    spans[1]["attributes"].append({"key": "y", "value": {"doubleValue": SECRET}})
    spans[2]["spanId"] = SECRET
    spans[3]["startTimeUnixNano"] = SECRET
    return json.dumps(document).encode()


@pytest.mark.system
@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
def test_no_response_or_log_line_echoes_a_rejected_value(db_path, free_port, kind, caplog):
    caplog.set_level(logging.DEBUG)
    body = otlp_protobuf(_spans()) if kind == PROTOBUF else _json_with_bad_types()
    messages = []
    with live_collector(db_path, free_port) as live:
        for _ in range(20):
            response = requests.post(f"{live.url}/v1/traces", data=body, headers={"Content-Type": kind})
            assert response.status_code == 200
            assert SECRET not in response.text and SECRET.encode() not in response.content
            if kind == PROTOBUF:
                partial = ExportTraceServiceResponse.FromString(response.content).partial_success
                messages.append((partial.rejected_spans, partial.error_message))
            else:
                partial = response.json()["partialSuccess"]
                messages.append((int(partial["rejectedSpans"]), partial["errorMessage"]))
    rejected, message = messages[0]
    assert rejected >= 5
    assert "must be" in message and ("gen_ai.usage.input_tokens" in message or "intValue" in message)
    assert all(SECRET not in m for _, m in messages)
    assert SECRET not in caplog.text
