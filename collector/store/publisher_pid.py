"""Whether the PID a collector published next to its store is still that collector.

A collector writes its PID into ``<store>.collector.json`` (``budgetlens.store.readers``). After a
``kill -9`` the file stays behind, and ``os.kill(pid, 0)`` alone is fooled twice: by a zombie (the
collector is dead but its parent has not reaped it yet) and by an unrelated process that got the
PID later. On Linux ``/proc/<pid>/stat`` tells both apart: its state (``Z``/``X``: dead) and its
start time, which for the publisher is before the file was written. Elsewhere the signal check is
all there is. Pure reads of the OS; never raises.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["publisher_alive"]

#: Slack on the start-time comparison (s): the boot time in ``/proc/stat`` is whole seconds.
_START_SLACK_S = 2.0


def _started_utc(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in seconds since the epoch) of ``pid`` from ``/proc``, or None
    when ``/proc`` does not say (not Linux, the process is gone, an unreadable line)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        # "pid (comm) S ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat[stat.rindex(")") + 2 :].split()
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def publisher_alive(pid: int, published_at: float) -> bool:
    """True when ``pid`` is a live process that may have written the sidecar at ``published_at``
    (its mtime, seconds since the epoch): it exists (another user's counts), is not a zombie,
    and did not start after ``published_at``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return False
    seen = _started_utc(pid)
    if seen is None:
        return True
    state, started = seen
    return state not in ("Z", "X", "x") and started <= published_at + _START_SLACK_S
