"""The collector's ``/healthz`` body: backlog, lag, journal budget and the store's state."""

from __future__ import annotations

import errno
import os

from budgetlens.ingest.queue import IngestQueue


def journal_failure(error: BaseException) -> str:
    """Why a journal write failed, in words without a path: the exception's type, and for an
    OSError its errno name and text ("OSError ENOSPC (No space left on device)")."""
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        return f"{type(error).__name__} {name} ({os.strerror(error.errno)})"
    return type(error).__name__


def health(
    ingest: IngestQueue,
    inflight_bytes: int = 0,
    connections: int | None = None,
    journal_error: str | None = None,
) -> tuple[dict, int]:
    """(body, HTTP status) of ``/healthz`` for ``ingest``: 200 ``ok``; 503 ``writer stopped``
    when a thread has stopped; 503 ``store unavailable: <reason>`` from the first failed load
    (or fold) until one succeeds: whenever ``store_error`` is set, whatever the reason (another
    process holding the file too: the journal absorbs the backlog, but nothing new becomes
    queryable), so the status and ``store_error`` never disagree.
    ``journal_used_pct`` is the backlog's share of the journal's disk budget (percent); at 100 %
    new spans are refused (503). ``refused_in_s`` (only while the store is unavailable) estimates
    when: the free budget at the rate the backlog grew since its oldest batch (None when it is
    empty).

    The backlog is counted in store rows (``queue_rows``, ``backlog_rows``: model calls, run
    records and events acknowledged, not yet in DuckDB), not in spans: a journaled batch keeps
    rows only (a tool span leaves none, a call span one plus its events), so a count of spans
    could not survive a restart. ``backlog_spans`` is the former name of ``backlog_rows``
    (the same number, kept for scripts that read it). ``connections`` (open HTTP connections,
    when the server counts them: ``budgetlens.ingest.connections``) is reported as given.
    ``journal_error`` (``journal_failure`` of the last journal write, None once one succeeds):
    503 ``journal unavailable: <reason>`` while set, as every POST is then refused (disk full)."""
    error = ingest.store_error
    backlog, budget, lag = ingest.backlog_bytes, ingest.max_journal_bytes, ingest.lag_s
    if not ingest.alive:
        status = "writer stopped"
    elif journal_error is not None:
        status = f"journal unavailable: {journal_error}"
    elif error is not None:
        status = f"store unavailable: {error}"
    else:
        status = "ok"
    refused_in = None
    if error is not None and backlog > 0 and lag > 0:
        refused_in = round(max(0, budget - backlog) * lag / backlog, 1)
    body = {
        "status": status,
        "queue_rows": ingest.depth,
        "backlog_rows": ingest.depth,
        "backlog_spans": ingest.depth,
        "backlog_bytes": backlog,
        "journal_budget_bytes": budget,
        "journal_used_pct": round(100.0 * backlog / budget, 2) if budget else None,
        "refused_in_s": refused_in,
        "loader_lag_s": round(lag, 3),
        "store_error": error,
        "journal_error": journal_error,
        "inflight_bytes": inflight_bytes,
    }
    if connections is not None:
        body["connections"] = connections
    return body, 200 if status == "ok" else 503
