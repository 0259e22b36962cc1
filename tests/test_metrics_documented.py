"""Every Prometheus metric the collector exposes is listed in the README."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from budgetlens.ingest.metrics import CollectorMetrics

_ROOT = Path(__file__).resolve().parent.parent
#: The README first, then every page of docs/ (the reference lives there, linked from the README).
README = "\n".join(p.read_text() for p in [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))])


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
