"""Issue 15, collector rows: span identity, aggregates, the run of the nearest named ancestor,
foreign usage conventions and impossible times, each through the OTLP mapping and the store."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from _collector_helpers import SpanRecorder, collector_process, mapped_store
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind

from budgetlens import semconv as sc
from budgetlens.otlp.mapping import FUTURE_SKEW_S, map_request
from budgetlens.store import read_connection, write_batch, write_connection

CHAT = {
    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
    sc.GEN_AI_PROVIDER_NAME: "openai",
    sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
}


class _ReusedSpanIds(IdGenerator):
    """Random trace ids; span ids 1, 2, 3, ... restarting with every trace (as some
    instrumentations and hand-rolled exporters do)."""

    def __init__(self) -> None:
        self.next_span = 1

    def generate_trace_id(self) -> int:
        self.next_span = 1
        return random.getrandbits(128) or 1

    def generate_span_id(self) -> int:
        span_id, self.next_span = self.next_span, self.next_span + 1
        return span_id


def _two_traces_reusing_span_ids() -> SpanRecorder:
    recorder = SpanRecorder(id_generator=_ReusedSpanIds())
    for _ in range(2):
        with recorder.tracer.start_as_current_span("agent", context=None) as root:
            root.set_attribute(sc.GEN_AI_AGENT_NAME, "triage")
            with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
                call.set_attributes(
                    {**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10}
                )
    return recorder


def _runs(db_path) -> list[tuple]:
    with read_connection(db_path) as conn:
        return conn.execute(
            "SELECT run_id, task_type, model_calls, input_tokens, output_tokens, total_tokens, quality, "
            "duration_s, start_utc, end_utc FROM runs ORDER BY run_id"
        ).fetchall()


# --- identity ---------------------------------------------------------------------------------
@pytest.mark.system  # store writes: seconds
def test_spans_reusing_span_ids_in_two_traces_are_two_runs_of_one_call(tmp_path):
    spans = _two_traces_reusing_span_ids().spans()
    assert {s.context.span_id for s in spans} == {1, 2}  # the ids really are reused
    mapped = map_request(encode_spans(spans), price=False)
    assert mapped.rejected == 0 and len(mapped.calls) == 2
    runs = _runs(mapped_store(tmp_path, mapped))
    assert [(r[2], r[5]) for r in runs] == [(1, 110), (1, 110)]
    assert len({r[0] for r in runs}) == 2


@pytest.mark.system
def test_reused_span_ids_through_a_real_collector_and_the_sdk_exporter(tmp_path, python):
    spans = _two_traces_reusing_span_ids().spans()
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (process, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
        assert exporter.export(spans) == SpanExportResult.SUCCESS  # one POST
        exporter.shutdown()
    runs = _runs(db_path)
    assert [(r[2], r[5]) for r in runs] == [(1, 110), (1, 110)]


def test_a_different_span_under_the_same_trace_and_span_id_is_rejected_with_a_reason():
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
        call.set_attributes({**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10})
    request = encode_spans(recorder.spans())
    scope = request.resource_spans[0].scope_spans[0]
    twin = scope.spans.add()
    twin.CopyFrom(scope.spans[0])
    twin.attributes[-1].value.int_value = 999  # same ids, other content
    mapped = map_request(request, price=False)
    assert mapped.rejected == 1 and len(mapped.calls) == 1
    assert "span id collision" in mapped.errors[0]


@pytest.mark.system  # store writes: seconds
def test_an_exact_repeat_of_a_span_in_one_request_is_stored_once(tmp_path):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
        call.set_attributes({**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10})
    spans = recorder.spans()
    mapped = map_request(encode_spans(spans + spans), price=False)
    assert mapped.rejected == 0 and len(mapped.calls) == 1
    again = map_request(encode_spans(spans), price=False)  # an exporter retry
    runs = _runs(mapped_store(tmp_path, mapped, again))
    assert [(r[2], r[5]) for r in runs] == [(1, 110)]


# --- aggregates -------------------------------------------------------------------------------
_GEN_AI_USAGE = (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_OUTPUT_TOKENS)


def _agent_with_two_chats(root_usage: tuple[int, int], root_attributes=None, usage_keys=_GEN_AI_USAGE):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("agent run") as root:
        root.set_attributes(
            {
                sc.GEN_AI_AGENT_NAME: "researcher",
                usage_keys[0]: root_usage[0],
                usage_keys[1]: root_usage[1],
                **(root_attributes or {}),
            }
        )
        for inp, out in ((300, 40), (500, 60)):
            with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
                call.set_attributes(
                    {**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: inp, sc.GEN_AI_USAGE_OUTPUT_TOKENS: out}
                )
    return recorder.spans()


@pytest.mark.system  # store writes: seconds
def test_an_agent_span_carrying_the_sum_of_its_chat_children_is_not_a_call(tmp_path):
    mapped = map_request(encode_spans(_agent_with_two_chats((800, 100))), price=False)
    assert sorted(c["input_tokens"] for c in mapped.calls) == [300, 500]
    assert mapped.flagged == {}
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert (run[1], run[2], run[5], run[6]) == ("researcher", 2, 900, None)


@pytest.mark.parametrize(
    ("root_attributes", "usage_keys"),
    [
        # OpenLLMetry workflow span: a total beside the parts
        ({sc.LLM_USAGE_TOTAL_TOKENS: 900}, _GEN_AI_USAGE),
        # OpenInference token counts, no span kind given
        ({}, (sc.LLM_TOKEN_COUNT_PROMPT, sc.LLM_TOKEN_COUNT_COMPLETION)),
        # deprecated GenAI names, no agent operation
        ({}, (sc.GEN_AI_USAGE_PROMPT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS)),
    ],
)
def test_the_aggregate_rule_holds_whatever_the_convention(root_attributes, usage_keys):
    spans = _agent_with_two_chats((800, 100), root_attributes, usage_keys)
    mapped = map_request(encode_spans(spans), price=False)
    assert len(mapped.calls) == 2
    assert sum(c["input_tokens"] + c["output_tokens"] for c in mapped.calls) == 900


@pytest.mark.system  # store writes: seconds
def test_an_aggregate_that_disagrees_with_its_children_is_flagged(tmp_path):
    mapped = map_request(encode_spans(_agent_with_two_chats((700, 100))), price=False)
    assert len(mapped.calls) == 2 and mapped.flagged == {"aggregate_mismatch": 1}
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert run[5] == 900 and run[6] == "aggregate_mismatch"


# --- run of the nearest ancestor that names one -------------------------------------------------
@pytest.mark.system  # store writes: seconds
def test_chat_children_belong_to_the_run_their_invoke_agent_root_names(tmp_path):
    recorder = SpanRecorder(service="support-bot")
    with recorder.tracer.start_as_current_span("invoke_agent triage") as root:
        root.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
                sc.BUDGET_RUN_ID: "run-42",
                sc.BUDGET_TASK_TYPE: "triage",
            }
        )
        with recorder.tracer.start_as_current_span("step"):  # an unnamed layer in between
            for inp, out in ((120, 30), (80, 20)):
                with recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call:
                    call.set_attributes(
                        {**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: inp, sc.GEN_AI_USAGE_OUTPUT_TOKENS: out}
                    )
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert {c["run_id"] for c in mapped.calls} == {"run-42"}
    runs = _runs(mapped_store(tmp_path, mapped))
    assert [(r[0], r[1], r[2], r[5]) for r in runs] == [("run-42", "triage", 2, 250)]


# --- foreign usage conventions ----------------------------------------------------------------
@pytest.mark.system  # store writes: seconds
def test_bedrock_span_whose_input_leaves_out_cache_reads_is_normalized_and_flagged(tmp_path):
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat claude", kind=SpanKind.CLIENT) as call:
        call.set_attributes(
            {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                sc.GEN_AI_PROVIDER_NAME: "aws.bedrock",
                sc.GEN_AI_REQUEST_MODEL: "anthropic.claude-3-5-sonnet-20240620-v1:0",
                sc.GEN_AI_USAGE_INPUT_TOKENS: 500,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 100,
                sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 3000,
            }
        )
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    assert mapped.rejected == 0
    (row,) = mapped.calls
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (3500, 3000, 100)
    assert row["quality"] == "foreign_usage" and mapped.flagged == {"foreign_usage": 1}
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert (run[2], run[5], run[6]) == (1, 3600, "foreign_usage")


def test_reasoning_outside_the_output_is_added_and_flagged():
    recorder = SpanRecorder()
    with recorder.tracer.start_as_current_span("chat gemini", kind=SpanKind.CLIENT) as call:
        call.set_attributes(
            {
                **CHAT,
                sc.GEN_AI_USAGE_INPUT_TOKENS: 10,
                sc.GEN_AI_USAGE_OUTPUT_TOKENS: 1,
                sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 5,
            }
        )
    (row,) = map_request(encode_spans(recorder.spans()), price=False).calls
    assert (row["output_tokens"], row["reasoning_tokens"], row["quality"]) == (6, 5, "foreign_usage")


# --- impossible times -------------------------------------------------------------------------
def _span_at(start_ns: int, end_ns: int, run_id: str | None = None):
    recorder = SpanRecorder()
    call = recorder.tracer.start_span("chat gpt-4o", kind=SpanKind.CLIENT, start_time=start_ns)
    attributes = {**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10}
    if run_id:
        attributes[sc.BUDGET_RUN_ID] = run_id
    call.set_attributes(attributes)
    call.end(end_time=end_ns)
    return encode_spans(recorder.spans())


@pytest.mark.system  # store writes: seconds
def test_a_span_stamped_in_2031_is_clamped_to_the_receive_time_and_flagged(tmp_path):
    now_ns = time.time_ns()
    future = int(dt.datetime(2031, 6, 1, tzinfo=dt.UTC).timestamp() * 1e9)
    mapped = map_request(_span_at(future, future + 2_000_000_000), price=False, now_ns=now_ns)
    (row,) = mapped.calls
    received = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=now_ns // 1000)
    assert row["start_utc"] == row["end_utc"] == received
    assert row["duration_s"] == 0 and row["quality"] == "future_time"
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert run[6] == "future_time" and run[9] <= dt.datetime.now(dt.UTC).replace(tzinfo=None)


def test_a_timestamp_within_the_skew_allowance_is_kept():
    now_ns = time.time_ns()
    start = now_ns + int((FUTURE_SKEW_S - 10) * 1e9)
    mapped = map_request(_span_at(start, start + 1_000_000_000), price=False, now_ns=now_ns)
    assert mapped.calls[0]["quality"] is None and mapped.calls[0]["duration_s"] == 1.0


@pytest.mark.system  # store writes: seconds
def test_an_end_before_the_start_gives_duration_zero_and_a_flag(tmp_path):
    start = time.time_ns() - 60_000_000_000
    mapped = map_request(_span_at(start, start - 5_000_000_000), price=False)
    (row,) = mapped.calls
    assert row["duration_s"] == 0 and row["end_utc"] == row["start_utc"]
    assert row["quality"] == "end_before_start"
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert run[7] == 0


def test_zero_timestamps_are_null_and_flagged():
    request = _span_at(time.time_ns() - 1_000_000_000, time.time_ns())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.start_time_unix_nano = 0
    (row,) = map_request(request, price=False).calls
    assert row["start_utc"] is None and row["duration_s"] is None and row["quality"] == "missing_time"


def test_a_guard_run_span_in_the_future_is_clamped_and_flags_the_run(tmp_path):
    recorder = SpanRecorder()
    future = int(dt.datetime(2031, 6, 1, tzinfo=dt.UTC).timestamp() * 1e9)
    run_span = recorder.tracer.start_span("invoke_agent triage", start_time=future)
    run_span.set_attributes(
        {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
            sc.BUDGET_RUN_ID: "r-f",
            sc.BUDGET_TASK_TYPE: "t",
        }
    )
    run_span.end(end_time=future + 10)
    mapped = map_request(encode_spans(recorder.spans()), price=False)
    (run,) = _runs(mapped_store(tmp_path, mapped))
    assert run[6] == "future_time" and run[9] <= dt.datetime.now(dt.UTC).replace(tzinfo=None)


# --- the flags are visible --------------------------------------------------------------------
def test_flagged_spans_are_counted_by_reason_on_a_fresh_registry():
    from prometheus_client import CollectorRegistry

    from budgetlens.ingest.metrics import CollectorMetrics

    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    metrics.observe_received(3, 0, {"future_time": 2, "foreign_usage": 1, "made_up": 1})
    value = registry.get_sample_value
    assert value("budgetlens_ingest_flagged_spans_total", {"reason": "future_time"}) == 2
    assert value("budgetlens_ingest_flagged_spans_total", {"reason": "foreign_usage"}) == 1
    assert value("budgetlens_ingest_flagged_spans_total", {"reason": "other"}) == 1


@pytest.mark.system
def test_a_real_collector_counts_flagged_spans_and_runs_show_the_flag(tmp_path, python):
    import requests

    future = int(dt.datetime(2031, 6, 1, tzinfo=dt.UTC).timestamp() * 1e9)
    recorder = SpanRecorder()
    call = recorder.tracer.start_span("chat gpt-4o", kind=SpanKind.CLIENT, start_time=future)
    call.set_attributes({**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 100, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 10})
    call.end(end_time=future + 1_000_000_000)
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (process, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
        assert exporter.export(recorder.spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
        scrape = requests.get(f"{url}/metrics", timeout=10).text
    assert 'budgetlens_ingest_flagged_spans_total{reason="future_time"} 1.0' in scrape
    (run,) = _runs(db_path)
    assert run[6] == "future_time" and run[9] <= dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _calls_row(run_id: str, start: dt.datetime, tokens: int, quality: str | None = None) -> dict:
    return {
        "span_id": f"{run_id}-call",
        "run_id": run_id,
        "source": "test",
        "task_type": "triage",
        "start_utc": start,
        "end_utc": start + dt.timedelta(seconds=5),
        "input_tokens": tokens,
        "output_tokens": 0,
        "usage_status": sc.USAGE_REPORTED,
        "quality": quality,
    }


@pytest.mark.system  # store and CLI: seconds
def test_cli_runs_shows_quality_and_a_future_run_never_moves_the_default_window(tmp_path, capsys):
    import json

    from budgetlens.analysis import views
    from budgetlens.cli import main

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = [_calls_row(f"r{day}", now - dt.timedelta(days=day, hours=1), 100 + day) for day in range(3)]
    rows.append(_calls_row("r-2031", dt.datetime(2031, 6, 1), 999, "future_time"))  # an importer's log
    rows.append(_calls_row("r-flagged", now - dt.timedelta(hours=2), 50, "end_before_start,foreign_usage"))
    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        write_batch(conn, rows)
    assert main(["runs", "--db", str(db_path), "--format", "json"]) == 0
    shown = {row["run_id"]: row["quality"] for row in json.loads(capsys.readouterr().out)}
    # the window ends now: the three recent runs and the flagged one, not the 2031 one
    assert shown == {"r0": None, "r1": None, "r2": None, "r-flagged": "end_before_start,foreign_usage"}
    assert main(["runs", "--db", str(db_path), "--format", "json", "--search", "foreign_usage"]) == 0
    assert [row["run_id"] for row in json.loads(capsys.readouterr().out)] == ["r-flagged"]
    with read_connection(db_path) as conn:
        overview = views.overview(conn, views.Filters())
    assert overview.flagged_runs == 2


@pytest.mark.system  # migrates a store: seconds
def test_a_version_1_store_migrates_to_call_ids_and_quality(tmp_path):
    import duckdb

    from budgetlens.store import sql as store_sql
    from budgetlens.store.migrations import MIGRATIONS, SCHEMA_VERSION

    db_path = tmp_path / "old.duckdb"
    conn = duckdb.connect(str(db_path))
    conn.execute(store_sql.CREATE_MIGRATIONS_TABLE)
    for statement in MIGRATIONS[0][1].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(store_sql.RECORD_MIGRATION, [1])
    conn.execute(
        "INSERT INTO model_calls (span_id, run_id, trace_id, source, input_tokens, output_tokens, usage_status) "
        "VALUES ('00000000000000aa', 'run-old', 'ab' || repeat('0', 30), 'otlp', 10, 5, 'reported'), "
        "('imported-id', 'run-imp', NULL, 'import:codex', 7, 3, 'reported')"
    )
    conn.close()
    with write_connection(db_path) as conn:  # migrates
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == SCHEMA_VERSION
        ids = sorted(row[0] for row in conn.execute("SELECT call_id FROM model_calls").fetchall())
        assert ids == ["ab" + "0" * 30 + ":00000000000000aa", "imported-id"]
        # the same span id in another trace is another call now
        mapped_rows = [
            {
                "span_id": "00000000000000aa",
                "trace_id": "cd" + "0" * 30,
                "run_id": "run-new",
                "source": "otlp",
                "input_tokens": 1,
                "output_tokens": 1,
                "usage_status": "reported",
            }
        ]
        assert write_batch(conn, mapped_rows).calls == 1
        write_batch(conn, mapped_rows)  # sent again: stored once
        assert conn.execute("SELECT count(*) FROM model_calls").fetchone()[0] == 3


# --- the tree rules across requests (SpanMemory) -----------------------------------------------
def _split(spans, names: set[str]):
    first = [s for s in spans if s.name in names]
    return first, [s for s in spans if s.name not in names]


@pytest.mark.system  # store writes: seconds
def test_an_aggregate_sent_after_its_calls_is_not_a_call(tmp_path):
    from budgetlens.otlp import SpanMemory

    memory = SpanMemory()
    children, parent = _split(_agent_with_two_chats((800, 100)), {"chat gpt-4o"})
    first = map_request(encode_spans(children), price=False, memory=memory)
    second = map_request(encode_spans(parent), price=False, memory=memory)
    assert len(first.calls) == 2 and second.calls == [] and len(second.records) == 1
    (run,) = _runs(mapped_store(tmp_path, first, second))
    assert (run[1], run[2], run[5]) == ("researcher", 2, 900)


@pytest.mark.system  # store writes: seconds
def test_calls_sent_after_their_named_run_span_join_that_run(tmp_path):
    from budgetlens.otlp import SpanMemory

    recorder = SpanRecorder()
    with (
        recorder.run_span("run-7", "triage"),
        recorder.tracer.start_as_current_span("step"),
        recorder.tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as call,
    ):
        call.set_attributes({**CHAT, sc.GEN_AI_USAGE_INPUT_TOKENS: 70, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 30})
    memory = SpanMemory()
    calls, rest = _split(recorder.spans(), {"chat gpt-4o"})
    first = map_request(encode_spans(rest), price=False, memory=memory)  # run span and "step"
    second = map_request(encode_spans(calls), price=False, memory=memory)
    assert [c["run_id"] for c in second.calls] == ["run-7"]
    runs = _runs(mapped_store(tmp_path, first, second))
    assert [(r[0], r[1], r[2], r[5]) for r in runs] == [("run-7", "triage", 1, 100)]


def test_span_memory_forgets_the_oldest_beyond_its_bound():
    from budgetlens.otlp import SpanMemory

    memory = SpanMemory(max_spans=2)
    memory.remember(
        [("t", "a", "", "run-a", False), ("t", "b", "a", None, True), ("t", "c", "", "run-c", False)]
    )
    assert len(memory) == 2
    assert memory.named_run("t", "a") is None and memory.named_run("t", "c") == "run-c"
    with pytest.raises(ValueError, match="max_spans"):
        SpanMemory(max_spans=0)


@pytest.mark.system
def test_a_real_collector_links_an_aggregate_sent_in_a_later_export(tmp_path, python):
    children, parent = _split(_agent_with_two_chats((800, 100)), {"chat gpt-4o"})
    db_path = tmp_path / "store.duckdb"
    with collector_process(python, db_path) as (process, url):
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=10)
        assert exporter.export(children) == SpanExportResult.SUCCESS  # the SDK's first batch
        assert exporter.export(parent) == SpanExportResult.SUCCESS  # the root, later
        exporter.shutdown()
    (run,) = _runs(db_path)
    assert (run[2], run[5]) == (2, 900)
