"""Every Prometheus metric the collector exposes is listed in the README."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from budgetlens.ingest.metrics import CollectorMetrics

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_collector_metric_is_in_the_readme():
    registry = CollectorRegistry()
    CollectorMetrics(registry)
    names = set()
    for family in registry.collect():
        name = family.name
        if family.type == "counter":
            name += "_total"
        names.add(name)
    assert names, "the collector registered no metrics"
    missing = sorted(name for name in names if f"`{name}`" not in README)
    assert not missing, f"README does not list: {missing}"
