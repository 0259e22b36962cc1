"""The dashboard's one data layer: typed, cached, read-only reads of the store through the
analysis code.

Pages call what they mean: ``data.overview(filters)``, ``data.baselines(filters, by_model=True)``,
``data.run_detail(run_id)``. A page render opens one reader of the store, shared by all its
loaders and closed when the render ends (``begin_run`` / ``end_run``, ``RenderReader``:
``budgetlens.store.connect``, through the collector when one runs on the file, which holds it;
else the file itself; outside a render, one reader per call), caches the result with
``st.cache_data`` keyed by the arguments and the store's *data version* (size and mtime of the
DuckDB file and its WAL: a commit by the collector invalidates the cache at once), and returns
what the analysis function it wraps returns. Each loader names its function by reference (``overview = cached(views.overview)``),
so grep and mypy follow a page's call down to the SQL.

When the store is momentarily unavailable (the writer holds the file past the short read
timeout, an I/O hiccup) the last good result of the same query is returned instead and
``stale()`` says so; without one, ``DataUnavailable`` is raised and the entrypoint shows a
"data unavailable, retrying" notice. A lock error, empty tiles or $0 never stand in for it.
A path that is not a budgetlens store (a file DuckDB cannot open) raises DataUnavailable with
``invalid`` set: the entrypoint shows the reason as an error and does not retry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb
import streamlit as st

from budgetlens.analysis import censoring, spenders, views, whatif
from budgetlens.analysis import cost_totals as cost_totals_analysis
from budgetlens.analysis import drift as drift_analysis
from budgetlens.analysis import runaways as runaways_analysis
from budgetlens.analysis.views import Filters
from budgetlens.config import resolve_db_path
from budgetlens.dashboard.render_reader import RenderReader
from budgetlens.dashboard.unavailable import DataUnavailable, is_busy
from budgetlens.store import StoreError, StoreMissing, connect, latest_snapshot
from budgetlens.store.lock_holder import lock_message

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

#: Seconds a page query waits for the writer to release the file before falling back.
READ_TIMEOUT_S = 4.0
#: Seconds a cached result lives at most (the data version usually invalidates it sooner).
CACHE_TTL_S = 60
#: Results kept for the fallback while the store is busy (the most recently read ones).
LAST_GOOD_ENTRIES = 256
#: Session-state key of the filters chosen in the sidebar (set by the entrypoint).
FILTERS_KEY = "app_filters"
#: Session-state key of the store's state this run: None, "busy", "missing", "invalid" (never retried).
UNAVAILABLE_KEY = "app_unavailable"
_STALE_KEY = "app_stale_since"

_last_good: dict[tuple, tuple[float, Any]] = {}
_last_good_lock = threading.Lock()


@dataclass(frozen=True)
class DataVersion:
    """Identity of the store's content: changes whenever a writer commits. None fields = no file."""

    db: tuple[int, int] | None
    wal: tuple[int, int] | None


def db_path() -> Path | str:
    """The store of this dashboard: ``$BUDGETLENS_DB``, else ``budgetlens.duckdb`` (an absolute
    path), or a DuckLake location as given."""
    location = resolve_db_path(None)
    return location.resolve() if isinstance(location, Path) else location


def last_write_utc(path: Path | str | None = None) -> dt.datetime | None:
    """When a writer last committed to the store (the newer mtime of the file and its WAL, naive
    UTC; None without a file, and on a DuckLake, whose versions are snapshot ids): the "last
    arrival" of data, whatever the runs' own times."""
    if not isinstance(path or db_path(), Path):
        return None
    version = data_version(path)
    stamps = [v[0] for v in (version.db, version.wal) if v]
    if not stamps:
        return None
    return dt.datetime.fromtimestamp(max(stamps) / 1e9, dt.UTC).replace(tzinfo=None)


def store_name() -> str:
    """The store as the sidebar names it: the file name, or the DuckLake location (no password)."""
    location = db_path()
    if isinstance(location, Path):
        return location.name
    from budgetlens.store.location import parse_lake

    return str(parse_lake(location))


def data_version(path: Path | str | None = None) -> DataVersion:
    """(mtime_ns, size) of the DuckDB file and of its ``.wal``: two ``stat`` calls, no lock.
    On a DuckLake: (the catalog's latest snapshot id, 0), which every commit raises."""
    path = path or db_path()
    if not isinstance(path, Path):
        snapshot = latest_snapshot(path)
        return DataVersion(None if snapshot is None else (snapshot, 0), None)

    def _stat(p: Path):
        try:
            s = os.stat(p)
        except FileNotFoundError:
            return None
        return (s.st_mtime_ns, s.st_size)

    return DataVersion(_stat(path), _stat(Path(str(path) + ".wal")))


@st.cache_data(ttl=CACHE_TTL_S, max_entries=512, show_spinner=False)
def _cached_call(
    view: str, path: str, version: DataVersion, args: tuple, kwargs: tuple, _function: Callable[..., Any]
) -> Any:
    """``_function(conn, *args, **kwargs)`` on a reader of the store (``budgetlens.store.connect``:
    through the running collector, else the file read-only). ``view`` (the function's
    module and qualified name) keys the cache: Streamlit cannot hash a function, and the
    leading underscore keeps ``_function`` out of the key."""
    reader = _render.reader
    if reader is None:  # outside a page render (a fragment's rerun, a test): one reader per call
        with connect(path, timeout_s=READ_TIMEOUT_S) as conn:
            return _function(conn, *args, **dict(kwargs))
    conn = reader.get(path, lambda p: connect(p, timeout_s=READ_TIMEOUT_S))
    try:
        return _function(conn, *args, **dict(kwargs))
    except (StoreError, duckdb.IOException, duckdb.ConnectionException):
        reader.close()  # the next loader of this render opens a fresh one
        raise


#: The render reader of this thread's script run (one thread per session), set by ``begin_run``.
class _RenderState(threading.local):
    reader: RenderReader | None = None


_render = _RenderState()


@contextlib.contextmanager
def render_reader() -> Iterator[RenderReader]:
    """One shared reader for the loaders called inside the block (``RenderReader``), closed
    after it. Nested blocks share the outer one."""
    outer = _render.reader
    if outer is not None:
        yield outer
        return
    reader = _render.reader = RenderReader()
    try:
        yield reader
    finally:
        _render.reader = None
        reader.close()


def _read(function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """``function(conn, *args, **kwargs)`` on a read-only connection, cached (private: pages
    call the typed loaders that ``cached`` builds).

    Falls back to the last good result of the same call while the store is busy (``stale()``
    turns true). Raises DataUnavailable when the store is missing or busy and nothing was read
    before, and (``invalid``, no retry) when the path is not a budgetlens store; other errors
    propagate.
    """
    view = f"{function.__module__}.{function.__qualname__}"
    path = db_path()
    named = tuple(sorted(kwargs.items()))
    # The busy fallback ignores the window's bounds: a window "up to now" moves at every rerun,
    # and the last good result of the same view and filters is what a busy store should show.
    fallback_key = (view, str(path), tuple(_without_window(a) for a in args), named)
    try:
        value = _cached_call(view, str(path), data_version(path), args, named, function)
    except StoreMissing as error:
        raise DataUnavailable(str(error), missing=True) from error
    except duckdb.CatalogException as error:  # a file whose first migration is not committed
        raise DataUnavailable(f"{path}: the store has no budgetlens tables yet", missing=True) from error
    except StoreError as error:
        if not is_busy(error):
            raise DataUnavailable(str(error), invalid=True) from error
        return _fallback(view, fallback_key, error)
    except (duckdb.IOException, duckdb.ConnectionException) as error:
        return _fallback(view, fallback_key, error)
    with _last_good_lock:
        _last_good.pop(fallback_key, None)
        _last_good[fallback_key] = (time.time(), value)
        while len(_last_good) > LAST_GOOD_ENTRIES:  # drop the least recently read
            _last_good.pop(next(iter(_last_good)))
    return value


def cached(function: Callable[Concatenate[duckdb.DuckDBPyConnection, P], R]) -> Callable[P, R]:
    """The dashboard's loader of the analysis function ``function(conn, ...)``: the same
    parameters after the connection, the same return value, read through ``_read`` (read-only
    connection, cached by data version, busy fallback, ``DataUnavailable``).

    ``inspect.signature`` of the loader is the function's without ``conn``; its docstring
    names the function it reads.
    """

    def load(*args: P.args, **kwargs: P.kwargs) -> R:
        return _read(function, args, kwargs)

    signature = inspect.signature(function)
    load.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
    load.__name__ = function.__name__
    load.__qualname__ = function.__qualname__
    load.__doc__ = (
        f"``{function.__module__}.{function.__qualname__}`` of the store, cached.\n\n{function.__doc__ or ''}"
    )
    return load


def _without_window(arg: Any) -> Any:
    """``arg`` for the busy fallback's key: a Filters' time bounds as minutes before now (the
    window "last 14 days up to now" keeps its key as now moves; the previous period keeps
    another); any other argument as it is."""
    if not isinstance(arg, Filters):
        return arg
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    minutes = [
        None if b is None else round((now - b).total_seconds() / 60) for b in (arg.start_utc, arg.end_utc)
    ]
    return (dataclasses.replace(arg, start_utc=None, end_utc=None), *minutes)


# --- the typed loaders (one per analysis view; shapes as documented there) -----------------------
#: Rows the Runs page lists (the newest; its CSV download has them all).
RUNS_PAGE_SIZE = 500
#: The replay's run rows the What-if page lists (the store returns only these; a count says how many).
WHATIF_SHOWN_RUNS = 500
#: (oldest run start, newest run start, runs) of the whole store (naive UTC).
data_extent = cached(views.data_extent)
#: The values the sidebar filters can take: task_types, models, services, teams, users, tags.
filter_options = cached(views.filter_options)
#: What the window of ``f`` keeps and leaves out of its scope.
window_coverage = cached(views.window_coverage)
overview = cached(views.overview)  # headline figures and per-task rates (``views.Overview``)
#: The Cost page's tiles: the spend figures of the window alone (``cost_totals.CostTotals``).
cost_totals = cached(cost_totals_analysis.cost_totals)
_baselines = cached(views.baselines)
#: The plain and the Kaplan–Meier baselines per task type and the distribution of total tokens
#: from one read of the runs (issue 25; ``censoring.baselines_evidence``).
evidence_frames = cached(censoring.baselines_evidence)


def baselines(f: Filters, by_model: bool = False):
    """``views.baselines``: per task type from the cached ``evidence_frames``, by model read."""
    return _baselines(f, by_model=True) if by_model else evidence_frames(f)[0]


#: P50, P95 and max of cache read, cache write and reasoning tokens per task type.
token_part_baselines = cached(views.token_part_baselines)
#: Calls and P50/P95/max call duration (s) per model.
model_latency = cached(views.model_latency)
#: The periods of unchanged limits and the limits in force now, in one read (issue 25).
limit_periods = cached(views.limit_periods)


def current_limits(f: Filters):
    """The limits in force now per task type (``views.current_limits``), from ``limit_periods``."""
    return views.current_limits_of(limit_periods(f))


def limit_history(f: Filters):
    """Every change of limits per task type (``views.limit_history``), from ``limit_periods``."""
    return views.limit_history_of(limit_periods(f))


#: Hit and intervention rate per local day and task type.
hit_rate_daily = cached(views.hit_rate_daily)
#: Runs per task type and stop reason.
stop_reasons = cached(views.stop_reasons)
#: Cost per local period ('hour', 'day', 'week', 'month') and model or task type.
cost_by_period = cached(views.cost_by_period)
#: Runs per log-spaced cost bucket and task type.
cost_per_run = cached(views.cost_per_run)
_token_distribution = cached(views.token_distribution)


def token_distribution(f: Filters, per_decade: int = 10):
    """Runs per log-spaced total-token bucket and task type (``views.token_distribution``): from
    the cached ``evidence_frames`` at its buckets per decade, else read."""
    return evidence_frames(f)[2] if per_decade == 10 else _token_distribution(f, per_decade)


#: The ``limit`` most expensive priced runs.
top_runs = cached(views.top_runs)
#: Who spent it: spend and runs per team, user or service.
spend_by = cached(spenders.spend_by)
#: One row per run, newest first.
runs_table = cached(views.runs_table)
#: One run with its calls and events, None when it is not in the store.
run_detail = cached(views.run_detail)

# --- the evidence tools (issue 10) ----------------------------------------------------------------
#: The trade-off curve, the presets meeting ``target`` (0..1) and their replay (``TargetPlan``).
whatif_plan = cached(whatif.plan_for_target)
_runaways = cached(runaways_analysis.runaways)


def runaways(
    f: Filters, k: float = runaways_analysis.DEFAULT_K, repeats: int = runaways_analysis.DEFAULT_REPEATS
) -> runaways_analysis.Runaways:
    """The runaway runs of ``f`` (``runaways.runaways``, ``Runaways``), measured against the
    P95s and the spend of the cached ``overview(f)`` (``runaways.basis_of``: the Overview page
    reads them once, issue 25)."""
    return _runaways(f, k, repeats, basis=runaways_analysis.basis_of(overview(f)))


drift = cached(drift_analysis.drift)  # P95 of the last week against the week before, per task type


def censored_baselines(f: Filters):
    """Kaplan–Meier P95 per task type (``censoring.censored_baselines``), from ``evidence_frames``."""
    return evidence_frames(f)[1]


def evidence(f: Filters) -> whatif.Evidence:
    """The plain and Kaplan–Meier baselines presets rest on (``whatif.Evidence`` of ``f``), from
    the cached ``evidence_frames``: the runs are read once per render for both (issue 25)."""
    return whatif.Evidence(*evidence_frames(f)[:2])


def _fallback(view: str, key: tuple, error: BaseException) -> Any:
    """The last good result of ``key`` while the store is busy; DataUnavailable without one,
    naming the file, the process holding it and what to do (``budgetlens.store.lock_holder``)."""
    log.warning("store busy for %s, falling back: %s", view, error)
    with _last_good_lock:
        previous = _last_good.get(key)
    if previous is None:
        cause = error.__cause__ if isinstance(error, StoreError) and error.__cause__ else error
        raise DataUnavailable(f"Retrying in a moment: {lock_message(key[1], cause)}") from error
    _mark_stale(previous[0])
    return previous[1]


def _mark_stale(since: float) -> None:
    try:
        current = st.session_state.get(_STALE_KEY)
        st.session_state[_STALE_KEY] = min(current, since) if current else since
    except Exception:  # outside a script run (tests calling query directly)
        pass


def stale() -> float | None:
    """Epoch seconds of the oldest fallback result shown in this run, None when all are fresh."""
    return st.session_state.get(_STALE_KEY)


def begin_run() -> None:
    """Reset the per-run stale marker and open this run's one store reader (``RenderReader``,
    shared by the page's loaders; called by the entrypoint at each run's start; ``end_run``)."""
    st.session_state[_STALE_KEY] = None
    st.session_state[UNAVAILABLE_KEY] = None
    end_run()  # a run that stopped before its end (a rerun, switch_page) left its reader open
    _render.reader = RenderReader()


def end_run() -> None:
    """Close this run's shared reader (idempotent; the entrypoint calls it however a run ends)."""
    reader = _render.reader
    _render.reader = None
    if reader is not None:
        reader.close()


def filters() -> Filters:
    """The ``budgetlens.analysis.views.Filters`` chosen in the sidebar (default: no bound, UTC)."""
    return st.session_state.get(FILTERS_KEY) or Filters()


def clear_cache() -> None:
    """Drop every cached query result (the "reload now" button)."""
    _cached_call.clear()
