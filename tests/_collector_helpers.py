"""Helpers for the collector tests: real OTel SDK spans, OTLP/JSON encoding, a live collector, the
CLI in a subprocess."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from budgetlens import semconv as sc

_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT, "server": SpanKind.SERVER}


class SpanRecorder:
    """A real SDK TracerProvider whose finished spans are kept in memory (ids from
    ``id_generator``, else the SDK's random ids)."""

    def __init__(self, service: str = "agent-service", id_generator: IdGenerator | None = None):
        self.memory = InMemorySpanExporter()
        kwargs = {"id_generator": id_generator} if id_generator else {}
        self.provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: service}), **kwargs)
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("tests.collector")

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())

    def chat_calls(
        self,
        count: int,
        first_input_tokens: int = 0,
        run_id: str | None = None,
        extra: dict | None = None,
    ) -> list[ReadableSpan]:
        """Emit ``count`` chat spans of gpt-4o, one output token each and input tokens counting up
        from ``first_input_tokens`` (so that every span differs); with ``run_id``, spans of that
        guard run, turns 1 to ``count``; ``extra`` attributes on every span. Returns every finished
        span."""
        for index in range(count):
            with self.tracer.start_as_current_span("chat gpt-4o") as span:
                span.set_attributes(
                    {
                        sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                        sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                        sc.GEN_AI_USAGE_INPUT_TOKENS: first_input_tokens + index,
                        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 1,
                    }
                )
                if run_id is not None:
                    span.set_attributes({sc.BUDGET_RUN_ID: run_id, sc.BUDGET_TURN: index + 1})
                if extra:
                    span.set_attributes(extra)
        return self.spans()

    @contextlib.contextmanager
    def run_span(self, run_id: str, task_type: str, attributes: dict | None = None):
        """The current span ``invoke_agent <task_type>`` of guard run ``run_id``, with ``attributes``
        beside the run's own."""
        with self.tracer.start_as_current_span(f"invoke_agent {task_type}") as run:
            run.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT,
                    sc.BUDGET_RUN_ID: run_id,
                    sc.BUDGET_TASK_TYPE: task_type,
                    **(attributes or {}),
                }
            )
            yield run

    def guard_run(
        self,
        run_id: str,
        task_type: str,
        calls: list[tuple[str, int, int]],
        stop_reason: str = sc.STOP_COMPLETED,
        tools: int = 0,
        warnings: int = 0,
        limit_total_tokens: int = 100_000,
        content: str | None = None,
    ) -> None:
        """Emit one run the way the guard does (design §4): run span, call spans, events."""
        used = 0
        with self.run_span(run_id, task_type, {sc.BUDGET_LIMIT_TOTAL_TOKENS: limit_total_tokens}) as run:
            for turn, (model, inp, out) in enumerate(calls, start=1):
                used += inp + out
                with self.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT) as call:
                    call.set_attributes(
                        {
                            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                            sc.GEN_AI_PROVIDER_NAME: "openai",
                            sc.GEN_AI_REQUEST_MODEL: model,
                            sc.GEN_AI_RESPONSE_MODEL: model,
                            sc.GEN_AI_USAGE_INPUT_TOKENS: inp,
                            sc.GEN_AI_USAGE_OUTPUT_TOKENS: out,
                            sc.BUDGET_RUN_ID: run_id,
                            sc.BUDGET_TASK_TYPE: task_type,
                            sc.BUDGET_TURN: turn,
                            sc.BUDGET_USED_TOKENS: used,
                            sc.BUDGET_USAGE_STATUS: sc.USAGE_REPORTED,
                            sc.BUDGET_COST_USD: (inp + out) * 1e-6,
                        }
                    )
                    if content:
                        call.set_attribute("gen_ai.input.messages", content)
            for _ in range(tools):
                run.add_event(sc.EVENT_TOOL_CALL, {sc.GEN_AI_TOOL_NAME: "bash", sc.BUDGET_USED_TOKENS: used})
            for _ in range(warnings):
                run.add_event(sc.EVENT_WARNING, {sc.BUDGET_USED_TOKENS: used, sc.BUDGET_PERCENT: 80.0})
            if stop_reason != sc.STOP_COMPLETED:
                run.add_event(sc.EVENT_STOP, {sc.BUDGET_REASON: stop_reason})
            run.set_attributes(
                {
                    sc.BUDGET_TURNS: len(calls),
                    sc.BUDGET_TOOL_CALLS: tools,
                    sc.BUDGET_USED_TOKENS: used,
                    sc.GEN_AI_USAGE_INPUT_TOKENS: sum(c[1] for c in calls),
                    sc.GEN_AI_USAGE_OUTPUT_TOKENS: sum(c[2] for c in calls),
                    sc.BUDGET_COST_USD: used * 1e-6,
                    sc.BUDGET_STOP_REASON: stop_reason,
                    sc.BUDGET_USAGE_STATUS: sc.USAGE_REPORTED,
                    sc.BUDGET_RETRYABLE: False,
                }
            )
            if stop_reason == sc.STOP_FAILED:
                run.set_status(Status(StatusCode.ERROR))


def mapped_store(tmp_path: Path, *mapped_list) -> Path:
    """``tmp_path/store.duckdb`` holding the rows of each mapped request (``map_request``'s
    result), written in order, one batch each."""
    from budgetlens.store import write_batch, write_connection

    db_path = tmp_path / "store.duckdb"
    with write_connection(db_path) as conn:
        for mapped in mapped_list:
            write_batch(conn, *mapped.tables())
    return db_path


def anyagent_spans(path: Path) -> list[ReadableSpan]:
    """The spans of an any-agent ``*_trace.json`` file (SDK ``to_json`` shape) as SDK spans."""
    document = json.loads(path.read_text())
    spans = []
    for item in document["spans"]:
        ctx = item["context"]
        context = SpanContext(int(ctx["trace_id"]), int(ctx["span_id"]), is_remote=False)
        parent = None
        if item.get("parent") and item["parent"].get("span_id"):
            parent = SpanContext(
                int(item["parent"]["trace_id"]), int(item["parent"]["span_id"]), is_remote=False
            )
        code = item["status"]["status_code"]
        status = Status(
            StatusCode.ERROR if code == "error" else StatusCode.OK if code == "ok" else StatusCode.UNSET
        )
        spans.append(
            ReadableSpan(
                name=item["name"],
                context=context,
                parent=parent,
                resource=Resource.create(item["resource"]["attributes"]),
                attributes=item["attributes"],
                kind=_KINDS.get(item["kind"], SpanKind.INTERNAL),
                status=status,
                start_time=item["start_time"],
                end_time=item["end_time"],
            )
        )
    return spans


def otlp_json(spans) -> dict:
    """OTLP/JSON document of SDK spans: the protobuf encoding, with hex ids as OTLP/JSON wants."""
    document = json_format.MessageToDict(encode_spans(spans))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


def otlp_protobuf(spans) -> bytes:
    return encode_spans(spans).SerializeToString()


class LiveCollector:
    """The receiver app served by a real uvicorn server in a thread."""

    def __init__(self, app, port: int):
        import uvicorn

        self.app = app
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("collector did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(15)


@contextlib.contextmanager
def live_collector(db_path, port, **kwargs):
    from budgetlens.ingest.app import create_app

    with LiveCollector(create_app(db_path, **kwargs), port) as live:
        yield live


@contextlib.contextmanager
def collector_process(python: str, db_path, port: int = 0, *extra: str):
    """``budgetlens collector`` as a subprocess; yields (process, endpoint URL) once it listens.

    Its stderr goes to an unlinked temporary file, and ``process.stderr`` reads that file from its
    start: a pipe nobody reads while the collector runs fills at 64 KiB and then blocks the
    collector's next log line (a flood of warnings froze a collector under test that way)."""
    import os
    import subprocess
    import tempfile

    fd, path = tempfile.mkstemp(prefix="collector-stderr-", suffix=".log")
    with os.fdopen(fd, "w") as written:
        process = subprocess.Popen(
            [python, "-m", "budgetlens.cli", "collector", "--db", str(db_path), "--port", str(port), *extra],
            stdout=subprocess.PIPE,
            stderr=written,
            text=True,
        )
    process.stderr = open(path, encoding="utf-8", errors="replace")  # read by the caller
    os.unlink(path)  # both ends stay open; nothing is left behind
    try:
        line = process.stdout.readline()
        if "listening on" not in line:
            process.kill()
            raise RuntimeError(f"collector did not start: {line}{process.stderr.read()}")
        yield process, line.rsplit(" ", 1)[1].strip()
    finally:
        if process.poll() is None:  # SIGTERM: the collector loads its journal, then exits
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait(10)


def run_cli(python: str, *argv: str, timeout: float = 120):
    """``python -m budgetlens.cli ARGV`` in a subprocess, its output captured as text; returns the
    ``subprocess.CompletedProcess``."""
    import subprocess

    return subprocess.run(
        [python, "-m", "budgetlens.cli", *argv], capture_output=True, text=True, timeout=timeout
    )
