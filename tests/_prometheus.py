"""A real Prometheus server for the scrape tests: it scrapes one collector every second and
evaluates the alert rules it is given."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import requests
from conftest import find_free_port


def prometheus_config(directory: Path, collector_url: str, rules: str) -> Path:
    """Write ``prometheus.yml`` in ``directory``: scrape and evaluate every second, the target
    ``collector_url`` (``http://host:port``), the rule file ``alerts.yml`` holding ``rules``."""
    (directory / "alerts.yml").write_text(rules)
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files:\n  - alerts.yml\n"
        f"scrape_configs:\n  - job_name: budgetlens\n    static_configs:\n"
        f"      - targets: ['{collector_url.removeprefix('http://')}']\n"
    )
    return config


@contextlib.contextmanager
def prometheus_server(prometheus: str, config: Path) -> Iterator[str]:
    """The ``prometheus`` executable on a free port of 127.0.0.1 with ``config`` (its TSDB beside
    it); yields its base URL, stops it on exit."""
    port = find_free_port()
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={config.parent / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def query(base: str, promql: str) -> list:
    """The result list of an instant PromQL query against the server at ``base``."""
    response = requests.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    return response.json()["data"]["result"]
