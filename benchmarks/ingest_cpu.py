"""Where the collector's CPU goes per 1,000-span body, in CPU time (robust to a shared machine).

Wall-clock rates on a machine other work shares say more about the other work than about ours;
CPU seconds per body do not (much). Two measurements, printed (no BENCHMARKS.md section):

- ``threads``: a collector subprocess on a fresh store gets ``--bodies`` bodies from one client
  (as ``benchmarks.ingest``); for each of its threads and worker processes, CPU ms per body
  while the bodies were being acknowledged, and until every span was in DuckDB. The collector's
  main thread runs the event loop; its other busy thread is the loader; the decode workers are
  its child processes.
- ``commit``: CPU ms of each statement of ``write_batch`` (the loader's commit), in this
  process on a long-lived connection, for a commit of one row of each table and for a commit of a
  whole body: what a commit costs whatever its size (the statements' fixed cost) beside what
  its rows cost.

Usage: ``python -m benchmarks.ingest_cpu [--bodies 12] [--without-cost]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

import requests

from benchmarks.ingest_lag import start_collector
from benchmarks.otlp_bodies import make_body
from benchmarks.phoenix import post_bodies

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _cpu_by_thread(pid: int) -> dict[tuple[int, int], float]:
    """CPU seconds (user + system) of each thread of ``pid`` and of its child processes."""
    out: dict[tuple[int, int], float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[(pid, int(tid))] = (int(fields[11]) + int(fields[12])) * _TICK_S
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for child in children:
        out.update(_cpu_by_thread(int(child)))
    return out


def _backlog(url: str) -> int:
    return requests.get(f"{url}/healthz").json()["backlog_spans"]


def threads_ms(bodies: list[bytes], warm: bytes) -> list[tuple[str, float, float]]:
    """(thread, CPU ms per body until acknowledged, until loaded) of a collector subprocess,
    busiest first, after one ``warm`` body (shaped as ``bodies``: a priced one loads the
    workers' price data); threads under 0.5 ms per body are left out."""
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_collector(Path(tmp) / "cpu.duckdb")
        try:
            requests.post(f"{url}/v1/traces", data=warm, headers=_PROTOBUF).raise_for_status()
            while _backlog(url):
                time.sleep(0.01)
            before = _cpu_by_thread(process.pid)
            failures = post_bodies(url, bodies, 1)
            acknowledged = _cpu_by_thread(process.pid)
            while _backlog(url):
                time.sleep(0.05)
            loaded = _cpu_by_thread(process.pid)
        finally:
            process.terminate()
            process.wait(60)
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {sorted(set(failures))}")
    rows = []
    for (pid, tid), total in loaded.items():
        start = before.get((pid, tid), 0.0)
        until_loaded = 1000 * (total - start) / len(bodies)
        if until_loaded < 0.5:
            continue
        if pid == process.pid:
            name = "collector event loop" if tid == pid else f"collector thread {tid}"
        else:
            name = f"decode worker {pid}" if tid == pid else f"decode worker {pid} thread {tid}"
        until_acknowledged = 1000 * (acknowledged.get((pid, tid), start) - start) / len(bodies)
        rows.append((name, until_acknowledged, until_loaded))
    return sorted(rows, key=lambda row: -row[2])


def commit_ms(bodies: list[bytes]) -> dict[str, dict[str, float]]:
    """CPU ms per commit of each statement of ``write_batch``, for commits of one row of each
    table and for commits of a whole body (``{"1 row": {...}, "1 body": {...}}``)."""
    from benchmarks.ingest import _mapped_tables
    from budgetlens.store import write_batch, writer
    from budgetlens.store.host import StoreHost

    tables = [_mapped_tables(body) for body in bodies]
    stats: collections.Counter[str] = collections.Counter()
    returned = writer._returned

    def timed(conn, statement: str):
        started = time.process_time()
        try:
            return returned(conn, statement)
        finally:
            stats[" ".join(statement.split())[:48]] += time.process_time() - started

    writer._returned = timed
    results: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            host = StoreHost(Path(tmp) / "commit.duckdb")
            try:
                with host.write() as conn:
                    write_batch(conn, *tables[0])  # create, migrate, warm
                half = (len(tables) - 1) // 2
                for label, chosen, rows in (
                    ("1 row", tables[1 : 1 + half], 1),
                    ("1 body", tables[1 + half :], None),
                ):
                    stats.clear()
                    started = time.process_time()
                    for batch in chosen:
                        with host.write() as conn:
                            write_batch(conn, *(t if rows is None else t.slice(0, rows) for t in batch))
                    total = time.process_time() - started
                    result = {name: 1000 * value / len(chosen) for name, value in stats.most_common()}
                    result["other (aggregates, run_model_rollup, commit, Python)"] = (
                        1000 * (total - sum(stats.values())) / len(chosen)
                    )
                    result["total"] = 1000 * total / len(chosen)
                    results[label] = result
            finally:
                host.close()
    finally:
        writer._returned = returned
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=12, help="bodies of 1,000 spans")
    parser.add_argument("--without-cost", action="store_true", help="call spans without budgetlens.cost_usd")
    args = parser.parse_args(argv)
    bodies = [make_body(seed, stated_cost=not args.without_cost) for seed in range(args.bodies)]
    load = " / ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average {load}; CPU ms per 1,000-span body")
    print("thread | until acknowledged | until loaded")
    warm = make_body(10**6, stated_cost=not args.without_cost)
    for name, acknowledged, loaded in threads_ms(bodies, warm):
        print(f"{name} | {acknowledged:.1f} | {loaded:.1f}")
    for label, result in commit_ms(bodies).items():
        print(f"\ncommit of {label} (CPU ms per commit)")
        for name, value in result.items():
            print(f"{value:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
