"""OTLP spans → store rows: the guard's spans, foreign GenAI spans, validation, content, real data."""

from __future__ import annotations

import gzip
import json

import pytest
from _collector_helpers import SpanRecorder, anyagent_spans, otlp_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import SpanKind

from budgetlens import semconv as sc
from budgetlens.otlp import JSON, PROTOBUF, OtlpError, decode, map_spans
from budgetlens.otlp.mapping import map_otlp_json, map_request
from budgetlens.store import read_connection, write_batch, write_connection


def _foreign_call(attributes: dict, name: str = "chat gpt-4o", service: str = "svc"):
    recorder = SpanRecorder(service=service)
    with recorder.tracer.start_as_current_span(name, kind=SpanKind.CLIENT) as span:
        span.set_attributes(attributes)
    return map_request(encode_spans(recorder.spans()), price=False)


def test_guard_run_becomes_a_run_record_calls_and_events():
    recorder = SpanRecorder()
    recorder.guard_run("run-1", "triage", [("gpt-4o", 100, 20), ("gpt-4o", 200, 30)], tools=2, warnings=1)
    mapped = map_request(encode_spans(recorder.spans()))
    assert mapped.rejected == 0 and mapped.spans == 3
    (record,) = mapped.records
    assert record["run_id"] == "run-1" and record["task_type"] == "triage"
    assert (record["turns"], record["tool_calls"], record["total_tokens"]) == (2, 2, 350)
    assert record["stop_reason"] == sc.STOP_COMPLETED and record["limit_total_tokens"] == 100_000
    assert [c["input_tokens"] for c in mapped.calls] == [100, 200]
    assert {c["run_id"] for c in mapped.calls} == {"run-1"}
    assert sorted(e["name"] for e in mapped.events) == [
        sc.EVENT_TOOL_CALL,
        sc.EVENT_TOOL_CALL,
        sc.EVENT_WARNING,
    ]


@pytest.mark.parametrize(
    "attributes, expected",
    [
        # current GenAI semconv (OpenAI instrumentation, cache + reasoning as parts)
        (
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.output_tokens": 300,
                "gen_ai.usage.cache_read.input_tokens": 1000,
                "gen_ai.usage.reasoning.output_tokens": 120,
            },
            {
                "input_tokens": 1200,
                "output_tokens": 300,
                "cache_read_tokens": 1000,
                "reasoning_tokens": 120,
                "provider_name": "openai",
                "request_model": "gpt-4o",
            },
        ),
        # deprecated names (gen_ai.system, prompt/completion tokens)
        (
            {
                "gen_ai.system": "anthropic",
                "gen_ai.request.model": "claude-sonnet-4-5",
                "gen_ai.usage.prompt_tokens": 5,
                "gen_ai.usage.completion_tokens": 94,
            },
            {"input_tokens": 5, "output_tokens": 94, "provider_name": "anthropic"},
        ),
        # OpenInference (as in the Langfuse openai-agents / crewai traces)
        (
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.provider": "openai",
                "llm.token_count.prompt": 52,
                "llm.token_count.completion": 11,
                "llm.token_count.total": 63,
                "llm.token_count.prompt_details.cache_read": 0,
            },
            {
                "input_tokens": 52,
                "output_tokens": 11,
                "total_tokens": 63,
                "cache_read_tokens": 0,
                "request_model": "gpt-4o-mini",
                "provider_name": "openai",
            },
        ),
        # OpenLLMetry (Traceloop): gen_ai.usage.* plus llm.usage.total_tokens and cache names
        (
            {
                "llm.request.type": "chat",
                "gen_ai.system": "Anthropic",
                "gen_ai.request.model": "claude-3-5-haiku",
                "gen_ai.usage.prompt_tokens": 20,
                "gen_ai.usage.completion_tokens": 8,
                "llm.usage.total_tokens": 28,
                "gen_ai.usage.cache_read_input_tokens": 12,
            },
            {"input_tokens": 20, "output_tokens": 8, "total_tokens": 28, "cache_read_tokens": 12},
        ),
        # any-agent: call_llm operation, costs in non-standard attributes
        (
            {
                "gen_ai.operation.name": "call_llm",
                "gen_ai.request.model": "mistral/mistral-small-latest",
                "gen_ai.usage.input_tokens": 269,
                "gen_ai.usage.output_tokens": 16,
                "gen_ai.usage.input_cost": 2.69e-05,
                "gen_ai.usage.output_cost": 4.8e-06,
            },
            {"input_tokens": 269, "output_tokens": 16, "cost_usd": pytest.approx(2.69e-05 + 4.8e-06)},
        ),
    ],
)
def test_foreign_genai_spans_become_model_calls(attributes, expected):
    mapped = _foreign_call(attributes)
    (call,) = mapped.calls
    assert {key: call[key] for key in expected} == expected
    assert call["usage_status"] == sc.USAGE_REPORTED
    assert call["run_id"] == call["trace_id"]  # foreign telemetry: the run is the trace


def test_foreign_call_without_usage_is_unknown_not_zero():
    (call,) = _foreign_call({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}).calls
    assert call["usage_status"] == sc.USAGE_UNKNOWN and call["input_tokens"] is None


@pytest.mark.parametrize(
    "attributes, named",
    [
        ({"gen_ai.usage.input_tokens": -5}, "gen_ai.usage.input_tokens must be a non-negative integer"),
        ({"gen_ai.usage.output_tokens": "lots"}, "gen_ai.usage.output_tokens must be a non-negative integer"),
        ({"llm.token_count.prompt": 1.5}, "llm.token_count.prompt must be a non-negative integer"),
        (
            {
                "budgetlens.run_id": "r",
                "gen_ai.operation.name": "invoke_agent",
                "budgetlens.stop_reason": "gave_up",
            },
            "budgetlens.stop_reason must be one of",
        ),
        (
            {"gen_ai.operation.name": "chat", "budgetlens.usage_status": "maybe"},
            "budgetlens.usage_status must be one of",
        ),
        (
            {"gen_ai.operation.name": "chat", "budgetlens.cost_usd": -1.0},
            "budgetlens.cost_usd must be a non-negative number",
        ),
    ],
)
def test_span_with_a_bad_value_is_rejected_alone_naming_the_attribute(attributes, named):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("good") as good:
        good.set_attributes(
            {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 1}
        )
    with recorder.tracer.start_as_current_span("bad") as bad:
        bad.set_attributes(attributes)
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 1 and named in mapped.errors[0]
    kept = [c for c in mapped.calls if c["quality"] is None]
    assert len(kept) == 1 and kept[0]["input_tokens"] == 3
    # the rejected span keeps only its place: flagged, no value of it stored (issue 23)
    stubs = [c for c in mapped.calls if c["quality"] is not None]
    assert all(c["quality"] == "rejected_span" and c["input_tokens"] is None for c in stubs)


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("traceId", "zz" * 16, "traceId must be hex"),
        ("spanId", "abc", "spanId must be"),
        ("spanId", "", "spanId is required"),
        ("parentSpanId", "12345", "parentSpanId must be"),
    ],
)
def test_json_span_with_bad_ids_is_rejected_and_the_rest_kept(field, value, named):
    recorder = SpanRecorder()
    recorder.guard_run("run-j", "triage", [("gpt-4o", 10, 2), ("gpt-4o", 20, 4)])
    document = otlp_json(recorder.spans())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0][field] = value
    mapped = map_otlp_json(document)
    assert mapped.rejected == 1 and named in mapped.errors[0]
    assert mapped.spans == 3 and len(mapped.calls) + len(mapped.records) == 2


@pytest.mark.system  # store writes: seconds
def test_content_attributes_never_reach_a_row(store_path):
    recorder = SpanRecorder()
    recorder.guard_run("run-c", "triage", [("gpt-4o", 10, 2)], content="PROMPT-SECRET-42")
    with recorder.tracer.start_as_current_span("execute_tool bash") as tool:
        tool.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "bash",
                "gen_ai.tool.args": "rm -rf TOOL-ARGS-SECRET",
                "gen_ai.output": "TOOL-RESULT-SECRET",
            }
        )
    mapped = map_request(encode_spans(recorder.spans()))
    with write_connection(store_path) as conn:
        write_batch(conn, mapped.calls, mapped.records, mapped.events)
    with read_connection(store_path) as conn:
        conn.execute("EXPORT DATABASE '" + str(store_path.parent / "dump") + "' (FORMAT csv)")
    dumped = "".join(p.read_text() for p in (store_path.parent / "dump").glob("*.csv"))
    assert "bash" in dumped
    assert "SECRET" not in dumped


def test_otlp_json_reference_example_decodes_with_string_int64_and_upper_hex(realdata):
    body = (realdata / "otlp-proto-examples" / "trace.json").read_bytes()
    kind, decoded = decode(gzip.compress(body), "application/json; charset=utf-8", "gzip")
    span = decoded.request.resource_spans[0].scope_spans[0].spans[0]
    assert kind == JSON and decoded.rejected == 0
    assert (
        span.trace_id.hex()
        == json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"].lower()
    )
    assert span.start_time_unix_nano == 1544712660000000000
    assert map_spans(decoded).calls == []  # a plain server span is no model call


@pytest.mark.parametrize(
    "content_type, encoding, body, status",
    [
        ("text/plain", None, b"x", 415),
        (PROTOBUF, "br", b"x", 415),
        (PROTOBUF, None, b"\xff\xff\xff", 400),
        (JSON, None, b"{not json", 400),
        (JSON, None, b"[1, 2]", 400),
        (PROTOBUF, "gzip", b"not gzip at all", 400),
        (PROTOBUF, "gzip", gzip.compress(b"\0" * 4096), 413),
    ],
)
def test_bad_bodies_raise_the_http_status_to_answer(content_type, encoding, body, status):
    with pytest.raises(OtlpError) as caught:
        decode(body, content_type, encoding, max_bytes=1024)
    assert caught.value.status == status and caught.value.reason


@pytest.mark.parametrize(
    "framework", ["AGNO", "GOOGLE", "LANGCHAIN", "LLAMA_INDEX", "OPENAI", "SMOLAGENTS", "TINYAGENT"]
)
def test_any_agent_traces_become_one_run_each_with_their_tokens(realdata, store_path, framework):
    path = realdata / "any-agent-genai-spans" / f"{framework}_trace.json"
    source = json.loads(path.read_text())["spans"]
    llm = [s for s in source if s["attributes"].get("gen_ai.operation.name") == "call_llm"]
    tools = [s for s in source if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    mapped = map_request(encode_spans(anyagent_spans(path)))
    assert mapped.rejected == 0
    with write_connection(store_path) as conn:
        write_batch(conn, mapped.calls, mapped.records, mapped.events)
    with read_connection(store_path) as conn:
        runs = conn.execute(
            "SELECT task_type, turns, tool_calls, input_tokens, output_tokens, "
            "cost_usd, stop_reason FROM runs"
        ).fetchall()
    (run,) = runs
    assert run[0] == "any_agent"  # gen_ai.agent.name of the invoke_agent root span
    assert run[1:5] == (
        len(llm),
        len(tools),
        sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in llm),
        sum(s["attributes"]["gen_ai.usage.output_tokens"] for s in llm),
    )
    expected_cost = sum(
        s["attributes"]["gen_ai.usage.input_cost"] + s["attributes"]["gen_ai.usage.output_cost"] for s in llm
    )
    assert run[5] == pytest.approx(expected_cost) and run[6] == sc.STOP_COMPLETED


def test_langfuse_raw_attributes_of_real_frameworks_map_to_usage(realdata):
    """The raw OTel attributes Langfuse kept (metadata.attributes) map to the tokens it counted.

    Most metadata in these copies is a JSON string cut at 300 characters (unparsable); the
    observations whose metadata survived as an object are checked."""
    checked = 0
    for path in sorted((realdata / "langfuse-framework-traces").glob("*.trace.json")):
        for obs in json.loads(path.read_text())["observations"]:
            metadata = obs.get("metadata")
            attrs = metadata.get("attributes") if isinstance(metadata, dict) else None
            attrs = attrs if isinstance(attrs, dict) else {}
            usage = obs.get("usageDetails") or {}
            if obs["type"] != "GENERATION" or "input" not in usage or "output" not in usage:
                continue
            numeric = {
                k: v
                for k, v in attrs.items()
                if isinstance(v, (int, float, str)) and k.startswith(("gen_ai.", "llm."))
            }
            if not any(k in numeric for k in ("gen_ai.usage.input_tokens", "llm.token_count.prompt")):
                continue
            for key, value in list(numeric.items()):  # Langfuse stores numbers as strings
                if isinstance(value, str) and value.isdigit():
                    numeric[key] = int(value)
                elif isinstance(value, str) and key.startswith(("gen_ai.usage", "llm.token_count")):
                    numeric.pop(key)
            (call,) = _foreign_call(numeric).calls
            assert (call["input_tokens"], call["output_tokens"]) == (usage["input"], usage["output"]), (
                path.name
            )
            checked += 1
    assert checked >= 3


@pytest.mark.system  # store writes: seconds
def test_write_of_mapped_rows_twice_stores_each_span_once(store_path):
    recorder = SpanRecorder()
    recorder.guard_run("run-d", "triage", [("gpt-4o", 10, 2)], tools=1)
    mapped = map_request(encode_spans(recorder.spans()))
    for _ in range(2):
        with write_connection(store_path) as conn:
            write_batch(conn, mapped.calls, mapped.records, mapped.events)
    with read_connection(store_path) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM model_calls), "
            "(SELECT count(*) FROM budget_events), (SELECT total_tokens FROM runs)"
        ).fetchone()
    assert counts == (1, 1, 12)


_RUN = {"gen_ai.operation.name": "invoke_agent", "budgetlens.run_id": "r"}


@pytest.mark.parametrize(
    "attributes, named",
    [
        (
            {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 1e30},
            "gen_ai.usage.input_tokens must be a non-negative integer of at most",
        ),
        (
            {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": "1" * 30},
            "gen_ai.usage.input_tokens must be a non-negative integer of at most",
        ),
        (
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 2**63 - 1,
                "gen_ai.usage.output_tokens": 1,
            },
            "gen_ai.usage.input_tokens must be",
        ),
        (
            {"gen_ai.operation.name": "chat", "budgetlens.turn": 3_000_000_000},
            "budgetlens.turn must be a non-negative integer of at most 2147483647",
        ),
        ({**_RUN, "budgetlens.turns": 2**31}, "budgetlens.turns must be"),
        ({**_RUN, "budgetlens.tool_calls": 2**31}, "budgetlens.tool_calls must be"),
        ({**_RUN, "budgetlens.limit.turns": 2**40}, "budgetlens.limit.turns must be"),
        ({**_RUN, "budgetlens.limit.tool_calls": 2**40}, "budgetlens.limit.tool_calls must be"),
        ({**_RUN, "budgetlens.limit.total_tokens": 10**13}, "budgetlens.limit.total_tokens must be"),
        (
            {"gen_ai.operation.name": "chat", "budgetlens.cost_usd": 1e300},
            "budgetlens.cost_usd must be a non-negative number of at most",
        ),
        (
            {"gen_ai.operation.name": "chat", "budgetlens.run_id": "x" * 257},
            "budgetlens.run_id must be a non-empty string of at most 256 characters",
        ),
        (
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": ["a", "b"]},
            "gen_ai.request.model must be a string",
        ),
    ],
)
def test_values_outside_the_store_column_ranges_reject_the_span(attributes, named):
    mapped = _foreign_call(attributes)
    assert mapped.rejected == 1 and named in mapped.errors[0], mapped.errors
    # only the span's place is kept (issue 23): stub rows flagged rejected_span, no value stored
    stubs = [*mapped.calls, *mapped.records]
    assert mapped.flagged == {"rejected_span": 1}
    assert all(row["quality"] == "rejected_span" for row in mapped.calls)
    assert all(row.get("input_tokens") is None and row.get("cost_usd") is None for row in stubs)
    assert not mapped.events


def test_counts_at_the_column_maximum_are_stored(store_path):
    mapped = _foreign_call(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": 10**12,
            "gen_ai.usage.output_tokens": 10**12,
            "budgetlens.turn": 2**31 - 1,
            "budgetlens.run_id": "x" * 256,
        }
    )
    assert mapped.rejected == 0
    with write_connection(store_path) as conn:
        write_batch(conn, *mapped.tables())
    with read_connection(store_path) as conn:
        assert conn.execute(
            "SELECT turn, runs.total_tokens FROM runs JOIN model_calls USING (run_id)"
        ).fetchall() == [(2**31 - 1, 2 * 10**12)]


def test_rejection_messages_are_short_however_large_the_bad_values():
    spans = [
        {
            "traceId": "ab" * 16,
            "spanId": f"{i + 1:016x}",
            "name": "chat",
            "attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "9" * 1_000_000}}],
        }
        for i in range(8)
    ]
    mapped = map_otlp_json({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    assert mapped.rejected == 8 and len(mapped.error_message()) < 1500
    assert mapped.error_message().endswith("and 3 more")


@pytest.mark.parametrize(
    "document, named",
    [
        ({"resourceSpans": [{"scopeSpans": 5}]}, "scopeSpans must be a list"),
        ({"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}, "spans must be a list"),
        ({"resourceSpans": [{"resource": "x"}]}, "resource must be an object"),
        ({"resourceSpans": [{"scopeSpans": [5]}]}, "must be an object"),
    ],
)
def test_malformed_otlp_json_is_a_400_naming_the_field(document, named):
    with pytest.raises(OtlpError, match=named) as caught:
        decode(json.dumps(document).encode(), JSON, None)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": "ab" * 16,
                                        "spanId": "cd" * 8,
                                        "name": "x",
                                        "attributes": [
                                            {"key": "deep", "value": {"arrayValue": {"values": []}}}
                                        ],
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        )
        .encode()
        .replace(b'{"values": []}', b'{"values": [{"arrayValue": ' * 3000 + b"{}" + b"}]" * 3000),
    ],
)
def test_deeply_nested_json_is_a_400_not_a_crash(body):
    with pytest.raises(OtlpError, match="nested too deeply") as caught:
        decode(body, JSON, None)
    assert caught.value.status == 400


def test_a_total_that_disagrees_with_the_parts_keeps_the_parts_and_flags_the_call():
    """Issue 22 replaces issue 15's rejection: the parts are the usage, the total kept beside."""
    mapped = _foreign_call(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10,
            "llm.usage.total_tokens": 5000,
        }
    )
    (call,) = mapped.calls
    assert mapped.rejected == 0 and call["total_tokens"] == 110
    assert call["quality"] == "total_mismatch" and '"provider_total_tokens": 5000' in call["usage_details"]


def test_a_call_with_only_a_total_is_reported_usage_with_unknown_parts():
    (call,) = _foreign_call(
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "llm.usage.total_tokens": 77}
    ).calls
    assert call["usage_status"] == sc.USAGE_REPORTED and call["total_tokens"] == 77
    assert call["input_tokens"] is None and call["output_tokens"] is None
    assert call["cost_usd"] is None  # a total alone cannot be priced
