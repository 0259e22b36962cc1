"""``budgetlens import FORMAT PATH... --db PATH [--task-type T]``: agent logs -> the store."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from budgetlens.cli._common import add_command, line_limit_mib, positive_int
from budgetlens.cli._terminal import terminal_safe

if TYPE_CHECKING:
    from budgetlens.importers.report import ImportReport

#: Formats listed by ``--help`` (kept here so --help does not import the importers).
FORMAT_HELP = (
    ("otlp-json", "OTLP/JSON trace exports, one per file or one per line"),
    ("claude-code", "Claude Code sessions and subagents (~/.claude/projects/)"),
    ("codex", "Codex CLI rollouts (~/.codex/sessions/**/rollout-*.jsonl)"),
    ("swe-agent", "SWE-agent .traj and mini-swe-agent .traj.json trajectories"),
    ("openhands", "OpenHands evaluation output JSONL and runtime trajectory JSON"),
)
MAX_BAD_LINES_SHOWN = 20

DESCRIPTION = """\
Read the agent logs you already have into the store, so baselines and presets
come from real history on day one.

Files are streamed. A second import of the same files adds nothing. A line with
a malformed value (or longer than --max-line-mb) is reported as
file:line: reason and skipped. Files that hold nothing of the format are
counted, not imported. A bad BUDGETLENS_PRICES_FILE stops the import before it
starts.
"""
EPILOG = """\
A directory is searched recursively for the format's files.
Task type: --task-type, else derived (project folder, cwd, benchmark or agent).
"""


def register(subparsers) -> None:
    formats = "\n".join(f"  {name:<12} {text}" for name, text in FORMAT_HELP)
    parser = add_command(
        subparsers,
        "import",
        help="import agent logs (Claude Code, Codex, SWE-agent, OpenHands, OTLP/JSON)",
        description=DESCRIPTION,
        epilog=f"formats:\n{formats}\n\n{EPILOG}",
    )
    parser.add_argument(
        "format",
        metavar="FORMAT",
        choices=[name for name, _ in FORMAT_HELP],
        help="log format: " + ", ".join(name for name, _ in FORMAT_HELP),
    )
    parser.add_argument("paths", metavar="PATH", nargs="+", help="files or directories to import")
    parser.add_argument(
        "--task-type", default=None, help="task type for every imported run (default: derived per format)"
    )
    parser.add_argument(
        "--chunk-size", type=positive_int, default=5000, help="rows per write transaction (default 5000)"
    )
    parser.add_argument(
        "--max-line-mb",
        type=line_limit_mib,
        default=64.0,
        help="longest line (or one-document file) read, in MiB; longer ones are "
        "reported as file:line: line too long and skipped (default 64)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from budgetlens.config import resolve_db_path
    from budgetlens.importers import import_paths

    db_path = resolve_db_path(args.db)
    max_line_bytes = max(1, int(args.max_line_mb * 1024 * 1024))
    bars = []

    def progress(total_bytes: int, n_files: int):
        bar = tqdm(
            total=total_bytes,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"import {args.format} ({n_files} files)",
            file=sys.stderr,
            disable=args.no_progress or None,
            delay=0.5,
            leave=False,
        )
        bars.append(bar)
        return bar.update

    try:
        report = import_paths(
            args.format,
            args.paths,
            db_path,
            task_type=args.task_type,
            chunk_size=args.chunk_size,
            progress=progress,
            max_line_bytes=max_line_bytes,
        )
    finally:
        for bar in bars:
            bar.close()
    if not report.files:
        from budgetlens.importers import get_format

        patterns = ", ".join(get_format(args.format).patterns)
        print(
            f"found no {args.format} file under {', '.join(map(str, args.paths))} (a directory is searched "
            f"for {patterns}): nothing imported into {db_path}",
            file=sys.stderr,
        )
        return 1
    if report.runs == 0:
        print(
            f"found no {args.format} run in {report.files} file(s): nothing imported into {db_path}",
            file=sys.stderr,
        )
        if args.format == "otlp-json":
            print(
                "  a run needs spans with GenAI usage (gen_ai.usage.*, llm.token_count.*) or budgetlens "
                "attributes; see the README's 'Bring your own history'",
                file=sys.stderr,
            )
        _print_bad_lines(report)  # e.g. a document over --max-line-mb: say why nothing was read
        return 1
    read = report.files - len(report.files_without_runs)
    print(
        f"imported {read} file(s) into {db_path}: "
        f"{report.runs} runs ({report.new_runs} new), {report.calls} calls "
        f"({report.new_calls} new), {report.events} events ({report.new_events} new)"
    )
    if report.skipped:
        print(f"skipped {sum(report.skipped.values())} line(s)/item(s):")
        for reason, count in report.skipped.most_common():
            print(f"  {count:>8}  {terminal_safe(reason)}")
    if report.files_without_runs:
        print(f"{len(report.files_without_runs)} file(s) held no run of this format")
    _print_bad_lines(report)
    return 0


def _print_bad_lines(report: ImportReport) -> None:
    """The skipped bad lines (``file:line: reason``, the first ``MAX_BAD_LINES_SHOWN``) on stderr."""
    if report.bad_line_count:
        print(f"{report.bad_line_count} bad line(s) skipped:", file=sys.stderr)
        for line in report.bad_lines[:MAX_BAD_LINES_SHOWN]:
            print(f"  {terminal_safe(line)}", file=sys.stderr)
        if report.bad_line_count > MAX_BAD_LINES_SHOWN:
            print(f"  ... and {report.bad_line_count - MAX_BAD_LINES_SHOWN} more", file=sys.stderr)
