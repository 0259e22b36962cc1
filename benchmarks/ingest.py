"""Ingest benchmark: durable spans/s through ``budgetlens collector`` (issue 4, item 10).

Bodies: OTLP protobuf ``ExportTraceServiceRequest`` of 1,000 GenAI spans each, shaped like the
guard's telemetry (per run: 9 ``chat`` spans with usage and budget attributes + 1 ``invoke_agent``
run span with limits, totals and two span events). The collector runs as a subprocess on a fresh
DuckDB file; clients POST bodies over HTTP/1.1 keep-alive. Every span counted is acknowledged,
i.e. durable: appended to the collector's journal and fsynced (the collector answers 200 only
then); the end-to-end rate runs until the loader has committed every span to DuckDB.

Also measured in the same run: the "floor" (decode each body and read every attribute of every
span once, in this process), the collector's peak RSS (VmHWM), the cost of one load (open +
write_batch + close) on a fresh store and on a store that already holds ~1M calls, and where
the time goes per body.

Lag: at 25 %, 50 % and 90 % of the acknowledged rate measured above, bodies are offered
open-loop to a fresh collector while a reader polls the store as the dashboard does (through
the collector, ``budgetlens.store.connect``); p50/p95 of the time from sending a body until its
runs are queryable; at 50 % also with 4 of our readers busy (each 0.4 s on, 0.05 s off).

Reference: Arize Phoenix's persisted spans/s for the same bodies when ``--phoenix-python`` (or
``$BUDGETLENS_BENCH_PHOENIX_PYTHON``) names an interpreter that imports ``phoenix``
(``benchmarks.phoenix``); otherwise the column is skipped with the reason printed.

Usage: ``python -m benchmarks.ingest [--bodies 40] [--lag-seconds 20] [--big-calls N]
[--phoenix-python PATH] [--without-cost] [--no-write]`` (writes the "ingest" section of BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks._report import machine, publish
from benchmarks.ingest_lag import lag_at_rate, start_collector
from benchmarks.otlp_bodies import CALLS_PER_RUN, SPANS_PER_BODY, make_body
from benchmarks.phoenix import persisted_spans_per_s, phoenix_python, post_bodies


def floor_spans_per_s(bodies: list[bytes]) -> float:
    """Decode every body and read every attribute (key and value) of every span and span event
    once: no mapping, no store."""
    started = time.perf_counter()
    count = 0
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    count += 1
                    for kv in span.attributes:
                        _ = kv.key
                        value = kv.value
                        getattr(value, value.WhichOneof("value"))
                    for event in span.events:
                        for kv in event.attributes:
                            _ = kv.key
                            value = kv.value
                            getattr(value, value.WhichOneof("value"))
    return count / (time.perf_counter() - started)


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def durable_spans_per_s(bodies: list[bytes], clients: int, stated_cost: bool = True) -> dict:
    """Post ``bodies`` with ``clients`` concurrent keep-alive clients to a fresh collector;
    acknowledged (journaled + fsynced) rate, and end-to-end rate until all are in DuckDB.

    One body shaped as ``bodies`` (``stated_cost`` as ``make_body``'s) warms the collector
    first, outside the timing: without a stated cost it is priced, so each decode worker has
    loaded genai-prices' data (about 0.5 s of CPU, once per worker) before the timed bodies."""
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_collector(Path(tmp) / "bench.duckdb")
        try:
            warm = requests.post(
                f"{url}/v1/traces",
                data=make_body(10**6, stated_cost=stated_cost),
                headers={"Content-Type": "application/x-protobuf"},
            )
            warm.raise_for_status()
            while requests.get(f"{url}/healthz").json()["backlog_spans"]:
                time.sleep(0.01)
            started = time.perf_counter()
            failures = post_bodies(url, bodies, clients)
            acknowledged = time.perf_counter() - started
            while requests.get(f"{url}/healthz").json()["backlog_spans"]:
                time.sleep(0.005)
            loaded = time.perf_counter() - started
            text = requests.get(f"{url}/metrics").text
            rss = _peak_rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(60)
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {sorted(set(failures))}")
    loads = _metric(text, "budgetlens_commit_duration_seconds_count")
    fsyncs = _metric(text, "budgetlens_journal_fsync_duration_seconds_count")
    spans = len(bodies) * SPANS_PER_BODY
    return {
        "spans_per_s": spans / acknowledged,
        "e2e_spans_per_s": spans / loaded,
        "rss_mb": rss,
        "loads": int(loads),
        "load_ms": 1000 * _metric(text, "budgetlens_commit_duration_seconds_sum") / max(loads, 1),
        "fsyncs": int(fsyncs),
        "fsync_ms": 1000 * _metric(text, "budgetlens_journal_fsync_duration_seconds_sum") / max(fsyncs, 1),
    }


def _mapped_tables(body: bytes):
    from budgetlens.ingest.queue import _to_batch
    from budgetlens.otlp.decode import decode_protobuf
    from budgetlens.otlp.mapping import map_request

    batch, _ = _to_batch(map_request(decode_protobuf(body).request))
    return batch.calls, batch.records, batch.events


def load_ms(path: Path, bodies: list[bytes]) -> float:
    """Mean ms of one load (write_batch of one 1,000-span body) into ``path``, on one long-lived
    connection as the collector holds it (``budgetlens.store.host``; no checkpoint per commit)."""
    from budgetlens.store import write_batch
    from budgetlens.store.host import StoreHost

    tables = [_mapped_tables(body) for body in bodies]
    host = StoreHost(path)
    try:
        with host.write():
            pass  # open and migrate outside the timing
        started = time.perf_counter()
        for calls, records, events in tables:
            with host.write() as conn:
                write_batch(conn, calls, records, events)
        return 1000 * (time.perf_counter() - started) / len(tables)
    finally:
        host.close()


def big_store(path: Path, calls: int) -> None:
    """A store holding ``calls`` generated model calls (10 per run) with its rollup rebuilt."""
    from budgetlens.store import rebuild_runs, write_connection

    with write_connection(path) as conn:
        conn.execute(
            """
            INSERT INTO model_calls (call_id, span_id, run_id, source, task_type, request_model,
                start_utc, end_utc, turn, input_tokens, output_tokens, cost_usd, usage_status)
            SELECT 'big-' || i, 'big-' || i, 'big-run-' || (i // 10), 'bench', 'task-' || (i % 5),
                'gpt-4o-mini', TIMESTAMP '2026-01-01' + to_seconds(i),
                TIMESTAMP '2026-01-01' + to_seconds(i + 1), i % 10, 1000, 100, 0.0002,
                'reported'
            FROM range(?) t(i)""",
            [calls],
        )
        rebuild_runs(conn)


def stage_breakdown_ms(bodies: list[bytes]) -> dict:
    """Mean milliseconds per 1,000-span body of each stage, in this process."""
    from budgetlens.ingest.journal import Journal, encode_batch
    from budgetlens.ingest.queue import _to_batch
    from budgetlens.otlp.decode import decode_protobuf
    from budgetlens.otlp.mapping import map_request

    _to_batch(map_request(decode_protobuf(bodies[0]).request))  # warm the imports
    totals = dict.fromkeys(
        ("decode", "map", "rows to Arrow + journal encode", "journal append + fsync (1 body per fsync)"), 0.0
    )
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp) / "j")
        for body in bodies:
            marks = [time.perf_counter()]
            decoded = decode_protobuf(body)
            marks.append(time.perf_counter())
            mapped = map_request(decoded.request)
            marks.append(time.perf_counter())
            batch, _ = _to_batch(mapped)
            payload = encode_batch(batch.calls, batch.records, batch.events)
            marks.append(time.perf_counter())
            journal.append(payload)
            journal.sync()
            marks.append(time.perf_counter())
            for name, start, end in zip(totals, marks, marks[1:]):
                totals[name] += 1000 * (end - start)
        journal.close()
    return {name: value / len(bodies) for name, value in totals.items()}


def shard_map_ms(bodies: list[bytes]) -> float:
    """Mean milliseconds per body of mapping its longer shard of two (the collector maps both at
    once, one per worker, when a body finds the workers idle: ``budgetlens.ingest.shards``)."""
    from budgetlens.otlp.decode import decode_protobuf
    from budgetlens.otlp.mapping import map_request

    total = 0.0
    for body in bodies:
        request = decode_protobuf(body).request
        shards = []
        for k in (0, 1):
            started = time.perf_counter()
            map_request(request, shard=(k, 2)).tables()
            shards.append(time.perf_counter() - started)
        total += 1000 * max(shards)
    return total / len(bodies)


def _load_average() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def _measure(args) -> dict:
    """Every figure of the section, measured in this run."""
    results: dict = {"load_before": _load_average()}
    bodies = [make_body(seed, stated_cost=not args.without_cost) for seed in range(args.bodies)]
    results["body_kib"] = len(bodies[0]) / 1024
    results["floor"] = floor_spans_per_s(bodies)
    stated = not args.without_cost
    results["one"] = durable_spans_per_s(bodies, clients=1, stated_cost=stated)
    results["four"] = durable_spans_per_s(bodies, clients=4, stated_cost=stated)
    results["stages"] = stage_breakdown_ms(bodies[:20])
    results["shard_map_ms"] = shard_map_ms(bodies[:20])
    acknowledged = max(results["one"]["spans_per_s"], results["four"]["spans_per_s"])
    results["lag"] = {
        share: lag_at_rate(share * acknowledged, args.lag_seconds, stated_cost=stated)
        for share in (0.25, 0.5, 0.9)
    }
    results["busy_lag"] = lag_at_rate(
        0.5 * acknowledged, args.lag_seconds, busy_readers=4, stated_cost=stated
    )
    python, reason = phoenix_python(args.phoenix_python)
    results["phoenix"], results["phoenix_skipped"] = None, reason
    if python is None:
        print(f"benchmarks.ingest: Phoenix column skipped: {reason}", file=sys.stderr)
    else:
        results["phoenix"] = persisted_spans_per_s(python, bodies, len(bodies) * SPANS_PER_BODY)
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.duckdb", Path(tmp) / "big.duckdb"
        extra = [make_body(10**5 + seed) for seed in range(10)]
        load_ms(small, extra[:2])  # create + warm
        results["fresh_ms"] = load_ms(small, extra[2:])
        big_store(big, args.big_calls)
        load_ms(big, extra[:2])
        results["big_ms"] = load_ms(big, extra[2:])
    results["load_after"] = _load_average()
    return results


def _table_lines(args, r: dict, target: int) -> list[str]:
    one, four = r["one"], r["four"]
    ratio = one["spans_per_s"] / r["floor"]
    return [
        "| measure | value | target |",
        "|---|---|---|",
        f"| durable (acknowledged) spans/s, 1 client | {one['spans_per_s']:,.0f} | >= {target:,} |",
        f"| durable (acknowledged) spans/s, 4 clients | {four['spans_per_s']:,.0f} | |",
        f"| end-to-end spans/s until all are in DuckDB, 1 / 4 clients | "
        f"{one['e2e_spans_per_s']:,.0f} / {four['e2e_spans_per_s']:,.0f} | |",
        f"| floor: decode + read every attribute (key and value), in-process | {r['floor']:,.0f} spans/s | |",
        f"| 1 client / floor | {ratio:.0%} | >= 50 % |",
        f"| collector peak RSS (VmHWM), 1 client / 4 clients | {one['rss_mb']:.0f} MB / "
        f"{four['rss_mb']:.0f} MB | <= 300 MB |",
        f"| journal fsync groups, 1 / 4 clients (mean ms incl. append) | {one['fsyncs']} "
        f"({one['fsync_ms']:.1f}) / {four['fsyncs']} ({four['fsync_ms']:.1f}) | |",
        f"| DuckDB loads, 1 / 4 clients (mean ms: open + write_batch + close) | {one['loads']} "
        f"({one['load_ms']:.0f}) / {four['loads']} ({four['load_ms']:.0f}) | |",
        f"| one load of a 1,000-span body: fresh store / store with {args.big_calls:,} calls | "
        f"{r['fresh_ms']:.1f} ms / {r['big_ms']:.1f} ms | flat |",
        _phoenix_line(r),
    ]


def _phoenix_line(r: dict) -> str:
    phoenix = r.get("phoenix")
    if phoenix is None:
        return f"| persisted spans/s vs Arize Phoenix, same run | skipped: {r.get('phoenix_skipped')} | >= 100x |"
    ours = max(r["one"]["e2e_spans_per_s"], r["four"]["e2e_spans_per_s"])
    return (
        f"| persisted spans/s vs Arize Phoenix, same run | {ours:,.0f} vs {phoenix['spans_per_s']:,.0f} "
        f"({ours / phoenix['spans_per_s']:.0f}x; Phoenix persisted {phoenix['persisted']:,} of "
        f"{phoenix['spans']:,} within its wait) | >= 100x |"
    )


def _cold(r: dict) -> str:
    """The warm-up bodies' times to loaded (s), over every lag measurement."""
    colds = [lag.get("cold_s") for lag in (*r["lag"].values(), r["busy_lag"])]
    known = [value for value in colds if value is not None]
    return f"{min(known):.2f}-{max(known):.2f}" if known else "?"


def _lag_lines(args, r: dict) -> list[str]:
    acknowledged = max(r["one"]["spans_per_s"], r["four"]["spans_per_s"])
    lines = [
        "",
        f"Span-to-queryable time (s) at a share of the acknowledged rate ({acknowledged:,.0f} "
        f"spans/s): bodies offered open-loop for {args.lag_seconds:g} s by 4 clients to a fresh "
        "collector, after one warm-up body loaded outside the timing (a fresh collector's first "
        f"body took {_cold(r)} s to load: its decode worker's start, price data and the store's "
        "creation); a reader opens the store read-only for one query every 0.1 s (as the "
        "dashboard does) and notes when each body's runs appear; time from sending the body.",
        "",
        "| offered | spans/s | bodies | p50 | p95 | refused | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for share, lag in r["lag"].items():
        target = "p95 <= 2 s" if share == 0.5 else ""
        lines.append(
            f"| {share:.0%} | {share * acknowledged:,.0f} | {lag['bodies']} | {lag['p50']:.2f} | "
            f"{lag['p95']:.2f} | {lag['refused']} | {target} |"
        )
    busy = r["busy_lag"]
    lines.append(
        f"| 50 %, 4 readers busy (0.4 s on / 0.05 s off; {busy['reader_queries']} queries) | "
        f"{0.5 * acknowledged:,.0f} | {busy['bodies']} | {busy['p50']:.2f} | {busy['p95']:.2f} | "
        f"{busy['refused']} | p95 <= 5 s |"
    )
    return lines


def _verdict(r: dict, target: int) -> str:
    one, four = r["one"], r["four"]
    ratio = one["spans_per_s"] / r["floor"]
    missed = []
    if one["spans_per_s"] < target:
        missed.append(f"{one['spans_per_s']:,.0f} of {target:,} durable spans/s with one client")
    if ratio < 0.5:
        missed.append(f"{ratio:.0%} of the floor (target 50 %)")
    if max(one["rss_mb"], four["rss_mb"]) > 300:
        missed.append("RSS above 300 MB")
    if r["lag"][0.5]["p95"] > 2:
        missed.append(f"p95 lag {r['lag'][0.5]['p95']:.1f} s at 50 % of the acknowledged rate")
    if r["busy_lag"]["p95"] > 5:
        missed.append(f"p95 lag {r['busy_lag']['p95']:.1f} s with 4 busy readers")
    phoenix = r.get("phoenix")
    if phoenix is not None:
        ours = max(one["e2e_spans_per_s"], four["e2e_spans_per_s"])
        if ours < 100 * phoenix["spans_per_s"]:
            missed.append(f"{ours / phoenix['spans_per_s']:.0f}x Phoenix's persisted spans/s (target 100x)")
    return "**Targets not reached:** " + "; ".join(missed) + "." if missed else "**All targets met.**"


def _markdown(args, r: dict) -> str:
    target = 30_000
    stages = r["stages"]
    lines = [
        "## ingest",
        "",
        f"`python -m benchmarks.ingest --bodies {args.bodies}"
        f"{' --without-cost' if args.without_cost else ''}` on {machine()}, shared with other "
        f"work: load average (1/5/15 min) {r['load_before']} before, {r['load_after']} after.",
        f"OTLP protobuf bodies of {SPANS_PER_BODY:,} guard-shaped GenAI spans "
        f"({CALLS_PER_RUN} chat spans + 1 run span with 2 events per run; "
        f"{r['body_kib']:.0f} KiB each), {args.bodies * SPANS_PER_BODY:,} spans per "
        "measurement, fresh DuckDB file, collector as a subprocess.",
        "",
        "**Durable** = acknowledged: the collector answers 200 only after the request's rows are "
        "appended to its write-ahead journal (`<db>.journal/`) and fsynced (one fsync per group "
        "of concurrent requests). Every body over 64 KiB is decoded and mapped in the "
        "collector's two decode worker processes (one that finds both idle in both at once, "
        "each the traces of its shard), smaller ones on its event loop. A loader thread (CPU "
        "priority nice +10, one DuckDB thread) commits journaled "
        "rows in groups every 0.25 s on the collector's one long-lived connection (checkpoints "
        "by timer or WAL size, not per commit); "
        "**end-to-end** runs until every span is queryable in DuckDB.",
        "",
        *_table_lines(args, r, target),
        *_lag_lines(args, r),
        "",
        "Where the request path's time goes per 1,000-span body (same bodies, in-process, mean "
        "ms; the HTTP server, the loader and the client share the same 2 cores):",
        "",
        "| stage | ms |",
        "|---|---|",
        *[f"| {name} | {value:.1f} |" for name, value in stages.items()],
        f"| sum | {sum(stages.values()):.1f} "
        f"(≈ {1000 * SPANS_PER_BODY / sum(stages.values()):,.0f} spans/s) |",
        f"| map + rows to Arrow, the longer of 2 shards (both at once, one per worker) | "
        f"{r['shard_map_ms']:.1f} |",
        "",
        "The commit cost does not grow with the store: a load inserts its calls with a plain "
        "`INSERT ... RETURNING` (the `ON CONFLICT DO NOTHING` insert only when a call id is stored "
        "already: a resend) and merges only the new rows into the per-run "
        "state `run_totals`, then upserts the touched `runs` rows; no statement scans "
        "`model_calls`.",
        "",
        _verdict(r, target),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=40, help="bodies of 1,000 spans per run")
    parser.add_argument(
        "--big-calls", type=int, default=1_000_000, help="model calls in the store of the commit-cost check"
    )
    parser.add_argument(
        "--lag-seconds", type=float, default=20.0, help="seconds of offered load per lag measurement"
    )
    parser.add_argument(
        "--phoenix-python",
        default=None,
        help="interpreter of a venv with arize-phoenix (default $BUDGETLENS_BENCH_PHOENIX_PYTHON; "
        "without one the Phoenix column is skipped)",
    )
    parser.add_argument(
        "--without-cost",
        action="store_true",
        help="call spans without budgetlens.cost_usd (the collector prices them; the issue's "
        "'spans without a stated cost')",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    publish("ingest", _markdown(args, _measure(args)), write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
