"""Freed memory handed back to the OS, so the collector's resident size follows what it holds
now, not the largest moment it has lived through (issue 23: memory that does not grow with
concurrency).

A 15 MB body leaves a decode worker's heap and the collector's (the body, the worker's answer,
DuckDB's insert of its rows) full of freed blocks that glibc keeps for reuse; a few such bodies
in a row and the resident size is their sum's high-water mark, not one body's. So:

- the collector and its decode workers allocate Arrow buffers from the system allocator
  (``use_system_memory_pool``), not from a pool of Arrow's own that keeps what it freed;
- after each body a worker decoded, and each group the loader committed, over
  ``TRIM_AFTER_BYTES``, ``release_free_memory`` returns the free pages (glibc ``malloc_trim``; a no-op without glibc).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

log = logging.getLogger(__name__)

_MALLOC_TRIM: Any = None  # glibc's malloc_trim, False where there is none
#: Free memory is handed back after a body (a worker) or a committed group (the loader) over
#: this many bytes; a smaller one leaves little behind, and ``malloc_trim`` walks every arena,
#: locking each (up to a few ms, the event loop's allocations waiting).
TRIM_AFTER_BYTES = 1024 * 1024


def use_system_memory_pool() -> None:
    """Make the process's default Arrow memory pool the system allocator (idempotent)."""
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


def release_free_memory() -> None:
    """Hand the free memory of the process's heaps back to the OS: Arrow's pool first, then
    glibc's ``malloc_trim(0)`` (every arena). Cheap (milliseconds); a no-op without glibc."""
    global _MALLOC_TRIM
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)
