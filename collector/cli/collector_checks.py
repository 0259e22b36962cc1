"""What ``budgetlens collector`` checks and opens before it serves: the connection limits its
flags and the open-file limit allow, the store it must be able to write (and whether a lake's
catalog is only unreachable for now), and the ledger beside its journal. A failed check is one
line for the user, never a traceback."""

from __future__ import annotations


def connection_limits(args):
    """(ConnectionLimits, problem) from the flags, after raising the soft open-file limit to
    the hard one; --max-connections is lowered (with a warning) to what the limit leaves once
    ``RESERVED_FDS`` are kept for the collector's own files."""
    import sys

    from budgetlens.ingest.connections import RESERVED_FDS, ConnectionLimits, raise_open_file_limit

    if args.max_client_connections > args.max_connections:
        return None, (
            f"--max-client-connections ({args.max_client_connections}) must be at most "
            f"--max-connections ({args.max_connections})"
        )
    total = args.max_connections
    nofile = raise_open_file_limit()
    if nofile is not None and total > nofile[0] - RESERVED_FDS:
        total = max(1, nofile[0] - RESERVED_FDS)
        print(
            f"budgetlens collector: warning: the open-file limit is {nofile[0]}: "
            f"--max-connections lowered from {args.max_connections} to {total}",
            file=sys.stderr,
        )
    limits = ConnectionLimits(
        header_timeout_s=args.header_timeout,
        header_idle_timeout_s=min(args.idle_timeout, args.header_timeout),
        max_connections=total,
        max_client_connections=min(args.max_client_connections, total),
    )
    return limits, None


def open_ledger(db_path):
    """The collector's ledger (``/v1/ledger/*``): a SQLite file beside its journal, so spend,
    holds and settled call ids survive a restart."""
    from budgetlens.guard.ledgers.local import SqliteLedger
    from budgetlens.ingest.ledger_api import ledger_path

    path = ledger_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteLedger(path)


def store_problem(db_path) -> str | None:
    """One line saying why the collector cannot write ``db_path`` (a file that is not a DuckDB
    store, a directory, no permission, a ``ducklake:`` location that cannot be attached or whose
    extra is missing), or None when it can: opens it for writing once (creating and migrating
    it). Another process holding the file (a reader's lock) is not a problem: the journal
    absorbs until it lets go."""
    import duckdb

    from budgetlens.store import StoreError, write_connection
    from budgetlens.store.connection import is_lock_conflict

    try:
        with write_connection(db_path, timeout_s=2.0):
            return None
    except StoreError as error:
        if is_lock_conflict(error.__cause__ or error):
            return None
        return _one_line(error)
    except (duckdb.Error, OSError, ImportError) as error:
        return _one_line(error)


#: Words of a catalog connection failure (PostgreSQL down or not yet up): an outage to journal
#: through, where any other problem of a lake (a missing extra, a bad location) is refused.
_UNREACHABLE = ("unable to connect", "could not connect", "connection to server", "connection refused")


def lake_unreachable(problem: str) -> bool:
    """True when ``problem`` (``store_problem``'s line for a ``ducklake:`` location) says its
    catalog server cannot be reached right now."""
    lowered = problem.lower()
    return any(word in lowered for word in _UNREACHABLE)


def _one_line(error: BaseException) -> str:
    """The first non-empty line of ``error``'s message (DuckDB's errors run to several)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
