"""Prometheus metrics of the collector (prometheus-client), on an injected registry.

Budget metrics move only after a batch is committed (``CollectorMetrics.observe_commit`` is called
with the rows the commit actually inserted), so a retried span is never counted twice and a
rejected or failed batch is never counted; ``observe_write`` does the same from the pyarrow tables
``budgetlens.store.write_batch`` returns, aggregated per label set, without a loop per row).
Ingest-health metrics (spans received/rejected, journal fsync and load latency, backlog of rows
journaled but not yet loaded, loader lag) describe the collector itself.

Labels are bounded: ``task_type``, ``model``, ``stop_reason``, ``usage_status``, on the run
metrics ``team`` (= tenant) and ``service``, and fixed enums (``token_type``, ``kind``). A user
is never a label (unbounded); ask the store (``budgetlens spend --by user``). Values from the wire
are cleaned by ``LabelCap`` (empty → ``unknown``, over 100 characters → ``other``), and each
budget family keeps at most ``max_series`` label combinations
(``budgetlens.ingest.series.SeriesCap``: quiet combinations give their place to new ones, the
rest fold into ``other`` meanwhile). A run id is never a label. Counters are process-local: a restart starts them at 0 again (Prometheus ``rate`` and
``increase`` treat that as a counter reset).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from budgetlens import semconv as sc
from budgetlens.ingest.series import DEFAULT_MAX_SERIES, DEFAULT_QUIET_S, CappedFamily, SeriesCap
from budgetlens.store.schema import LIMIT_COLUMNS
from budgetlens.store.sql import METRIC_RUN_COLUMNS
from budgetlens.unsafe_text import UNSAFE_CHARS

#: Run-token buckets: 1-2-5 per decade from 100 to 50 M (18 buckets plus +Inf), so a PromQL
#: ``histogram_quantile`` lands within one bucket (at most x2.5) of the exact percentile; the
#: GenAI semconv's powers of 4 put a run's P95 anywhere within x4.
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(2, 8) for m in (1, 2, 5))
#: Commit latency buckets in seconds.
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Longest label value kept (characters); a longer one is counted under ``other``.
MAX_LABEL_CHARS = 100
OTHER = "other"
UNKNOWN = "unknown"
#: What an unsafe character of a label value becomes (U+FFFD REPLACEMENT CHARACTER).
REPLACEMENT = "\ufffd"
#: The unsafe characters but the newline (the exposition escapes that one).
_UNSAFE_IN_LABEL = re.compile(f"(?!\n)[{UNSAFE_CHARS}]")
_TOKEN_TYPES = (
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("cache_read", "cache_read_tokens"),
    ("cache_write", "cache_write_tokens"),
    ("reasoning", "reasoning_tokens"),
)
_INTERVENTIONS = {
    sc.EVENT_WARNING: "warning",
    sc.EVENT_DOWNGRADE: "downgrade",
    sc.EVENT_SUMMARIZE: "summarize",
}


class LabelCap:
    """Cleans label values from the wire, the one step every stored or untrusted string takes
    before it becomes a label: None or empty becomes ``unknown``, a value longer than
    ``MAX_LABEL_CHARS`` becomes ``other``, and in anything else each control character or bidi
    override (``budgetlens.unsafe_text``) becomes U+FFFD, except the newline, which
    prometheus-client escapes itself (``\\n``, as it does ``\\`` and ``"``). How many series
    a family holds is bounded per label combination by ``SeriesCap``, never per value (a cap
    per value was first come, first served for the life of the process). Stateless."""

    def __call__(self, label: str, value) -> str:
        if value is None or value == "":
            return UNKNOWN
        value = str(value)
        return OTHER if len(value) > MAX_LABEL_CHARS else _UNSAFE_IN_LABEL.sub(REPLACEMENT, value)


#: The families whose labels carry values from the wire (their combinations are capped).
_CAPPED_FAMILIES = (
    "runs",
    "budget_hits",
    "budgeted_runs",
    "run_tokens",
    "model_calls",
    "tokens",
    "cost",
    "unpriced",
    "unknown_usage",
    "interventions",
)


class CollectorMetrics:
    """The collector's metric families, registered on ``registry`` (a fresh one by default).

    Names (all ``budgetlens_``, units and ``_total`` as Prometheus asks):
    ``runs_total{task_type,stop_reason,team,service}``,
    ``budget_hits_total{task_type,stop_reason,team,service}``,
    ``budgeted_runs_total{task_type,stop_reason,team,service}`` (finished runs under a budget: the
    hit rate's denominator, so ``budget_hits_total / budgeted_runs_total`` is the dashboard's hit
    rate),
    ``run_tokens{task_type,team,service}`` (histogram, tokens), ``model_calls_total{task_type,model,usage_status}``,
    ``tokens_total{task_type,model,token_type}``, ``cost_usd_total{task_type,model}``,
    ``unpriced_calls_total{task_type,model}``, ``unknown_usage_calls_total{task_type,model}``,
    ``interventions_total{task_type,kind}``, ``spans_received_total``, ``spans_rejected_total``,
    ``ingest_flagged_spans_total{reason}`` (spans stored after a repair, by quality flag),
    ``commit_duration_seconds`` (histogram, one load of a group into DuckDB),
    ``commit_failures_total``, ``ingest_queue_spans`` (rows acknowledged, not yet in DuckDB),
    ``journal_fsync_duration_seconds`` (histogram), ``ingest_loader_lag_seconds``,
    ``spans_dead_lettered_total`` (rows the store refused for their data, written to the
    dead-letter file instead), ``journal_failures_total`` (requests answered 503 because the
    journal could not be written, e.g. a full disk).

    ``max_series``: label combinations per budget family (default ``DEFAULT_MAX_SERIES``);
    ``quiet_s``: how long (s) a combination must go unseen before a new one may take its place;
    ``series``: an injected ``SeriesCap`` (tests: a fake clock). Raises ValueError for
    ``max_series`` < 1 or ``quiet_s`` < 0.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_series: int = DEFAULT_MAX_SERIES,
        quiet_s: float = DEFAULT_QUIET_S,
        series: SeriesCap | None = None,
    ):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.cap = LabelCap()
        self.series = series or SeriesCap(max_series, quiet_s)
        self._register_budget_metrics(self.registry)
        for name in _CAPPED_FAMILIES:
            setattr(self, name, CappedFamily(getattr(self, name), self.series))
        self._register_ingest_metrics(self.registry)

    def _register_budget_metrics(self, r: CollectorRegistry) -> None:
        """The budget families: runs, hits, tokens, calls, cost, interventions."""
        self.runs = Counter(
            "budgetlens_runs",
            "Finished runs (run records committed).",
            ["task_type", "stop_reason", "team", "service"],
            registry=r,
        )
        self.budget_hits = Counter(
            "budgetlens_budget_hits",
            "Runs the budget stopped, by stop reason (budget_*).",
            ["task_type", "stop_reason", "team", "service"],
            registry=r,
        )
        self.budgeted_runs = Counter(
            "budgetlens_budgeted_runs",
            "Finished runs that ran under a budget (a limit was set, or a budget stopped them): "
            "the dashboard's hit-rate denominator; budget_hits_total / this = its hit rate.",
            ["task_type", "stop_reason", "team", "service"],
            registry=r,
        )
        self.run_tokens = Histogram(
            "budgetlens_run_tokens",
            "Total tokens per finished run.",
            ["task_type", "team", "service"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter(
            "budgetlens_model_calls",
            "Model calls committed.",
            ["task_type", "model", "usage_status"],
            registry=r,
        )
        self.tokens = Counter(
            "budgetlens_tokens",
            "Tokens of committed model calls by type (cache and reasoning are parts of input and output).",
            ["task_type", "model", "token_type"],
            registry=r,
        )
        self.cost = Counter(
            "budgetlens_cost_usd",
            "Cost of committed priced model calls (USD).",
            ["task_type", "model"],
            registry=r,
        )
        self.tool_cost = Counter(
            "budgetlens_tool_cost_usd",
            "Fees of paid tool calls (USD), apart from model cost (budgetlens_cost_usd_total).",
            ["task_type"],
            registry=r,
        )
        self.unpriced = Counter(
            "budgetlens_unpriced_calls",
            "Model calls with reported usage but no known price.",
            ["task_type", "model"],
            registry=r,
        )
        self.unknown_usage = Counter(
            "budgetlens_unknown_usage_calls",
            "Model calls whose usage was not reported.",
            ["task_type", "model"],
            registry=r,
        )
        self.interventions = Counter(
            "budgetlens_interventions",
            "Budget warnings, downgrades and summaries.",
            ["task_type", "kind"],
            registry=r,
        )

    def _register_ingest_metrics(self, r: CollectorRegistry) -> None:
        """The collector's own health: spans received, journal, loads, backlog, lag."""
        self.spans_received = Counter(
            "budgetlens_spans_received", "Spans received on /v1/traces (before validation).", registry=r
        )
        self.spans_rejected = Counter(
            "budgetlens_spans_rejected", "Spans rejected as invalid (partial_success).", registry=r
        )
        self.flagged_spans = Counter(
            "budgetlens_ingest_flagged_spans",
            "Spans stored after a repair (impossible time, foreign usage convention, aggregate "
            "mismatch, partial usage), by quality flag.",
            ["reason"],
            registry=r,
        )
        self.commit_duration = Histogram(
            "budgetlens_commit_duration_seconds",
            "Time to open the store, commit one group and close it.",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.commit_failures = Counter(
            "budgetlens_commit_failures",
            "Group commits that failed (clients were told to retry).",
            registry=r,
        )
        self.queue_spans = Gauge(
            "budgetlens_ingest_queue_spans",
            "Rows accepted but not yet loaded into DuckDB (the journal backlog).",
            registry=r,
        )
        self.journal_fsync_duration = Histogram(
            "budgetlens_journal_fsync_duration_seconds",
            "Time to append one group of requests to the journal and fsync it.",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.dead_lettered = Counter(
            "budgetlens_spans_dead_lettered",
            "Rows the store refused for their data (e.g. a value out of a column's range), "
            "moved to the dead-letter file <db>.journal/dead-letter.jsonl.",
            registry=r,
        )
        self.journal_failures = Counter(
            "budgetlens_journal_failures",
            "Requests answered 503 because the journal could not be written (disk full, I/O).",
            registry=r,
        )
        self.loader_lag = Gauge(
            "budgetlens_ingest_loader_lag_seconds",
            "Age of the oldest journaled batch not yet loaded into DuckDB.",
            registry=r,
        )

    def observe_received(self, spans: int, rejected: int, flagged: Mapping[str, int] | None = None) -> None:
        """Count ``spans`` received, of which ``rejected`` were invalid; ``flagged``: spans kept
        after a repair, by quality flag (``budgetlens.semconv.QUALITY_FLAGS``; other names are
        counted under ``other``)."""
        self.spans_received.inc(spans)
        if rejected:
            self.spans_rejected.inc(rejected)
        for reason, count in (flagged or {}).items():
            self.flagged_spans.labels(reason if reason in sc.QUALITY_FLAGS else "other").inc(count)

    def observe_write(self, calls, events, records, runs) -> None:
        """Update the budget metrics from what ``budgetlens.store.write_batch`` returned.

        ``calls``/``events``: pyarrow tables of the inserted rows (``WriteResult.new_calls`` /
        ``new_events``); ``records``: the inserted or changed run records; ``runs``: the upserted
        ``runs`` rows (``task_type``, ``stop_reason``, ``total_tokens``). Runs count once per
        record written; events take their run's task type from ``runs``. None means empty.
        """
        import pyarrow.compute as pc

        cap = self.cap
        if calls is not None and len(calls):
            table = pa.table(
                {
                    "task": pc.coalesce(calls["task_type"], calls["service_name"]),
                    "model": pc.coalesce(calls["response_model"], calls["request_model"]),
                    "status": calls["usage_status"],
                    **{column: calls[column] for _, column in _TOKEN_TYPES},
                    "cost_usd": calls["cost_usd"],
                }
            )
            aggregates = [(column, "sum") for _, column in _TOKEN_TYPES]
            aggregates += [("cost_usd", "sum"), ("cost_usd", "count"), ("status", "count")]
            grouped = table.group_by(["task", "model", "status"]).aggregate(aggregates)
            for group in grouped.to_pylist():
                task, model = cap("task_type", group["task"]), cap("model", group["model"])
                status, count = group["status"], group["status_count"]
                self.model_calls.labels(task, model, cap("usage_status", status)).inc(count)
                for token_type, column in _TOKEN_TYPES:
                    if group[f"{column}_sum"]:
                        self.tokens.labels(task, model, token_type).inc(group[f"{column}_sum"])
                if group["cost_usd_count"]:
                    self.cost.labels(task, model).inc(group["cost_usd_sum"])
                unpriced = count - group["cost_usd_count"]
                if status == sc.USAGE_REPORTED and unpriced:
                    self.unpriced.labels(task, model).inc(unpriced)
                if status == sc.USAGE_UNKNOWN:
                    self.unknown_usage.labels(task, model).inc(count)
        if runs is None or not len(runs):
            return
        task_by_run = dict(zip(runs["run_id"].to_pylist(), runs["task_type"].to_pylist()))
        if events is not None and len(events):
            for (run_id, name), count in _counts(events["run_id"], events["name"]).items():
                kind = _INTERVENTIONS.get(name)
                if kind:
                    self.interventions.labels(cap("task_type", task_by_run.get(run_id)), kind).inc(count)
            if "tool_cost_usd" in events.column_names:
                self._observe_tool_cost(events.select(["run_id", "tool_cost_usd"]).to_pylist(), task_by_run)
        if records is not None and len(records):
            written = set(records["run_id"].to_pylist())
            columns = [c for c in METRIC_RUN_COLUMNS if c in runs.column_names]
            rows = runs.select(columns).to_pylist()
            self.observe_commit((), (), [row for row in rows if row["run_id"] in written])

    def observe_commit(
        self,
        calls: Iterable[Mapping],
        events: Iterable[Mapping],
        runs: Iterable[Mapping],
        task_by_run: Mapping[str, str] | None = None,
    ) -> None:
        """Update the budget metrics from rows a commit inserted.

        ``calls``/``events`` are store rows; ``runs`` are rows of the ``runs`` rollup (``task_type``,
        ``stop_reason``, ``total_tokens``, ``team``, ``service_name``) for the runs whose record was inserted;
        ``task_by_run`` maps run ids to task types for events (which carry none).
        """
        cap = self.cap
        task_by_run = task_by_run or {}
        events = list(events)  # read twice: interventions, tool fees
        for row in calls:
            task = cap("task_type", row.get("task_type") or row.get("service_name"))
            model = cap("model", row.get("response_model") or row.get("request_model"))
            status = row.get("usage_status")
            self.model_calls.labels(task, model, cap("usage_status", status)).inc()
            for token_type, column in _TOKEN_TYPES:
                value = row.get(column)
                if value:
                    self.tokens.labels(task, model, token_type).inc(value)
            cost = row.get("cost_usd")
            if cost is not None:
                self.cost.labels(task, model).inc(cost)
            elif status == sc.USAGE_REPORTED:
                self.unpriced.labels(task, model).inc()
            if status == sc.USAGE_UNKNOWN:
                self.unknown_usage.labels(task, model).inc()
        for row in events:
            name, run_id = row.get("name"), row.get("run_id")
            kind = _INTERVENTIONS.get(name) if name else None
            if kind:
                task = cap("task_type", task_by_run.get(run_id) if run_id else None)
                self.interventions.labels(task, kind).inc()
        self._observe_tool_cost(events, task_by_run)
        for row in runs:
            task = cap("task_type", row.get("task_type"))
            stop = cap("stop_reason", row.get("stop_reason"))
            team, service = cap("team", row.get("team")), cap("service", row.get("service_name"))
            self.runs.labels(task, stop, team, service).inc()
            if row.get("stop_reason") in sc.BUDGET_STOP_REASONS:
                self.budget_hits.labels(task, stop, team, service).inc()
            if _budgeted_finished(row):
                self.budgeted_runs.labels(task, stop, team, service).inc()
            if row.get("total_tokens") is not None:
                self.run_tokens.labels(task, team, service).observe(row["total_tokens"])

    def _observe_tool_cost(self, events: Iterable[Mapping], task_by_run: Mapping[str, str]) -> None:
        """Add the paid tool calls' fees (``tool_cost_usd``, USD) of ``events`` by their run's task type."""
        for row in events:
            fee = row.get("tool_cost_usd")
            if fee:
                run_id = row.get("run_id")
                task = task_by_run.get(run_id) if run_id else None
                self.tool_cost.labels(self.cap("task_type", task)).inc(fee)


def _budgeted_finished(row: Mapping) -> bool:
    """The dashboard's hit-rate denominator (``budgetlens.analysis.queries.IS_BUDGETED``): a
    finished run (a stop reason) with a limit set, or one a budget stopped."""
    stop = row.get("stop_reason")
    if stop is None:
        return False
    return stop in sc.BUDGET_STOP_REASONS or any(row.get(c) is not None for c in LIMIT_COLUMNS)


def _counts(*columns) -> dict:
    counts: dict = {}
    for key in zip(*(column.to_pylist() for column in columns)):
        counts[key] = counts.get(key, 0) + 1
    return counts
