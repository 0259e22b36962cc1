"""Who holds a DuckDB store file: the message a user reads when the file is locked.

DuckDB allows one writing process per file (design §5). When another process holds the lock,
:func:`lock_message` names the file, the holding process (its pid and command, from DuckDB's own
error text — "Conflicting lock is held in <program> (PID <n>)" — else from ``/proc/locks`` on
Linux) and what to do. Pure reads of the OS; never raises.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from budgetlens.store.publisher_pid import publisher_alive

__all__ = [
    "LockHolder",
    "collector_holder",
    "collector_message",
    "lock_holder",
    "lock_message",
    "running_collector",
]

_DUCKDB_HOLDER = re.compile(r"lock is held in (?P<program>.+?) \(PID (?P<pid>\d+)\)")


class LockHolder:
    """The process holding a file lock: ``pid`` (int or None) and ``command`` (str or None)."""

    __slots__ = ("command", "pid")

    def __init__(self, pid: int | None, command: str | None) -> None:
        self.pid, self.command = pid, command

    def __str__(self) -> str:
        if self.pid is None:
            return "another process (the OS does not say which)"
        return f"PID {self.pid}" + (f" ({self.command})" if self.command else "")


def _command(pid: int) -> str | None:
    """The command line of ``pid`` (from ``/proc/<pid>/cmdline``, at most 200 chars), or None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return text[:200] or None


def _pid_from_proc_locks(path: Path) -> int | None:
    """The pid ``/proc/locks`` names for a lock on ``path``'s inode (Linux), or None."""
    try:
        stat = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    major, minor = os.major(stat.st_dev), os.minor(stat.st_dev)
    wanted = f"{major:02x}:{minor:02x}:{stat.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 20383 08:01:123456 0 EOF" (a "->" marks a blocked waiter)
        if "->" in fields:
            continue
        for index, field in enumerate(fields):
            if field == wanted and index >= 1 and fields[index - 1].isdigit():
                return int(fields[index - 1])
    return None


def lock_holder(path: str | os.PathLike, error: BaseException | None = None) -> LockHolder:
    """The process holding the lock on ``path``: from DuckDB's error text when it names one
    (``error``), else from ``/proc/locks``; pid None when neither tells."""
    match = _DUCKDB_HOLDER.search(str(error)) if error is not None else None
    if match:
        pid = int(match["pid"])
        return LockHolder(pid, _command(pid) or match["program"])
    found = _pid_from_proc_locks(Path(path))
    return LockHolder(found, _command(found) if found is not None else None)


def lock_message(path: str | os.PathLike, error: BaseException | None = None) -> str:
    """``"<file> is locked by PID <n> (<command>). ..."`` with what to do (str)."""
    holder = lock_holder(path, error)
    return (
        f"{os.fspath(path)} is locked by {holder}. DuckDB lets one process write a store file at a "
        "time: wait for it to finish (readers retry), stop it if it should not run (a second "
        "collector, an import or `budgetlens sample` on the same file), or point --db / "
        "BUDGETLENS_DB at another file."
    )


def _published_collector(path: str | os.PathLike) -> int | None:
    """The PID of the live collector that published its read endpoint next to ``path``
    (``<path>.collector.json``, ``budgetlens.store.readers``), else None."""
    import json

    info = Path(f"{os.fspath(path)}.collector.json")
    try:
        pid = int(json.loads(info.read_text())["pid"])
        published_at = info.stat().st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none published
    # its process gone (kill -9), a zombie, or the PID now someone else's: no collector
    return pid if publisher_alive(pid, published_at) else None


def running_collector(path: str | os.PathLike) -> LockHolder | None:
    """The collector running on the store file ``path`` (it holds the file for its whole life,
    from its first write), another process than this one; None when there is none."""
    pid = _published_collector(path)
    if pid is None or pid == os.getpid():
        return None
    return LockHolder(pid, _command(pid))


def collector_holder(path: str | os.PathLike, error: BaseException | None = None) -> LockHolder | None:
    """The holder of ``path``'s lock when it is a running collector (the PID it published, or a
    ``budgetlens ... collector`` command line) other than this process, else None."""
    holder = lock_holder(path, error)
    if holder.pid is None or holder.pid == os.getpid():
        return None
    words = (holder.command or "").split()
    if holder.pid == _published_collector(path) or (
        "collector" in words and any("budgetlens" in word for word in words)
    ):
        return holder
    return None


def collector_message(path: str | os.PathLike, holder: LockHolder) -> str:
    """``"<file> is held by a running collector, PID <n> (<command>) ..."`` with what to do."""
    return (
        f"{os.fspath(path)} is held by a running collector, {holder}, for as long as it runs, so "
        "waiting would not help. Stop the collector first, or write into another store "
        "(--db OTHER.duckdb or BUDGETLENS_DB), or send the data through the collector "
        "(OTLP to its /v1/traces)."
    )
