"""The store hosts open in this process, by resolved file path (a leaf: ``connection`` and
``host`` both import it).

``read_connection`` in the process of a collector reads through its ``StoreHost``
(``budgetlens.store.host``): DuckDB refuses a second, read-only open of a file this process
holds read-write.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol


class OpenHost(Protocol):
    """What a reader in this process needs of a ``StoreHost``."""

    @property
    def is_open(self) -> bool: ...

    def snapshot_cursor(self) -> AbstractContextManager[Any]: ...


_open_hosts: dict[Path, OpenHost] = {}
_open_hosts_lock = threading.Lock()


def register(path: str | os.PathLike, host: OpenHost) -> None:
    """Make ``host`` the one ``host_in_process(path)`` returns."""
    with _open_hosts_lock:
        _open_hosts[Path(path).resolve()] = host


def unregister(path: str | os.PathLike, host: OpenHost) -> None:
    """Forget ``host`` for ``path`` (if it is still the registered one)."""
    key = Path(path).resolve()
    with _open_hosts_lock:
        if _open_hosts.get(key) is host:
            del _open_hosts[key]


def host_in_process(path: str | os.PathLike) -> OpenHost | None:
    """The open host of ``path`` in this process, or None."""
    with _open_hosts_lock:
        host = _open_hosts.get(Path(path).resolve())
    return host if host is not None and host.is_open else None
