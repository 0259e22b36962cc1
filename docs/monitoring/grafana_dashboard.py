"""Build the budgetlens Grafana dashboard (``docs/monitoring/budgetlens-grafana.json``) with
grafana-foundation-sdk (``pip install 'budgetlens[grafana]'``).

Every panel queries the collector's Prometheus metrics (docs/metrics-and-alerts.md); the hit rate
is the dashboard's (budget stops / finished runs that ran under a budget). Regenerate with
``python docs/monitoring/grafana_dashboard.py`` (tests/test_grafana_dashboard.py checks the committed
file is what this builds, and runs every panel's query against a real Prometheus).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The committed dashboard file.
OUTPUT = Path(__file__).with_name("budgetlens-grafana.json")
#: The Prometheus data source: a dashboard variable, so the file imports into any Grafana.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

#: (title, unit, [(PromQL, legend)]): the panels, in order. Windows are literal so the same
#: queries run unchanged in Prometheus (the tests) and in Grafana.
PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Budget hit rate by task type (1 h; alarm above 20 % with at least 20 budgeted runs)",
        "percentunit",
        (
            (
                "sum by (task_type) (increase(budgetlens_budget_hits_total[1h]))"
                " / sum by (task_type) (increase(budgetlens_budgeted_runs_total[1h]))",
                "{{task_type}}",
            ),
        ),
    ),
    (
        "Budgeted finished runs by task type (1 h; under 20 = low sample, no alarm)",
        "short",
        (("sum by (task_type) (increase(budgetlens_budgeted_runs_total[1h]))", "{{task_type}}"),),
    ),
    (
        "Budget hit rate by service (1 h)",
        "percentunit",
        (
            (
                'sum by (service) (increase(budgetlens_budgeted_runs_total{stop_reason=~"budget_.*"}[1h]))'
                " / sum by (service) (increase(budgetlens_budgeted_runs_total[1h]))",
                "{{service}}",
            ),
        ),
    ),
    (
        "Finished runs by stop reason (per hour)",
        "short",
        (("sum by (stop_reason) (increase(budgetlens_runs_total[1h]))", "{{stop_reason}}"),),
    ),
    (
        "Spend by model (USD per hour)",
        "currencyUSD",
        (("sum by (model) (increase(budgetlens_cost_usd_total[1h]))", "{{model}}"),),
    ),
    (
        "Tokens by type (per hour)",
        "short",
        (("sum by (token_type) (increase(budgetlens_tokens_total[1h]))", "{{token_type}}"),),
    ),
    (
        "P95 tokens per run by task type (1 h; histogram estimate within one bucket, not the Baselines P95)",
        "short",
        (
            (
                "histogram_quantile(0.95, sum by (task_type, le) (increase(budgetlens_run_tokens_bucket[1h])))",
                "{{task_type}}",
            ),
        ),
    ),
    (
        "Collector backlog",
        "short",
        (
            ("sum by (instance) (budgetlens_ingest_queue_spans)", "spans waiting {{instance}}"),
            ("max by (instance) (budgetlens_ingest_loader_lag_seconds)", "lag (s) {{instance}}"),
        ),
    ),
    (
        "Store and journal errors (per hour)",
        "short",
        (
            (
                "sum by (instance) (increase(budgetlens_commit_failures_total[1h]))",
                "loads failed {{instance}}",
            ),
            (
                "sum by (instance) (increase(budgetlens_journal_failures_total[1h]))",
                "journal 503 {{instance}}",
            ),
        ),
    ),
)


def panel_queries(document: dict) -> list[str]:
    """Every PromQL expression of a dashboard JSON ``document`` (its panels' targets), in order."""
    return [target["expr"] for panel in document.get("panels", []) for target in panel.get("targets", [])]


def build() -> dict:
    """The dashboard as a JSON-ready dict (Grafana's dashboard model). Raises ImportError
    without grafana-foundation-sdk (the ``grafana`` extra)."""
    from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.builders.timeseries import Panel
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    source = DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])
    board = (
        Dashboard("budgetlens")
        .uid("budgetlens")
        .tags(["budgetlens", "llm", "budgets"])
        .refresh("1m")
        .time("now-24h", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for title, unit, queries in PANELS:
        panel = Panel().title(title).unit(unit).datasource(source).height(8).span(12)
        for ref, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
            panel = panel.with_target(
                Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(source)
            )
        board = board.with_panel(panel)
    return json.loads(JSONEncoder(sort_keys=True, indent=2).encode(board.build()))


def render() -> str:
    """The dashboard JSON text as committed (sorted keys, 2-space indent, final newline)."""
    return json.dumps(build(), sort_keys=True, indent=2) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}", file=sys.stderr)
