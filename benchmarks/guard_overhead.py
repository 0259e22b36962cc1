"""Per-call cost of the guard: reserve + record, without and with the OpenTelemetry SDK.

Targets (issue 3): bookkeeping alone <= 5 us per reserve+record (no SDK configured, the default
no-op tracer). Issue 25: a priced guard (a cost limit: each call priced at record) with the OTel
SDK and a BatchSpanProcessor (no-op exporter) <= 1.5x the cost of starting and ending one bare
OTel span carrying the same attributes, measured side by side in the same run, beside the same
guard without a cost limit (usage recorded, the cost priced in one batch when read: here at
``finish()``, inside the timed loop) and bookkeeping without a model (nothing to price).

Interleaved mode (the ratios of record): in one process, for ``--rounds`` rounds, the bare-span
loop and the two guard loops with the SDK run one after the other (their order rotating each
round), each timed by wall clock (``perf_counter``), process CPU time (``process_time``: every
thread, the SDK's export thread too) and the calling thread's CPU time (``thread_time``: what the
agent's own thread pays); each round gives its own ratio to the bare span of the same round, and
the median over rounds is the figure. The separate measurements (each configuration timed alone,
median of 5) stay beside it, wall clock.

Run: ``python -m benchmarks.guard_overhead [--calls N] [--rounds R]``; prints the figures and
rewrites the "guard_overhead" section of BENCHMARKS.md (``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from benchmarks._report import machine, publish
from budgetlens import RunBudget, Usage
from budgetlens import semconv as sc
from budgetlens.guard.telemetry import usage_attributes

USAGE = Usage(input_tokens=1_500, output_tokens=300, cache_read_tokens=1_000, reasoning_tokens=100)


class NoopExporter(SpanExporter):
    """Accepts every batch and drops it (measures the SDK, not an exporter)."""

    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self):
        return None


def _per_call_us(fn, calls: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean microseconds per call of ``fn(calls)``."""
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn(calls)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def _guard_loop(tracer, model, max_cost_usd=None):
    def loop(n: int) -> None:
        run = RunBudget(max_total_tokens=10**12, max_cost_usd=max_cost_usd, tracer=tracer, provider="openai")
        reserve, record = run.reserve, run.record
        for _ in range(n):
            record(USAGE, model=model, reservation=reserve(2_000))
        run.finish()

    return loop


def _bare_span_loop(tracer):
    parent = tracer.start_span("invoke_agent bench")
    ctx = trace.set_span_in_context(parent)

    def loop(n: int) -> None:
        for i in range(n):
            attributes = {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
                sc.BUDGET_RUN_ID: "r" * 32,
                sc.BUDGET_TASK_TYPE: "default",
                sc.BUDGET_TURN: i,
                sc.BUDGET_RESERVED_TOKENS: 2_000,
                sc.BUDGET_USED_TOKENS: 1_800 * i,
                sc.BUDGET_USAGE_STATUS: sc.USAGE_REPORTED,
                sc.BUDGET_REMAINING_TOKENS: 10**12,
                sc.GEN_AI_PROVIDER_NAME: "openai",
                sc.GEN_AI_REQUEST_MODEL: "gpt-4o",
                sc.GEN_AI_RESPONSE_MODEL: "gpt-4o",
                sc.BUDGET_COST_USD: 0.0055,
                **usage_attributes(USAGE),
            }
            span = tracer.start_span(
                "chat gpt-4o",
                context=ctx,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=time.time_ns(),
            )
            span.end()

    return loop


def measure(calls: int) -> dict[str, float]:
    """Microseconds per call for each configuration (dict of floats)."""
    noop = trace.NoOpTracer()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter(), max_queue_size=1 << 16))
    sdk = provider.get_tracer("budgetlens-bench")
    limit = 10.0**9  # a cost limit never reached: every call is priced at record
    figures = {
        "bookkeeping_us": _per_call_us(_guard_loop(noop, None), calls),
        "bookkeeping_deferred_us": _per_call_us(_guard_loop(noop, "gpt-4o"), calls),
        "bookkeeping_priced_us": _per_call_us(_guard_loop(noop, "gpt-4o", limit), calls),
        "bare_span_us": _per_call_us(_bare_span_loop(sdk), calls),
        "with_sdk_deferred_us": _per_call_us(_guard_loop(sdk, "gpt-4o"), calls),
        "with_sdk_us": _per_call_us(_guard_loop(sdk, "gpt-4o", limit), calls),
    }
    provider.shutdown()
    figures["priced_ratio"] = figures["bookkeeping_priced_us"] / figures["bookkeeping_us"]
    figures["sdk_ratio"] = figures["with_sdk_us"] / figures["bare_span_us"]
    figures["sdk_deferred_ratio"] = figures["with_sdk_deferred_us"] / figures["bare_span_us"]
    return figures


#: Clocks of the interleaved mode: name -> seconds.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time, "thread": time.thread_time}
#: Configurations of the interleaved mode (all with the OTel SDK), the reference first.
INTERLEAVED = ("bare_span", "guard_deferred", "guard_priced")


def _timed(fn, calls: int) -> dict[str, float]:
    """Microseconds per call of ``fn(calls)`` on each of :data:`CLOCKS`."""
    gc.collect()
    start = {name: clock() for name, clock in CLOCKS.items()}
    fn(calls)
    end = {name: clock() for name, clock in CLOCKS.items()}
    return {name: (end[name] - start[name]) / calls * 1e6 for name in CLOCKS}


def interleaved(calls: int, rounds: int) -> list[dict[str, dict[str, float]]]:
    """Per round: configuration -> clock -> microseconds per call, the configurations of
    :data:`INTERLEAVED` run alternately in one process (rotating order) with the OTel SDK and a
    BatchSpanProcessor (no-op exporter); a warm-up round first is not kept."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter(), max_queue_size=1 << 16))
    sdk = provider.get_tracer("budgetlens-bench")
    loops = {
        "bare_span": _bare_span_loop(sdk),
        "guard_deferred": _guard_loop(sdk, "gpt-4o"),
        "guard_priced": _guard_loop(sdk, "gpt-4o", 10.0**9),
    }
    out = []
    for index in range(rounds + 1):
        shift = index % len(INTERLEAVED)
        order = INTERLEAVED[shift:] + INTERLEAVED[:shift]
        sample = {name: _timed(loops[name], calls) for name in order}
        if index:
            out.append(sample)
    provider.shutdown()
    return out


def ratios(samples: list[dict[str, dict[str, float]]], name: str, clock: str) -> list[float]:
    """Per round: ``name``'s microseconds per call over the bare span's, on ``clock``."""
    return [s[name][clock] / s["bare_span"][clock] for s in samples]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


#: Modules an agent process must not pay for when it imports the guard.
HEAVY_MODULES = ("duckdb", "pandas", "pyarrow", "plotly", "streamlit", "opentelemetry.sdk")


def import_figures(repeats: int = 7) -> dict[str, float | str]:
    """Median wall ms of ``python -c "import budgetlens"`` in a fresh interpreter, the same for a bare
    interpreter (``python -c pass``), and the heavy modules the import loaded (should be none)."""

    def median_ms(code: str) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd="/", capture_output=True)
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, budgetlens; print(','.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))",
        ],
        check=True,
        cwd="/",
        capture_output=True,
        text=True,
    )
    bare, guard = median_ms("pass"), median_ms("import budgetlens")
    return {
        "bare_ms": bare,
        "import_ms": guard,
        "import_only_ms": guard - bare,
        "heavy": probe.stdout.strip() or "none",
    }


def _interleaved_lines(samples: list[dict[str, dict[str, float]]], calls: int) -> list[str]:
    """The interleaved table: one row per round (microseconds per call and ratios), then medians."""
    med = statistics.median
    lines = [
        f"Interleaved: {len(samples)} rounds in one process, {calls:,} calls per configuration per round "
        "(bare span, guard without a cost limit, guard with a cost limit: rotating order), each with the "
        "OTel SDK + BatchSpanProcessor (no-op exporter); wall = `perf_counter`, cpu = `process_time` "
        "(all threads, the SDK's export thread too), thread = `thread_time` (the agent's thread). "
        "Ratio = guard / bare span of the same round.",
        "",
        "| round | bare span us (wall / cpu / thread) | priced guard us (wall / cpu / thread) | "
        "priced / bare (wall / cpu / thread) | unpriced / bare (wall / cpu / thread) |",
        "|---|---|---|---|---|",
    ]
    for index, s in enumerate(samples, 1):
        bare, priced, deferred = s["bare_span"], s["guard_priced"], s["guard_deferred"]
        lines.append(
            f"| {index} | {' / '.join(f'{bare[c]:.1f}' for c in CLOCKS)} | "
            f"{' / '.join(f'{priced[c]:.1f}' for c in CLOCKS)} | "
            f"{' / '.join(f'{priced[c] / bare[c]:.2f}' for c in CLOCKS)} | "
            f"{' / '.join(f'{deferred[c] / bare[c]:.2f}' for c in CLOCKS)} |"
        )
    lines.append(
        "| **median** | "
        + " / ".join(f"{med(s['bare_span'][c] for s in samples):.1f}" for c in CLOCKS)
        + " | "
        + " / ".join(f"{med(s['guard_priced'][c] for s in samples):.1f}" for c in CLOCKS)
        + " | **"
        + " / ".join(f"{med(ratios(samples, 'guard_priced', c)):.2f}" for c in CLOCKS)
        + "** | "
        + " / ".join(f"{med(ratios(samples, 'guard_deferred', c)):.2f}" for c in CLOCKS)
        + " |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="reserve+record calls per sample")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the interleaved mode")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md")
    args = parser.parse_args(argv)
    load_before = _load()
    samples = interleaved(args.calls, args.rounds)
    f = measure(args.calls)
    imp = import_figures()
    load_after = _load()
    ok_book = f["bookkeeping_us"] <= 5.0
    priced_ratio = {c: statistics.median(ratios(samples, "guard_priced", c)) for c in CLOCKS}
    ok_sdk = priced_ratio["cpu"] <= 1.5
    lines = [
        "## Guard overhead (`benchmarks/guard_overhead.py`)",
        "",
        f"Machine: {machine()}. Load average (1 / 5 / 15 min): {load_before} before, {load_after} after.",
        "",
        f"Target (issue 25): priced guard with the OTel SDK <= 1.5x a bare span, interleaved median "
        f"(process CPU time): {priced_ratio['cpu']:.2f}x, {'met' if ok_sdk else 'MISSED'} "
        f"(wall {priced_ratio['wall']:.2f}x, agent thread {priced_ratio['thread']:.2f}x).",
        "",
        *_interleaved_lines(samples, args.calls),
        "",
        f"Separate (each configuration alone, wall clock): {args.calls:,} reserve+record calls per sample, "
        "median of 5.",
        "",
        "| configuration | us per reserve+record | target |",
        "|---|---|---|",
        f"| bookkeeping, no SDK (no-op tracer), no model (nothing priced) | {f['bookkeeping_us']:.2f} | "
        f"<= 5 us: {'met' if ok_book else 'MISSED'} |",
        f"| bookkeeping, no SDK, no cost limit (priced in one batch when read, at finish) | "
        f"{f['bookkeeping_deferred_us']:.2f} | - |",
        f"| bookkeeping, no SDK, cost limit (each call priced at record, genai-prices rates) | "
        f"{f['bookkeeping_priced_us']:.2f} | {f['priced_ratio']:.2f}x unpriced |",
        f"| bare OTel span with the same attributes (SDK, BatchSpanProcessor) | {f['bare_span_us']:.2f} | "
        "reference |",
        f"| guard, no cost limit, OTel SDK + BatchSpanProcessor (no-op exporter) | "
        f"{f['with_sdk_deferred_us']:.2f} | {f['sdk_deferred_ratio']:.2f}x bare span |",
        f"| guard, cost limit (priced), OTel SDK + BatchSpanProcessor (no-op exporter) | {f['with_sdk_us']:.2f} | "
        f"{f['sdk_ratio']:.2f}x bare span |",
        "",
        f"`import budgetlens` in a fresh interpreter: {imp['import_ms']:.0f} ms wall "
        f"({imp['import_only_ms']:.0f} ms above a bare `python -c pass`, {imp['bare_ms']:.0f} ms), median of 7; "
        f"heavy modules loaded ({', '.join(HEAVY_MODULES)}): {imp['heavy']}.",
    ]
    text = "\n".join(lines)
    publish("guard_overhead", text, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
