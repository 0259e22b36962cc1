"""The ``budgetlens`` command: a thin dispatcher over one module per subcommand.

Each module in ``COMMANDS`` exposes ``register(subparsers)``, which adds its parser and sets
``func`` (called with the parsed arguments; returns the exit code). Modules import their heavy
dependencies inside ``func`` so that ``budgetlens --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = (
    "demo",
    "collector_cmd",
    "dashboard_cmd",
    "import_cmd",
    "sample",
    "baselines",
    "presets",
    "runs",
    "hit_rate",
    "whatif",
    "runaways",
    "spend",
    "reprice",
    "store_cmd",
)


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("budgetlens")
    except PackageNotFoundError:
        return "unknown"


#: The top-level flag that is also taken after the command (``budgetlens baselines -v``).
_VERBOSE = ("-v", "--verbose")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="budgetlens",
        description=(
            "Hard, evidence-based budgets for LLM agent runs. Collect per-run usage "
            "(guard, OTLP collector, importers) into DuckDB, read P50/P95 baselines per task "
            "type, adopt presets at P95 x 1.5, and watch the budget hit rate."
        ),
        epilog=(
            "The store comes from --db, else BUDGETLENS_DB, else budgetlens.duckdb; a DuckLake "
            "store is written ducklake:postgres:dbname=NAME host=HOST[?data_path=DIR]."
        ),
    )
    parser.add_argument("--version", action="version", version=f"budgetlens {_version()}")
    parser.add_argument(
        *_VERBOSE,
        action="store_true",
        help="log debug details (and show the traceback of an error); also taken after the command",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"budgetlens.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if any(extra in _VERBOSE for extra in extras):  # -v after the command means the same
        args.verbose = True
        extras = [extra for extra in extras if extra not in _VERBOSE]
    if extras:  # the subcommand's own usage, not the top-level one (argparse's default)
        _parser_of(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # a clear one-line error instead of a traceback (-v keeps it)
        from budgetlens.store import StoreError

        duckdb = sys.modules.get("duckdb")  # loaded when the error can be one of its own
        known = (StoreError, ValueError, OSError) + ((duckdb.Error,) if duckdb is not None else ())
        if isinstance(error, known) and not args.verbose:
            from budgetlens.cli._terminal import terminal_safe

            print(f"budgetlens {args.command}: error: {terminal_safe(_describe(error))}", file=sys.stderr)
            return 1
        raise


def _parser_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)parser that ``args`` chose (``store copy`` -> ``copy``'s parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _parser_of(action.choices[chosen], args)
    return parser


def _describe(error: Exception) -> str:
    """One line for a user error: an OSError as "PATH: reason" (IsADirectoryError,
    PermissionError, FileNotFoundError, ...), anything else as its message; a message of several
    lines (a DuckDB error: ``Binder Error: ...`` then ``Candidate bindings: ...``) has its lines
    joined by ``; `` and stops before DuckDB's ``LINE 1:`` excerpt of the statement."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    lines = []
    for line in str(error).splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            lines.append(line.strip())
    return "; ".join(lines)


if __name__ == "__main__":
    sys.exit(main())
