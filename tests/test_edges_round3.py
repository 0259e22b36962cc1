"""Issue 22, right at the edges (round three): each row's input through the guard, the collector
mapping, the store and the importers, with its right value computed here."""

from __future__ import annotations

import pytest
from _collector_helpers import SpanRecorder, mapped_store
from _transcripts import claude_assistant
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from budgetlens import semconv as sc
from budgetlens.otlp.mapping import map_request
from budgetlens.store import read_connection, write_batch, write_connection


def _chat(model: str, inp: int, out: int, **extra) -> dict:
    return {
        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: model,
        sc.GEN_AI_USAGE_INPUT_TOKENS: inp,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: out,
        **extra,
    }


def _run(db_path, columns: str) -> tuple:
    with read_connection(db_path) as conn:
        rows = conn.execute(f"SELECT {columns} FROM runs").fetchall()
    assert len(rows) == 1, rows
    return rows[0]


# --- a recovered call error -------------------------------------------------------------------
def _retried_call(root_status: StatusCode) -> list:
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("agent run") as root:
        root.set_attribute(sc.GEN_AI_AGENT_NAME, "extractor")
        with recorder.tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as first:
            first.set_attributes(_chat("gpt-4o-mini", 900, 300, **{sc.ERROR_TYPE: "invalid_json_output"}))
            first.set_status(Status(StatusCode.ERROR))
        with recorder.tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as second:
            second.set_attributes(_chat("gpt-4o-mini", 900, 320))
            second.set_status(Status(StatusCode.OK))
        root.set_status(Status(root_status))
    return recorder.spans()


@pytest.mark.system  # store writes: seconds
def test_a_call_error_the_run_recovered_from_does_not_fail_the_run(tmp_path):
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    mapped = map_request(encode_spans(_retried_call(StatusCode.OK)))
    db_path = mapped_store(tmp_path, mapped)
    calls, total, cost, stop = _run(db_path, "model_calls, total_tokens, cost_usd, stop_reason")
    expected = sum(
        float(
            calc_price(
                PriceUsage(input_tokens=900, output_tokens=out), "gpt-4o-mini", provider_id="openai"
            ).total_price
        )
        for out in (300, 320)
    )
    assert (calls, total, stop) == (2, 900 + 300 + 900 + 320, sc.STOP_COMPLETED)
    assert cost == pytest.approx(expected)  # the failed attempt's usage still counts


def test_a_root_span_in_error_still_fails_the_run(tmp_path):
    db_path = mapped_store(tmp_path, map_request(encode_spans(_retried_call(StatusCode.ERROR)), price=False))
    assert _run(db_path, "stop_reason") == (sc.STOP_FAILED,)


# --- a request with no valid span ---------------------------------------------------------------
@pytest.mark.system  # a live collector: seconds
def test_a_request_whose_every_span_is_invalid_is_a_400_naming_the_field(db_path, free_port):
    import requests
    from _collector_helpers import live_collector
    from google.rpc.status_pb2 import Status as RpcStatus

    from budgetlens.otlp import PROTOBUF

    recorder = SpanRecorder()
    for _ in range(2):
        with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
            call.set_attributes(_chat("gpt-4o", 10, 2))
    request = encode_spans(recorder.spans())
    for span in request.resource_spans[0].scope_spans[0].spans:
        span.span_id = b"\x01\x02\x03"  # 3 bytes: a bad id
    with live_collector(db_path, free_port) as live:
        response = requests.post(
            f"{live.url}/v1/traces", data=request.SerializeToString(), headers={"Content-Type": PROTOBUF}
        )
        status = RpcStatus.FromString(response.content)
        assert response.status_code == 400 and status.code == 3  # INVALID_ARGUMENT
        assert "span_id must be 8 bytes" in status.message
        # one valid span beside a bad one: 200 with partial_success, as before
        good = encode_spans(recorder.spans())
        bad = good.resource_spans[0].scope_spans[0].spans[0]
        bad.span_id = b"\x01"
        mixed = requests.post(
            f"{live.url}/v1/traces", data=good.SerializeToString(), headers={"Content-Type": PROTOBUF}
        )
        assert mixed.status_code == 200


# --- one token bound --------------------------------------------------------------------------
def test_the_one_token_bound_is_refused_at_every_source(tmp_path):
    import json

    from budgetlens import RunBudget
    from budgetlens.importers.validation import check_row
    from budgetlens.limits import MAX_TOKENS
    from budgetlens.otlp.attributes import MAX_TOKENS as SPAN_MAX_TOKENS
    from budgetlens.usage import normalize_usage

    assert SPAN_MAX_TOKENS is MAX_TOKENS == 10**12  # defined once
    with pytest.raises(ValueError, match="max_total_tokens must be at most"):
        RunBudget(max_total_tokens=10**15)
    RunBudget(max_total_tokens=MAX_TOKENS)  # the bound itself is allowed
    budget = RunBudget(max_cost_usd=1.0)
    with pytest.raises(ValueError, match="estimated_tokens must be at most"):
        budget.reserve(2 * 10**12)
    with pytest.raises(ValueError, match="Usage.input_tokens must be at most"):
        normalize_usage({"prompt_tokens": 2 * 10**12, "completion_tokens": 1})
    with pytest.raises(ValueError, match="input_tokens must be a whole number >= 0 of at most"):
        check_row("call", {"input_tokens": 2 * 10**12})
    preset = tmp_path / "presets.json"
    preset.write_text(json.dumps({"budgetlens_presets": 1, "presets": {"qa": {"max_total_tokens": 10**29}}}))
    with pytest.raises(ValueError, match="presets.qa.max_total_tokens must be at most"):
        RunBudget.from_preset("qa", str(preset))


@pytest.mark.system  # store writes: seconds
def test_a_guard_run_at_the_token_bound_reaches_the_store_whole(tmp_path):
    """The largest limit the guard accepts is one the collector stores: the run never vanishes."""
    from budgetlens.limits import MAX_TOKENS

    recorder = SpanRecorder()
    with (
        recorder.run_span("run-bound", "qa", {sc.BUDGET_LIMIT_TOTAL_TOKENS: MAX_TOKENS}),
        recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call,
    ):
        call.set_attributes(_chat("gpt-4o", MAX_TOKENS, 1, **{sc.BUDGET_RUN_ID: "run-bound"}))
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 0
    db_path = mapped_store(tmp_path, mapped)
    assert _run(db_path, "run_id, limit_total_tokens, input_tokens") == ("run-bound", MAX_TOKENS, MAX_TOKENS)


# --- calendar windows, costs out of time order ------------------------------------------------
def _epoch(*args) -> float:
    import datetime as dt

    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


def test_a_late_cost_counts_in_its_own_month_not_the_current_one():
    import datetime as dt

    from budgetlens.guard.spend import SpendTracker

    clock = [_epoch(2026, 4, 10, 12)]
    tracker = SpendTracker({"monthly": 100.0, "daily": 50.0, "24h": 50.0}, clock=lambda: clock[0])
    tracker.add(2.00)
    tracker.add(0.75, ts=_epoch(2026, 3, 31, 23))  # stamped in March, arrives in April
    assert tracker.spent("monthly") == pytest.approx(2.00)
    assert tracker.spent("daily") == pytest.approx(2.00)
    assert tracker.spent("24h") == pytest.approx(2.00)  # 9.5 days old: outside the 24 h window
    tracker.add(0.25, ts=_epoch(2026, 4, 10, 1))  # earlier today, arriving late: counts today
    assert tracker.spent("daily") == pytest.approx(2.25) and tracker.spent("24h") == pytest.approx(2.25)
    assert tracker.next_reset("monthly") == dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    assert tracker.next_reset("daily") == dt.datetime(2026, 4, 11, tzinfo=dt.UTC)
    assert tracker.next_reset("24h") == dt.datetime(2026, 4, 11, 1, tzinfo=dt.UTC)  # oldest leaves
    clock[0] = _epoch(2026, 4, 11, 1, 30)
    assert tracker.spent("24h") == pytest.approx(2.00)  # the 01:00 cost left, the 12:00 one stays
    clock[0] = _epoch(2026, 5, 1, 0, 1)
    assert tracker.spent("monthly") == 0.0


def test_next_reset_is_local_midnight_in_the_trackers_time_zone():
    import datetime as dt
    from zoneinfo import ZoneInfo

    from budgetlens.guard.spend import SpendTracker

    tracker = SpendTracker(
        {"daily": 5.0, "monthly": 9.0}, tz="America/New_York", clock=lambda: _epoch(2026, 12, 31, 23)
    )
    zone = ZoneInfo("America/New_York")
    assert tracker.next_reset("daily") == dt.datetime(2027, 1, 1, tzinfo=zone)  # 18:00 local
    assert tracker.next_reset("monthly") == dt.datetime(2027, 1, 1, tzinfo=zone)
    with pytest.raises(KeyError):
        tracker.next_reset("30d")


# --- a span id reused by a different span in a later request -----------------------------------
def _one_chat(inp: int):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
        call.set_attributes(_chat("gpt-4o", inp, 10))
    return encode_spans(recorder.spans())


def test_a_different_span_under_ids_of_an_earlier_request_is_rejected_and_flagged():
    from budgetlens.otlp.memory import SpanMemory

    memory = SpanMemory()
    first = _one_chat(100)
    second = _one_chat(200)
    span = second.resource_spans[0].scope_spans[0].spans[0]
    original = first.resource_spans[0].scope_spans[0].spans[0]
    span.trace_id, span.span_id = original.trace_id, original.span_id  # same ids, other content
    assert map_request(first, price=False, memory=memory).rejected == 0
    retry = map_request(first, price=False, memory=memory)  # an exporter retry: still fine
    assert retry.rejected == 0 and len(retry.calls) == 1
    mapped = map_request(second, price=False, memory=memory)
    assert mapped.rejected == 1 and mapped.calls == []
    assert "span id collision" in mapped.errors[0] and "earlier" in mapped.errors[0]
    assert mapped.flagged == {"span_id_collision": 1}


@pytest.mark.system  # a live collector: seconds
def test_a_reused_span_id_in_a_later_request_is_reported_by_the_collector(db_path, free_port):
    import requests
    from _collector_helpers import live_collector
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from budgetlens.otlp import PROTOBUF

    first, second = _one_chat(100), _one_chat(200)
    span = second.resource_spans[0].scope_spans[0].spans[0]
    original = first.resource_spans[0].scope_spans[0].spans[0]
    span.trace_id, span.span_id = original.trace_id, original.span_id
    headers = {"Content-Type": PROTOBUF}
    with live_collector(db_path, free_port) as live:
        url = f"{live.url}/v1/traces"
        assert requests.post(url, data=first.SerializeToString(), headers=headers).status_code == 200
        extra = second.resource_spans[0].scope_spans[0].spans.add()
        extra.CopyFrom(_one_chat(300).resource_spans[0].scope_spans[0].spans[0])  # a valid one beside
        response = requests.post(url, data=second.SerializeToString(), headers=headers)
        registry = live.app.state.metrics.registry
        flagged = registry.get_sample_value(
            "budgetlens_ingest_flagged_spans_total", {"reason": "span_id_collision"}
        )
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert response.status_code == 200 and partial.rejected_spans == 1
    assert "span id collision" in partial.error_message
    assert flagged == 1


# --- an aggregate span that arrives first ------------------------------------------------------
def _agent_and_three_chats():
    recorder = SpanRecorder()
    usage = ((300, 40), (500, 60), (200, 20))
    with recorder.tracer.start_as_current_span("agent run") as root:
        root.set_attributes(
            {
                sc.GEN_AI_AGENT_NAME: "researcher",
                sc.GEN_AI_USAGE_INPUT_TOKENS: sum(u[0] for u in usage),
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: sum(u[1] for u in usage),
            }
        )
        for inp, out in usage:
            with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
                call.set_attributes(_chat("gpt-4o", inp, out))
    spans = recorder.spans()
    return [s for s in spans if s.parent is None], [s for s in spans if s.parent is not None], usage


@pytest.mark.parametrize("aggregate_first", [True, False])
@pytest.mark.system  # store writes: seconds
def test_an_aggregate_span_is_recognised_whichever_request_brings_it_first(tmp_path, aggregate_first):
    """Two requests, no shared memory (as two collectors writing one store): the store decides."""
    roots, children, usage = _agent_and_three_chats()
    order = (roots, children) if aggregate_first else (children, roots)
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        for spans in order:
            write_batch(conn, *map_request(encode_spans(spans), price=False).tables())
    calls, total, inp = _run(db_path, "model_calls, total_tokens, input_tokens")
    assert (calls, total, inp) == (3, sum(a + b for a, b in usage), sum(a for a, _ in usage))
    with write_connection(db_path) as conn:  # the incremental rollup equals a full rebuild
        from budgetlens.store import rebuild_runs

        rebuild_runs(conn)
    assert _run(db_path, "model_calls, total_tokens") == (3, sum(a + b for a, b in usage))


@pytest.mark.system  # store writes: seconds
def test_an_aggregate_first_through_one_collector_memory(tmp_path):
    from budgetlens.otlp.memory import SpanMemory

    roots, children, usage = _agent_and_three_chats()
    memory = SpanMemory()
    first = map_request(encode_spans(roots), price=False, memory=memory)
    second = map_request(encode_spans(children), price=False, memory=memory)
    db_path = mapped_store(tmp_path, first, second)
    assert _run(db_path, "model_calls, total_tokens") == (3, sum(a + b for a, b in usage))


# --- service tier, reasoning spellings, the conventions' renames -------------------------------
def _reference(model: str, context=None, **usage) -> float:
    """genai-prices' own calculation over a hand-written usage."""
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    return float(calc_price(PriceUsage(**usage), model, price_context=context).total_price)


def _call_of(attributes: dict, price: bool = True) -> dict:
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as call:
        call.set_attributes(attributes)
    mapped = map_request(encode_spans(recorder.spans()), price=price)
    assert mapped.rejected == 0, mapped.errors
    (row,) = mapped.calls
    return row


@pytest.mark.parametrize(
    "tier_attribute",
    [
        "openai.response.service_tier",
        "gen_ai.openai.response.service_tier",
        "gen_ai.response.service_tier",
        "openai.request.service_tier",
        "gen_ai.openai.request.service_tier",
    ],
)
def test_a_service_tier_from_telemetry_selects_its_price(tier_attribute):
    # o4-mini: genai-prices has a flex rate for it (for gpt-4o-mini its flex price is the standard)
    for model in ("o4-mini", "gpt-4o-mini"):
        row = _call_of({**_chat(model, 10_000, 2_000), tier_attribute: "flex"})
        flex = _reference(model, {"service_tier": "flex"}, input_tokens=10_000, output_tokens=2_000)
        assert row["cost_usd"] == pytest.approx(flex)
    standard = _reference("o4-mini", input_tokens=10_000, output_tokens=2_000)
    assert row["cost_usd"] is not None and flex <= standard
    assert (
        _reference("o4-mini", {"service_tier": "flex"}, input_tokens=10_000, output_tokens=2_000) < standard
    )


def test_a_requested_tier_of_auto_is_the_standard_price():
    row = _call_of({**_chat("gpt-4o-mini", 10_000, 2_000), "openai.request.service_tier": "auto"})
    assert row["cost_usd"] == pytest.approx(
        _reference("gpt-4o-mini", input_tokens=10_000, output_tokens=2_000)
    )


@pytest.mark.parametrize(
    "reasoning_attribute",
    [
        "gen_ai.usage.reasoning.output_tokens",  # GenAI semconv
        "gen_ai.usage.reasoning_tokens",  # OpenLLMetry
        "llm.token_count.completion_details.reasoning",  # OpenInference
    ],
)
def test_every_reasoning_spelling_is_read(reasoning_attribute):
    row = _call_of({**_chat("gpt-4o-mini", 300, 60), reasoning_attribute: 45}, price=False)
    assert (row["input_tokens"], row["output_tokens"], row["reasoning_tokens"]) == (300, 60, 45)


def test_the_cache_write_rename_is_read_and_never_added_twice():
    renamed = _call_of(
        {**_chat("claude-sonnet-4-5", 1_000, 50), "gen_ai.usage.cache_write.input_tokens": 400}
    )
    both = _call_of(
        {
            **_chat("claude-sonnet-4-5", 1_000, 50),
            "gen_ai.usage.cache_write.input_tokens": 400,
            "gen_ai.usage.cache_creation.input_tokens": 400,
        }
    )
    assert renamed["cache_write_tokens"] == both["cache_write_tokens"] == 400
    assert both["input_tokens"] == 1_000 and both["cost_usd"] == pytest.approx(renamed["cost_usd"])


def test_a_stated_cost_amount_is_the_calls_cost_not_repriced(tmp_path):
    row = _call_of(
        {
            **_chat("gpt-4o-mini", 1_000, 100),
            "gen_ai.usage.cost.amount": 0.5,
            "gen_ai.usage.cost.currency": "USD",
        }
    )
    assert row["cost_usd"] == 0.5 and row["price_version"] is None
    euros = _call_of(
        {
            **_chat("gpt-4o-mini", 1_000, 100),
            "gen_ai.usage.cost.amount": 0.5,
            "gen_ai.usage.cost.currency": "EUR",
        }
    )
    assert euros["cost_usd"] == pytest.approx(
        _reference("gpt-4o-mini", input_tokens=1_000, output_tokens=100)
    )


# --- OpenAI Batch output lines ----------------------------------------------------------------
def test_an_openai_batch_output_line_is_usage_priced_at_the_batch_rate():
    from budgetlens.pricing import price_call
    from budgetlens.usage import normalize_usage

    body = {
        "object": "chat.completion",
        "model": "gpt-4.1-mini",
        "service_tier": "default",
        "usage": {
            "prompt_tokens": 8_000,
            "completion_tokens": 500,
            "total_tokens": 8_500,
            "prompt_tokens_details": {"cached_tokens": 6_000},
        },
    }
    line = {"id": "batch_req_1", "custom_id": "task-7", "response": {"status_code": 200, "body": body}}
    usage = normalize_usage(line)
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (8_000, 6_000, 500)
    batch = _reference(
        "gpt-4.1-mini",
        {"service_tier": "batch", "processing": "batch"},
        input_tokens=8_000,
        cache_read_tokens=6_000,
        output_tokens=500,
    )
    assert batch == pytest.approx(0.0014)
    assert price_call("gpt-4.1-mini", usage, "openai").cost_usd == pytest.approx(batch)
    real_time = price_call("gpt-4.1-mini", normalize_usage(body), "openai").cost_usd
    assert real_time == pytest.approx(0.0022)  # the body alone is a real-time call
    failed = {"custom_id": "task-8", "response": None, "error": {"code": "server_error"}}
    assert normalize_usage(failed) is None  # no usage: unknown, never 0


# --- a provider total that disagrees with its parts --------------------------------------------
GEMINI = {
    "promptTokenCount": 1_000,
    "candidatesTokenCount": 200,
    "thoughtsTokenCount": 50,
    "totalTokenCount": 1_400,  # 150 above prompt + candidates + thoughts
}


def test_a_provider_total_above_its_parts_is_kept_beside_them_and_flagged(tmp_path):
    from budgetlens import RunBudget
    from budgetlens.importers.rows import usage_columns
    from budgetlens.usage import normalize_usage

    usage = normalize_usage({"usageMetadata": GEMINI})
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (1_000, 250, 1_250)
    assert usage.provider_total_tokens == 1_400
    agreeing = normalize_usage({"usageMetadata": {**GEMINI, "totalTokenCount": 1_250}})
    assert agreeing.provider_total_tokens is None
    openai = normalize_usage({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    assert openai.provider_total_tokens is None
    assert usage_columns(usage)["quality"] == "total_mismatch"  # every importer's token columns

    # the guard: the call span carries the provider total, the collector flags call and run
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with RunBudget(max_total_tokens=10_000, task_type="qa", tracer=provider.get_tracer("t")) as run:
        run.record({"usageMetadata": GEMINI}, model="gemini-2.5-flash", provider="gcp.gemini")
    mapped = map_request(encode_spans(list(memory.get_finished_spans())), price=False)
    (call,) = mapped.calls
    assert call["total_tokens"] == 1_250 and call["quality"] == "total_mismatch"
    assert mapped.flagged == {"total_mismatch": 1}
    db_path = mapped_store(tmp_path, mapped)
    assert _run(db_path, "total_tokens, quality") == (1_250, "total_mismatch")


# --- the lock message -------------------------------------------------------------------------
@pytest.mark.system
def test_the_lock_message_names_the_file_the_holder_and_what_to_do(tmp_path, python):
    import subprocess

    from budgetlens.store import StoreError
    from budgetlens.store.lock_holder import lock_holder

    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path):
        pass
    holder = subprocess.Popen(
        [
            python,
            "-c",
            f"import duckdb, sys, time; c = duckdb.connect({str(db_path)!r}); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError) as caught, read_connection(db_path, timeout_s=0.3):
            pass
        message = str(caught.value)
        assert str(db_path) in message and f"PID {holder.pid}" in message
        assert "duckdb.connect" in message  # the holder's command line
        assert "--db" in message and "collector is committing" not in message
        found = lock_holder(db_path)  # from /proc/locks, without DuckDB's text
        import sys

        if sys.platform == "linux":
            assert found.pid == holder.pid and "duckdb.connect" in (found.command or "")
    finally:
        holder.kill()
        holder.wait()


# --- audio without an audio price ---------------------------------------------------------------
@pytest.mark.system  # store writes: seconds
def test_audio_without_an_audio_price_is_partly_unpriced_and_counted(tmp_path):
    import datetime as dt

    from budgetlens.analysis.filters import Filters
    from budgetlens.analysis.views import overview
    from budgetlens.pricing import price_call, price_columns
    from budgetlens.usage import normalize_usage

    raw = {
        "prompt_tokens": 1_000,
        "completion_tokens": 500,
        "prompt_tokens_details": {"audio_tokens": 600},
        "completion_tokens_details": {"audio_tokens": 400},
    }
    usage = normalize_usage(raw)
    priced = price_call("gpt-4o-audio-preview", usage, "openai")
    text_only = _reference("gpt-4o-audio-preview", input_tokens=400, output_tokens=100)
    assert priced.unpriced == ("input_audio_tokens", "output_audio_tokens")
    assert priced.cost_usd == pytest.approx(text_only)  # the text part; audio never at the text rate
    # a model that has audio rates prices them (no unpriced part)
    realtime = price_call("gpt-4o-realtime-preview", usage, "openai")
    assert realtime.unpriced == () and realtime.cost_usd == pytest.approx(
        _reference(
            "gpt-4o-realtime-preview",
            input_tokens=1_000,
            output_tokens=500,
            input_audio_tokens=600,
            output_audio_tokens=400,
        )
    )
    start = dt.datetime(2026, 3, 2, 10, 0)
    row = {
        "span_id": "audio-1",
        "run_id": "run-audio",
        "source": "test",
        "task_type": "voice",
        "request_model": "gpt-4o-audio-preview",
        "start_utc": start,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "usage_status": sc.USAGE_REPORTED,
        **price_columns("gpt-4o-audio-preview", usage, "openai", at=start),
    }
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        write_batch(conn, [row])
    assert _run(db_path, "unpriced_calls") == (1,)
    with read_connection(db_path) as conn:
        ov = overview(conn, Filters())
    assert ov.partially_priced_runs == 1 and ov.unpriced_calls == 1


# --- days whose usage is all unpriced --------------------------------------------------------------
@pytest.mark.system  # store writes: seconds
def test_a_day_whose_usage_is_all_unpriced_is_drawn_as_unpriced_with_its_calls(tmp_path):
    import datetime as dt

    import pandas as pd

    from budgetlens.analysis.filters import Filters
    from budgetlens.analysis.views import cost_by_period
    from budgetlens.dashboard import charts

    day1, day2 = dt.datetime(2026, 3, 2, 10), dt.datetime(2026, 3, 3, 10)
    calls = [
        {
            "span_id": "p1",
            "run_id": "r1",
            "source": "test",
            "request_model": "gpt-4o",
            "start_utc": day1,
            "input_tokens": 10,
            "output_tokens": 5,
            "usage_status": sc.USAGE_REPORTED,
            "cost_usd": 0.25,
        },
        *[
            {
                "span_id": f"u{i}",
                "run_id": "r2",
                "source": "test",
                "request_model": "local-llama",
                "start_utc": day2,
                "input_tokens": 10,
                "output_tokens": 5,
                "usage_status": sc.USAGE_REPORTED,
            }
            for i in range(3)
        ],
    ]
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        write_batch(conn, calls)
    with read_connection(db_path) as conn:
        frame = cost_by_period(conn, Filters(), period="day", by="model")
    fig = charts.cost_stacked(frame, period="day", by="model")
    assert [list(t.y) for t in fig.data] == [[0.25]]  # the priced day, a bar
    assert [a.text for a in fig.layout.annotations] == ["unpriced<br>3 calls"]
    (band,) = fig.layout.shapes
    assert pd.Timestamp(band.x0) < pd.Timestamp(day2.date()) < pd.Timestamp(band.x1)  # where its bar would be


# --- continuation copies across imports ------------------------------------------------------------
def _assistant(session: str, ts: str, message_id: str, request_id: str, inp: int, out: int) -> dict:
    return claude_assistant(session, ts, message_id, request_id, inp, out, cache_read=10)


@pytest.mark.system  # imports into a store twice: seconds
def test_continuation_copies_imported_in_a_later_run_are_not_counted_again(tmp_path):
    import json

    from budgetlens.importers import import_paths

    original = [
        (f"2026-03-02T09:0{i}:05Z", f"msg_0{i}", f"req_0{i}", 1000 * (i + 1), 100 * (i + 1)) for i in range(4)
    ]
    own = [
        ("2026-03-02T10:00:05Z", "msg_10", "req_10", 3000, 300),
        ("2026-03-02T10:01:05Z", "msg_11", "req_11", 3500, 350),
    ]
    project = tmp_path / "-work-shop"
    project.mkdir()
    first = project / "s-one.jsonl"
    first.write_text("".join(json.dumps(_assistant("s-one", *c)) + "\n" for c in original))
    later = tmp_path / "later" / "-work-shop"
    later.mkdir(parents=True)
    second = later / "s-two.jsonl"
    second.write_text("".join(json.dumps(_assistant("s-two", *c)) + "\n" for c in [*original, *own]))
    db_path = tmp_path / "store.duckdb"
    import_paths("claude-code", [first], db_path)
    report = import_paths("claude-code", [second], db_path)  # a separate, later import
    with read_connection(db_path) as conn:
        calls, tokens = conn.execute("SELECT count(*), sum(total_tokens) FROM model_calls").fetchone()
        runs = dict(conn.execute("SELECT run_id, model_calls FROM runs").fetchall())
    # hand count: each call is input + cache read (10) + output
    expected = sum(inp + 10 + out for *_, inp, out in [*original, *own])
    assert (calls, tokens) == (6, expected)
    assert runs == {"claude-code:s-one": 4, "claude-code:s-two": 2}
    assert report.new_calls == 2
    again = import_paths("claude-code", [first, second], db_path)  # re-import: nothing new
    assert again.new_calls == 0
