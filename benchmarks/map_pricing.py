"""Mapping one 1,000-span OTLP body whose call spans carry no cost: batch pricing vs per span.

Times, in the same run (median of ``--repeats``): mapping without pricing (the floor), mapping
with the batch pricing the collector does (``price_calls``: each price resolved once, rates x
counts), and the floor plus genai-prices' ``calc_price`` called once per call span (what the
mapping cost when it priced span by span). Prints ms per body and the ratios; figures are for a
quiet machine only (style.md: measure alone).

Run: ``python benchmarks/map_pricing.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.otlp_bodies import make_body
from budgetlens.otlp.mapping import map_request
from budgetlens.price_file import genai_usage
from budgetlens.price_names import genai_model
from budgetlens.pricing import usage_from_details


def _median_ms(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def measure(repeats: int) -> dict[str, float]:
    """ms per body: ``floor_ms`` (no pricing), ``batch_ms``, ``per_span_ms``, and ratios."""
    request = ExportTraceServiceRequest.FromString(make_body(1, stated_cost=False))
    rows = map_request(request, price=False).call_rows
    usages = [(row["response_model"], row["provider_name"], usage_from_details(row)) for row in rows]
    map_request(request)  # warm genai-prices and the resolved prices

    def per_span() -> None:
        map_request(request, price=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for model, provider, usage in usages:
                found = genai_model(model, provider)
                if found is not None and usage is not None:
                    found[1].calc_price(
                        genai_usage(usage), found[0], genai_request_timestamp=dt.datetime.now(dt.UTC)
                    )

    figures = {
        "calls": float(len(rows)),
        "floor_ms": _median_ms(lambda: map_request(request, price=False), repeats),
        "batch_ms": _median_ms(lambda: map_request(request), repeats),
        "per_span_ms": _median_ms(per_span, repeats),
    }
    figures["batch_over_floor"] = figures["batch_ms"] / figures["floor_ms"]
    figures["per_span_over_batch"] = figures["per_span_ms"] / figures["batch_ms"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed mappings per configuration")
    args = parser.parse_args(argv)
    f = measure(args.repeats)
    print(f"1,000-span body, {f['calls']:.0f} call spans without a cost, median of {args.repeats}:")
    print(f"  map, no pricing (floor):          {f['floor_ms']:8.1f} ms")
    print(
        f"  map + batch pricing (now):        {f['batch_ms']:8.1f} ms  ({f['batch_over_floor']:.2f}x floor)"
    )
    print(
        f"  map + calc_price per span (before): {f['per_span_ms']:6.1f} ms  ({f['per_span_over_batch']:.2f}x now)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
