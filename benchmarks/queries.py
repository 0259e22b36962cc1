"""Benchmark: the analysis queries of each dashboard page on 10k, 100k and 1M generated runs.

Stores are generated in bulk SQL (about 10 model calls per run, the ``runs`` rollup inserted
directly, a few budget events) and cached under ``$BUDGETLENS_BENCH_DIR`` (default
``/tmp/budgetlens_bench``), so a rerun only times. Each page's time is what the dashboard does
on a cold cache: open the store read-only once (``read_connection``; the dashboard's one reader
per render), run every analysis call of the page, close; beside it the same calls each on its
own connection (the reference); the figures are medians of ``--repeat`` interleaved rounds.
Filters: the whole extent of the data, time zone Europe/Berlin (day buckets converted); the
Overview reads the previous period by the dashboard's own rule (``page_calls``), so not here.

Usage: ``python -m benchmarks.queries [--sizes 10000 100000 1000000] [--repeat 5]``; writes the
"queries" section of BENCHMARKS.md. Target (issue 25): every dashboard page at 1M runs in at most
0.5 s and at most 8x one bare scan of its rows (the What-if page: ``benchmarks.whatif``, 2 s), and
the 1M/100k ratio no more than about 10 (cost growing no faster than linearly).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import statistics
import time
from pathlib import Path

from benchmarks._report import machine, publish
from budgetlens.analysis import censoring, cost_totals, drift, runaways, spenders, whatif
from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_BENCH_DIR, resolve
from budgetlens.store import read_connection, rollups, write_connection

log = logging.getLogger(__name__)

BENCH_DIR = Path(resolve(None, ENV_BENCH_DIR, "/tmp/budgetlens_bench"))
SIZES = (10_000, 100_000, 1_000_000)
TARGET_S = 0.5
#: At most this many times one bare scan of the same rows, measured in the same run.
TARGET_X_BARE = 8.0
#: The row of the bare scan in the figures (not a page).
BARE = "bare DuckDB scan"

#: Bulk generation (parameters: $n runs). Sizes and mixes echo the sample generator.
_GEN_RUNS = """
INSERT INTO runs BY NAME
WITH base AS (
    SELECT i, random() AS u1, random() AS u2, random() AS u3, random() AS u4,
           (i * 7919) % 100 AS pick
    FROM range($n) t(i)
), typed AS (
    SELECT *, CASE WHEN pick < 34 THEN 0 WHEN pick < 59 THEN 1 WHEN pick < 74 THEN 2
                   WHEN pick < 90 THEN 3 ELSE 4 END AS k
    FROM base
)
SELECT
    'bench-' || i AS run_id,
    md5_number_upper(run_id) AS run_key,
    'bench' AS source,
    ['support-bot', 'ops-agent', 'analyst', 'coder', 'research-assistant'][k + 1] AS service_name,
    ['simple_qa', 'tool_use', 'complex_reasoning', 'code_generation', 'research'][k + 1]
        AS task_type,
    CASE WHEN u4 < 0.1
         THEN ['claude-haiku-4-5,claude-sonnet-4-5', 'gpt-4.1,gpt-4.1-mini'][1 + (i % 2)]
         ELSE ['gpt-4.1-mini', 'gemini-2.5-flash', 'o4-mini', 'claude-sonnet-4-5',
               'gemini-2.5-flash', 'llama-3.1-8b-instruct', 'gpt-4.1'][1 + (i % 7)] END AS models,
    TIMESTAMP '2026-11-28' - to_microseconds(CAST(u1 * 14 * 86400e6 AS BIGINT)) AS start_utc,
    CAST(2 + floor(u2 * 17) AS INTEGER) AS model_calls,
    CAST(2 + floor(u2 * 17) AS INTEGER) AS turns,
    CAST(floor(u3 * 30) AS INTEGER) AS tool_calls,
    CAST([3000, 7000, 25000, 35000, 80000][k + 1] * exp((u3 - 0.5) * 1.6)
         * CASE WHEN u1 * 1000 % 1 < 0.02 THEN 20 ELSE 1 END AS BIGINT) AS total_tokens,
    CAST(total_tokens * 0.8 AS BIGINT) AS input_tokens,
    total_tokens - input_tokens AS output_tokens,
    CAST(input_tokens * 0.4 AS BIGINT) AS cache_read_tokens,
    0 AS cache_write_tokens,
    CAST(output_tokens * 0.2 AS BIGINT) AS reasoning_tokens,
    CASE WHEN i % 7 = 5 THEN NULL ELSE total_tokens * 2.5e-6 END AS cost_usd,
    CASE WHEN i % 7 = 5 THEN model_calls ELSE 0 END AS unpriced_calls,
    CASE WHEN u4 > 0.995 THEN 1 ELSE 0 END AS unknown_usage_calls,
    CASE WHEN u4 > 0.995 THEN 'unknown' ELSE 'reported' END AS usage_status,
    CASE WHEN u2 > 0.88 THEN 'budget_tokens' WHEN u2 > 0.86 THEN 'budget_turns'
         WHEN u2 > 0.85 THEN 'failed' ELSE 'completed' END AS stop_reason,
    u1 * 300 AS duration_s,
    start_utc + to_microseconds(CAST(duration_s * 1e6 AS BIGINT)) AS end_utc,
    [7000, 12000, 48000, 60000, 105000][k + 1] AS limit_total_tokens,
    CAST(CASE WHEN u4 > 0.7 THEN 1 ELSE 0 END AS INTEGER) AS warnings,
    CAST(CASE WHEN u4 < 0.1 THEN 1 ELSE 0 END AS INTEGER) AS downgrades,
    CAST(CASE WHEN k = 4 AND u4 > 0.5 THEN 1 ELSE 0 END AS INTEGER) AS summaries,
    false AS retryable
FROM typed
"""

_GEN_CALLS = """
INSERT INTO model_calls BY NAME
SELECT
    r.run_id || '.c' || t.turn AS call_id, r.run_id || '.c' || t.turn AS span_id, r.run_id,
    r.source, r.service_name, r.task_type,
    'chat' AS operation_name,
    string_split(r.models, ',')[CASE WHEN t.turn * 2 > r.model_calls THEN -1 ELSE 1 END]
        AS request_model,
    request_model AS response_model,
    r.start_utc + to_microseconds(CAST(t.turn * 5e6 AS BIGINT)) AS start_utc,
    r.duration_s / r.model_calls AS duration_s,
    CAST(t.turn AS INTEGER) AS turn,
    r.input_tokens // r.model_calls AS input_tokens,
    r.output_tokens // r.model_calls AS output_tokens,
    r.total_tokens // r.model_calls AS total_tokens,
    (r.total_tokens // r.model_calls) * 2 AS reserved_tokens,
    (r.total_tokens // r.model_calls) * t.turn AS used_tokens,
    r.cost_usd / r.model_calls AS cost_usd,
    'reported' AS usage_status,
    md5_number_upper(r.run_id) AS run_key
FROM runs r, LATERAL (SELECT unnest(range(1, r.model_calls + 1)) AS turn) t
"""

_GEN_EVENTS = """
INSERT INTO budget_events BY NAME
SELECT run_id || '.e0' AS event_id, run_id, start_utc AS ts_utc,
       'budgetlens.warning' AS name, CAST(total_tokens * 0.8 AS BIGINT) AS used_tokens,
       80.0 AS percent, md5_number_upper(run_id) AS run_key
FROM runs WHERE warnings > 0
"""


def build_store(n_runs: int, directory: Path = BENCH_DIR) -> Path:
    """Return a store with ``n_runs`` generated runs, building it unless cached."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"runs_{n_runs}.duckdb"
    if path.exists():
        with write_connection(path) as conn:  # migrates (and back-fills) a store cached earlier
            if conn.execute("SELECT count(*) FROM runs").fetchone()[0] == n_runs:
                return path
        path.unlink()
    started = time.perf_counter()
    with write_connection(path) as conn:
        conn.execute("SELECT setseed(0.42)")
        for statement in (_GEN_RUNS, _GEN_CALLS, _GEN_EVENTS):
            params = {"n": n_runs} if "$n" in statement else {}
            conn.execute(statement, params)
        conn.execute(rollups.INSERT_ALL)  # the per run x model rollup the writer keeps
        conn.execute("CHECKPOINT")
    log.info("built %s in %.1f s", path, time.perf_counter() - started)
    return path


#: One bare DuckDB scan of the same rows: the floor a page's time is compared with (the
#: columns the pages read most, over the page's window).
_BARE_SCAN = """
SELECT count(*), sum(total_tokens), sum(cost_usd), max(turns), count(DISTINCT task_type)
FROM runs WHERE start_utc >= $start_utc AND start_utc < $end_utc
"""


def bare_scan(conn, f: analysis.Filters) -> None:
    conn.execute(_BARE_SCAN, {"start_utc": f.start_utc, "end_utc": f.end_utc}).fetchall()


#: The run rows the What-if page lists (``dashboard/app_pages/whatif.py``).
WHATIF_SHOWN_RUNS = 500


def _limits(conn, f: analysis.Filters):
    """The limits in force and their history as a page reads them (``dashboard.data``: one
    ``limit_periods`` read, both sections from it)."""
    periods = analysis.limit_periods(conn, f)
    return analysis.current_limits_of(periods), analysis.limit_history_of(periods)


def page_calls(f: analysis.Filters, run_id: str, first_utc: dt.datetime | None):
    """Each page's analysis calls, as the dashboard pages make them with their default widgets
    (``dashboard/app_pages/*.py``): {page: [callable(conn)]}. Every page also draws the sidebar
    and the header (data extent, filter options, what the window leaves out). The lists before
    issue 25's page work left out the runaways (Overview), spend by team (Cost), drift, the
    Kaplan-Meier baselines and the limit history (Baselines, Presets): those pages' earlier
    figures understated them. The Overview reads the previous period by the dashboard's own rule
    (``dashboard.app_pages._ui.previous_window`` of ``f`` and ``first_utc``, the first stored
    run's start): not for a window the data covers only in part, such as the whole extent timed
    here (before, it was always read: the page's figure overstated it by one Overview read)."""
    from budgetlens.dashboard.app_pages._ui import previous_window

    shared = [
        analysis.data_extent,
        analysis.filter_options,
        lambda c: analysis.window_coverage(c, f),
    ]
    previous = previous_window(f, first_utc)
    pages = {
        "Overview": [
            # "vs previous period", when the dashboard shows it
            *([lambda c: analysis.overview(c, previous)] if previous else []),
            lambda c: analysis.hit_rate_daily(c, f),
            lambda c: analysis.cost_by_period(c, f, "day", "task_type"),
            # the Overview's figures, then the runaways against its P95s and spend, as
            # dashboard.data.runaways takes them from the cached overview (no second read)
            lambda c: runaways.runaways(c, f, basis=runaways.basis_of(analysis.overview(c, f))),
        ],
        "Cost": [
            lambda c: cost_totals.cost_totals(c, f),  # the tiles: the spend figures alone
            lambda c: analysis.cost_by_period(c, f, "day", "model"),
            lambda c: analysis.cost_by_period(c, f, "day", "task_type"),
            lambda c: analysis.cost_per_run(c, f),
            lambda c: analysis.top_runs(c, f, 20),
            lambda c: spenders.spend_by(c, f, "team"),  # "Who spent it", grouped by team
        ],
        # the Cost page's "Show latency per model" toggle (off by default): its one extra read
        "Cost: latency per model (on demand)": [lambda c: analysis.model_latency(c, f)],
        "Hit rate": [
            lambda c: analysis.overview(c, f),
            lambda c: analysis.hit_rate_daily(c, f),
            lambda c: analysis.stop_reasons(c, f),
        ],
        "Baselines": [
            # baselines + the KM table + the distribution of total tokens: one read
            lambda c: censoring.baselines_evidence(c, f),
            lambda c: drift.drift(c, f),
            lambda c: _limits(c, f),  # the limits in force and their history: one read
            lambda c: analysis.token_part_baselines(c, f),
        ],
        "Presets": [
            lambda c: whatif.evidence_presets(
                whatif.Evidence(*censoring.baselines_evidence(c, f)[:2]), analysis.DEFAULT_MULTIPLIER
            ),  # dashboard.data.evidence: the baselines and the KM table from one read
            lambda c: _limits(c, f),
            analysis.data_extent,
            lambda c: drift.drift(c, f),
        ],
        "Runs": [lambda c: analysis.runs_table(c, f, limit=500), lambda c: analysis.run_detail(c, run_id)],
        # the fast path (per-run peaks); its full-replay reference: benchmarks.whatif
        "What-if": [
            analysis.data_extent,
            lambda c: whatif.plan_for_target(c, f, run_limit=WHATIF_SHOWN_RUNS),
        ],
    }
    # an on-demand read is timed alone: what the toggle adds to its page
    return {page: calls if page.endswith("(on demand)") else shared + calls for page, calls in pages.items()}


#: Suffix of the figure that opens a reader per call (the dashboard before issue 25), timed
#: beside the page's one reader per render in the same rounds.
PER_CALL = " [reader per call]"


def time_pages(path: Path, repeat: int, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Median seconds per page: all its calls on one read-only connection, as a dashboard render
    reads (``dashboard.data``: one reader per render); beside it, ``page + PER_CALL``, each call
    on its own connection (the reference), interleaved round by round. ``only``: these pages
    (and the bare scan) alone, every page when empty."""
    with read_connection(path) as conn:
        first, last, _ = analysis.data_extent(conn)
        run_id = analysis.top_runs(conn, analysis.Filters(), 1)["run_id"].iloc[0]
    end = last + dt.timedelta(microseconds=1)  # the newest run included
    f = analysis.Filters(start_utc=first, end_utc=end, tz="Europe/Berlin")
    results = {}
    pages = {p: c for p, c in page_calls(f, run_id, first).items() if not only or p in only}
    pages[BARE] = [lambda c: bare_scan(c, f)]
    for page, calls in pages.items():
        shared, per_call = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            with read_connection(path) as conn:
                for call in calls:
                    call(conn)
            shared.append(time.perf_counter() - started)
            started = time.perf_counter()
            for call in calls:
                with read_connection(path) as conn:
                    call(conn)
            per_call.append(time.perf_counter() - started)
        results[page] = statistics.median(shared)
        if page != BARE:
            results[page + PER_CALL] = statistics.median(per_call)
    return results


def report(figures: dict[int, dict[str, float]], repeat: int) -> str:
    sizes = sorted(figures)
    pages = [p for p in next(iter(figures.values())) if p != BARE and not p.endswith(PER_CALL)]
    head = "| page | " + " | ".join(f"{n:,} runs" for n in sizes) + " |"
    lines = [
        "## Analysis queries per dashboard page",
        "",
        f"`python -m benchmarks.queries` on {machine()}. Seconds per page on a cold cache "
        f"(every analysis call the page makes, on one read-only connection as a dashboard render "
        f"reads; in brackets each call on its own connection, timed in the same rounds), median of "
        f"{repeat} rounds; generated stores with about 10 model calls per run; filters: the "
        "whole extent, time zone Europe/Berlin; every page includes the sidebar and header "
        "reads (data extent, filter options, window coverage). The last column is the page's "
        f"time over one bare DuckDB scan of the same rows at {sizes[-1]:,} runs, measured in "
        "the same run.",
        "",
        head + (" 1M/100k |" if {100_000, 1_000_000} <= set(sizes) else "") + " x bare scan |",
        "|---" * (len(sizes) + 2 + ({100_000, 1_000_000} <= set(sizes))) + "|",
    ]
    largest = sizes[-1]
    for page in [*pages, BARE]:
        cells = [
            f"{figures[n][page]:.3f}" + (f" ({figures[n][page + PER_CALL]:.3f})" if page != BARE else "")
            for n in sizes
        ]
        row = f"| {page} | " + " | ".join(cells) + " |"
        if {100_000, 1_000_000} <= set(sizes):
            row += f" {figures[1_000_000][page] / figures[100_000][page]:.1f}x |"
        row += f" {figures[largest][page] / figures[largest][BARE]:.0f}x |"
        lines.append(row)
    dashboard = [p for p in pages if p != "What-if"]  # its target: benchmarks.whatif (2 s)
    worst = max(figures[largest][p] for p in dashboard)
    worst_x = max(figures[largest][p] / figures[largest][BARE] for p in dashboard)
    verdict = "met" if worst <= TARGET_S and worst_x <= TARGET_X_BARE else "NOT met"
    lines += [
        "",
        f"Target: every page but What-if at {largest:,} runs in at most {TARGET_S} s and "
        f"{TARGET_X_BARE:.0f}x the bare scan: **{verdict}** (slowest page {worst:.3f} s, "
        f"largest ratio {worst_x:.0f}x).",
    ]
    if {100_000, 1_000_000} <= set(sizes):
        ratio = max(figures[1_000_000][p] / figures[100_000][p] for p in pages)
        lines.append(
            f"Growth 100k -> 1M: at most {ratio:.1f}x for 10x the runs "
            f"({'no faster than linear' if ratio <= 10.5 else 'FASTER than linear'})."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit BENCHMARKS.md")
    parser.add_argument("--pages", nargs="+", default=[], help="time these pages only (implies --no-write)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    figures = {}
    for n in args.sizes:
        from benchmarks.whatif import with_run_totals  # (benchmarks.whatif imports this module)

        path = with_run_totals(build_store(n))  # the what-if reads the writer's run_totals
        figures[n] = time_pages(path, args.repeat, tuple(args.pages))
        log.info("%s runs: %s", f"{n:,}", {k: round(v, 3) for k, v in figures[n].items()})
    text = report(figures, args.repeat)
    publish("queries", text, write=not (args.no_write or args.pages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
