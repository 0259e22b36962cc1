"""Import throughput: a generated ~100 MB Claude Code JSONL -> a fresh DuckDB store.

Generates (seeded, synthetic text, no personal data) a Claude Code transcript file holding many
sessions, shaped like the real ones in ../shared/realdata/claude-code-jsonl: every API response
written as one line per content block (thinking / text / tool_use) repeating the message id and
usage, tool results as user lines, ``progress`` lines in between. Then it runs the real import
(``budgetlens.importers.import_paths``: parse, dedupe, normalize, price, write in batches) and
reports MB/s and runs/s. Target (issue 5): >= 20 MB/s.

Usage: ``python -m benchmarks.import_throughput [--size-mb 100] [--keep]``; writes the section
"import" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks._report import machine, write_section

TARGET_MB_S = 20.0
MODELS = ("claude-opus-4-6", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001")
WORDS = (
    "budget",
    "token",
    "agent",
    "run",
    "limit",
    "preset",
    "cache",
    "tool",
    "model",
    "call",
    "store",
    "baseline",
    "usage",
    "trace",
    "span",
    "import",
    "session",
    "query",
)


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _base(session: str, cwd: str, ts: float, line_type: str) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"
    return {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session,
        "version": "2.1.39",
        "gitBranch": "main",
        "type": line_type,
        "uuid": str(uuid.UUID(int=random.getrandbits(128))),
        "timestamp": stamp,
    }


def _session_lines(rng: random.Random, session: str, start: float, n_calls: int):
    cwd = "/home/USER/projects/bench"
    ts = start
    first = _base(session, cwd, ts, "user")
    first["message"] = {"role": "user", "content": _text(rng, 60)}
    yield first
    cache_read = 0
    for _call in range(n_calls):
        model = rng.choice(MODELS)
        message_id = f"msg_{rng.getrandbits(96):024x}"
        request_id = f"req_{rng.getrandbits(96):024x}"
        blocks = ["thinking", "text"] + ["tool_use"] * rng.randint(0, 3)
        created = rng.randint(100, 4000)
        usage = {
            "input_tokens": rng.randint(1, 20),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": cache_read,
            "cache_creation": {"ephemeral_5m_input_tokens": created, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 1,
            "service_tier": "standard",
            "inference_geo": "not_available",
        }
        cache_read += created
        final_output = rng.randint(20, 2000)
        for index, block in enumerate(blocks):
            ts += rng.uniform(0.2, 3.0)
            line = _base(session, cwd, ts, "assistant")
            line["requestId"] = request_id
            content = {"type": block}
            if block == "thinking":
                content["thinking"], content["signature"] = _text(rng, 80), "sig" * 40
            elif block == "text":
                content["text"] = _text(rng, 50)
            else:
                content.update(
                    id=f"toolu_{rng.getrandbits(96):024x}", name="Bash", input={"command": _text(rng, 8)}
                )
            last = index == len(blocks) - 1
            line["message"] = {
                "model": model,
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "content": [content],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": final_output if last else rng.randint(1, 13)},
            }
            yield line
            if block == "tool_use":
                result = _base(session, cwd, ts + 0.5, "user")
                result["message"] = {
                    "role": "user",
                    "content": [
                        {"tool_use_id": content["id"], "type": "tool_result", "content": _text(rng, 300)}
                    ],
                }
                yield result
                progress = _base(session, cwd, ts + 0.6, "progress")
                progress["data"] = {
                    "type": "hook_progress",
                    "hookEvent": "PostToolUse",
                    "command": "hooks/post.sh",
                }
                yield progress


def generate(path: Path, size_mb: float, seed: int = 5) -> int:
    """Write a Claude Code JSONL of about ``size_mb`` MB to ``path``; return the sessions written."""
    rng = random.Random(seed)
    random.seed(seed)
    target = int(size_mb * 1_000_000)
    written = sessions = 0
    start = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            session = str(uuid.UUID(int=rng.getrandbits(128)))
            for line in _session_lines(rng, session, start + sessions * 3600, rng.randint(10, 120)):
                text = json.dumps(line, separators=(",", ":")) + "\n"
                handle.write(text)
                written += len(text)
            sessions += 1
    return sessions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--keep", action="store_true", help="keep the generated file and store")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from budgetlens.importers import ImportReport, import_paths, read_rows

    workdir = Path(tempfile.mkdtemp(prefix="budgetlens-import-bench-"))
    source = workdir / "bench-project" / "sessions.jsonl"
    source.parent.mkdir()
    t0 = time.perf_counter()
    sessions = generate(source, args.size_mb)
    generate_s = time.perf_counter() - t0
    size_mb = source.stat().st_size / 1_000_000

    t0 = time.perf_counter()
    parse_report = ImportReport()
    parsed_calls = sum(
        1 for kind, _ in read_rows("claude-code", [source], report=parse_report) if kind == "call"
    )
    parse_s = time.perf_counter() - t0

    db = workdir / "bench.duckdb"
    t0 = time.perf_counter()
    report = import_paths("claude-code", [source], db)
    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = import_paths("claude-code", [source], db)
    reimport_s = time.perf_counter() - t0

    mb_s = size_mb / import_s
    verdict = "meets" if mb_s >= TARGET_MB_S else "MISSES"
    lines = [
        "## Import throughput (issue 5)",
        "",
        f"Machine: {machine()}. `python -m benchmarks.import_throughput --size-mb {args.size_mb:g}`.",
        f"Input: one generated Claude Code JSONL of {size_mb:.1f} MB, {sessions:,} sessions "
        f"(runs), {report.calls:,} API responses written as one line per content block "
        f"({parse_report.skipped.total():,} repeated lines deduplicated), tool results and "
        "progress lines in between (generated in "
        f"{generate_s:.1f} s).",
        "",
        "| step | seconds | MB/s | runs/s |",
        "|---|---:|---:|---:|",
        f"| parse + dedupe + normalize + price (no store) | {parse_s:.2f} | "
        f"{size_mb / parse_s:.1f} | {sessions / parse_s:.0f} |",
        f"| full import into a fresh DuckDB store | {import_s:.2f} | {mb_s:.1f} | "
        f"{report.runs / import_s:.0f} |",
        f"| second import of the same file (adds {again.new_calls} calls, {again.new_runs} runs) "
        f"| {reimport_s:.2f} | {size_mb / reimport_s:.1f} | {again.runs / reimport_s:.0f} |",
        "",
        f"Target >= {TARGET_MB_S:g} MB/s: **{verdict}** ({mb_s:.1f} MB/s). Calls parsed: "
        f"{parsed_calls:,}; inserted: {report.new_calls:,}.",
    ]
    write_section("import", "\n".join(lines))
    print("\n".join(lines))
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"kept {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
