"""The dashboard's one data layer: typed, cached, read-only reads of the store through the
analysis code.

Pages call what they mean: ``data.overview(filters)``, ``data.baselines(filters, by_model=True)``,
``data.run_detail(run_id)``. Each function opens ``budgetlens.store.read_connection`` for the
length of one analysis call, caches the result with ``st.cache_data`` keyed by the arguments and
the store's *data version* (size and mtime of the DuckDB file and its WAL, so a commit by the
collector invalidates the cache at once), and returns what the ``budgetlens.analysis.views``
function of the same name returns.

When the store is momentarily unavailable (the writer holds the file past the short read
timeout, an I/O hiccup) the last good result of the same query is returned instead and
``stale()`` says so; without one, ``DataUnavailable`` is raised and the entrypoint shows a
"data unavailable, retrying" notice. A lock error, empty tiles or $0 never stand in for it.
A path that is not a budgetlens store (a file DuckDB cannot open) raises DataUnavailable with
``invalid`` set: the entrypoint shows the reason as an error and does not retry.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd
import streamlit as st

from budgetlens.analysis import views as analysis
from budgetlens.analysis.views import Filters
from budgetlens.config import resolve_db_path
from budgetlens.store import StoreError, StoreMissing, latest_snapshot, read_connection
from budgetlens.store.connection import is_lock_conflict

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds a page query waits for the writer to release the file before falling back.
READ_TIMEOUT_S = 4.0
#: Seconds a cached result lives at most (the data version usually invalidates it sooner).
CACHE_TTL_S = 60
#: Results kept for the fallback while the store is busy (the most recently read ones).
LAST_GOOD_ENTRIES = 256
#: Session-state key of the filters chosen in the sidebar (set by the entrypoint).
FILTERS_KEY = "app_filters"
#: Session-state key of the store's state in this run: None (read fine), "busy", "missing" or
#: "invalid" (not a budgetlens store: shown as an error, never retried in a loop).
UNAVAILABLE_KEY = "app_unavailable"
_STALE_KEY = "app_stale_since"

_last_good: dict[tuple, tuple[float, Any]] = {}
_last_good_lock = threading.Lock()


class DataUnavailable(RuntimeError):
    """The store cannot be read right now and there is no earlier result to show.

    ``missing`` is True when no store file exists yet (nothing to retry until one appears);
    ``invalid`` is True when the path is not a budgetlens store at all (a file DuckDB cannot
    open, a directory, no permission): retrying cannot help, the message says why.
    """

    def __init__(self, message: str, *, missing: bool = False, invalid: bool = False):
        super().__init__(message)
        self.missing = missing
        self.invalid = invalid

    @property
    def state(self) -> str:
        """``"missing"``, ``"invalid"`` or ``"busy"`` (the value of ``UNAVAILABLE_KEY``)."""
        return "missing" if self.missing else "invalid" if self.invalid else "busy"


def is_busy(error: BaseException) -> bool:
    """True when ``error`` (a StoreError or DuckDB error) is a lock conflict with a writer, or
    an I/O hiccup while reading: worth a retry. False for a StoreError saying the file cannot
    be opened at all (not a DuckDB file, a directory, no permission, a newer schema)."""
    if isinstance(error, StoreError):
        cause = error.__cause__
        return cause is not None and is_lock_conflict(cause)
    return isinstance(error, (duckdb.IOException, duckdb.ConnectionException))


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
def _cached_read(name: str, path: str, version: DataVersion, args: tuple, kwargs: tuple):
    import importlib

    module, _, attr = name.rpartition(".")
    function: Callable[..., Any] = (
        getattr(importlib.import_module(f"budgetlens.analysis.{module}"), attr)
        if module
        else getattr(analysis, attr)
    )
    with read_connection(path, timeout_s=READ_TIMEOUT_S) as conn:
        return function(conn, *args, **dict(kwargs))


def _read(name: str, *args, **kwargs) -> Any:
    """``budgetlens.analysis.views.<name>(conn, *args, **kwargs)`` on a read-only connection,
    cached (private: pages call the typed functions below).
    A dotted ``name`` (``whatif.plan_for_target``) names another module of ``budgetlens.analysis``.

    Falls back to the last good result of the same call while the store is busy (``stale()``
    turns true). Raises DataUnavailable when the store is missing or busy and nothing was read
    before, and (``invalid``, no retry) when the path is not a budgetlens store; other errors
    propagate.
    """
    path = db_path()
    key = (name, str(path), args, tuple(sorted(kwargs.items())))
    # The busy fallback ignores the window's bounds: a window "up to now" moves at every rerun,
    # and the last good result of the same view and filters is what a busy store should show.
    fallback_key = (name, str(path), tuple(_without_window(a) for a in args), key[3])
    try:
        value = _cached_read(name, str(path), data_version(path), args, key[3])
    except StoreMissing as error:
        raise DataUnavailable(str(error), missing=True) from error
    except duckdb.CatalogException as error:  # a file whose first migration is not committed
        raise DataUnavailable(f"{path}: the store has no budgetlens tables yet", missing=True) from error
    except StoreError as error:
        if not is_busy(error):
            raise DataUnavailable(str(error), invalid=True) from error
        return _fallback(name, fallback_key, error)
    except (duckdb.IOException, duckdb.ConnectionException) as error:
        return _fallback(name, fallback_key, error)
    with _last_good_lock:
        _last_good.pop(fallback_key, None)
        _last_good[fallback_key] = (time.time(), value)
        while len(_last_good) > LAST_GOOD_ENTRIES:  # drop the least recently read
            _last_good.pop(next(iter(_last_good)))
    return value


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


# --- the typed reads (one per analysis view; shapes as documented there) ------------------------
def data_extent() -> tuple[dt.datetime | None, dt.datetime | None, int]:
    """(oldest run start, newest run start, runs) of the whole store (naive UTC)."""
    return _read("data_extent")


def filter_options() -> dict[str, list[str]]:
    """The values the sidebar filters can take: ``task_types``, ``models``, ``services``."""
    return _read("filter_options")


def window_coverage(f: Filters) -> analysis.WindowCoverage:
    """What the window of ``f`` keeps and leaves out of its scope (``views.window_coverage``)."""
    return _read("window_coverage", f)


def overview(f: Filters) -> analysis.Overview:
    """Headline figures and per-task rates of ``f`` (``views.overview``)."""
    return _read("overview", f)


def baselines(f: Filters, by_model: bool = False) -> pd.DataFrame:
    """n, P50, P95 and max per task type (and model) (``views.baselines``)."""
    return _read("baselines", f, by_model=by_model)


def token_part_baselines(f: Filters) -> pd.DataFrame:
    """P50, P95 and max of cache read, cache write and reasoning tokens per task type
    (``views.token_part_baselines``)."""
    return _read("token_part_baselines", f)


def model_latency(f: Filters) -> pd.DataFrame:
    """Calls and P50/P95/max call duration (s) per model (``views.model_latency``)."""
    return _read("model_latency", f)


def current_limits(f: Filters) -> pd.DataFrame:
    """The limits the runs of ``f`` ran under, per task type (``views.current_limits``)."""
    return _read("current_limits", f)


def hit_rate_daily(f: Filters) -> pd.DataFrame:
    """Hit and intervention rate per local day and task type (``views.hit_rate_daily``)."""
    return _read("hit_rate_daily", f)


def stop_reasons(f: Filters) -> pd.DataFrame:
    """Runs per task type and stop reason (``views.stop_reasons``)."""
    return _read("stop_reasons", f)


def cost_by_period(f: Filters, period: str = "day", by: str = "model") -> pd.DataFrame:
    """Cost per local period ('hour', 'day', 'week', 'month') and model or task type
    (``views.cost_by_period``)."""
    return _read("cost_by_period", f, period=period, by=by)


def cost_per_run(f: Filters) -> pd.DataFrame:
    """Runs per log-spaced cost bucket and task type (``views.cost_per_run``)."""
    return _read("cost_per_run", f)


def token_distribution(f: Filters) -> pd.DataFrame:
    """Runs per log-spaced total-token bucket and task type (``views.token_distribution``)."""
    return _read("token_distribution", f)


def top_runs(f: Filters, limit: int = 20) -> pd.DataFrame:
    """The ``limit`` most expensive priced runs (``views.top_runs``)."""
    return _read("top_runs", f, limit=limit)


def runs_table(f: Filters, search: str = "", limit: int = 500, offset: int = 0) -> pd.DataFrame:
    """One row per run, newest first (``views.runs_table``)."""
    return _read("runs_table", f, search=search, limit=limit, offset=offset)


def run_detail(run_id: str) -> analysis.RunDetail | None:
    """One run with its calls and events, None when it is not in the store."""
    return _read("run_detail", run_id)


def _fallback(name: str, key: tuple, error: BaseException):
    """The last good result of ``key`` while the store is busy; DataUnavailable without one."""
    log.warning("store busy for %s, falling back: %s", name, error)
    with _last_good_lock:
        previous = _last_good.get(key)
    if previous is None:
        raise DataUnavailable(
            "The store is busy (the collector is committing); retrying in a moment."
        ) from error
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
    """Reset the per-run stale marker (called by the entrypoint at the start of every run)."""
    st.session_state[_STALE_KEY] = None
    st.session_state[UNAVAILABLE_KEY] = None


def filters() -> Filters:
    """The ``budgetlens.analysis.views.Filters`` chosen in the sidebar (default: no bound, UTC)."""
    return st.session_state.get(FILTERS_KEY) or Filters()


def clear_cache() -> None:
    """Drop every cached query result (the "reload now" button)."""
    _cached_read.clear()


# --- typed loaders of the evidence tools (issue 10) ------------------------------------------------
def whatif_plan(f, target: float, method: str = "auto"):
    """``budgetlens.analysis.whatif.plan_for_target`` for the filters ``f``, cached: the trade-off
    curve, the presets meeting ``target`` (0..1) and their replay (``TargetPlan``)."""
    return _read("whatif.plan_for_target", f, float(target), method)


def runaways(f, k: float = 3.0, repeats: int = 10):
    """``budgetlens.analysis.runaways.runaways`` for ``f``, cached (``Runaways``)."""
    return _read("runaways.runaways", f, float(k), int(repeats))


def drift(f):
    """``budgetlens.analysis.drift.drift`` for ``f``, cached: P95 this week vs the week before."""
    return _read("drift.drift", f)


def censored_baselines(f):
    """``budgetlens.analysis.censoring.censored_baselines`` for ``f``, cached: Kaplan–Meier P95
    per task type with lower-bound flags."""
    return _read("censoring.censored_baselines", f)


def evidence(f):
    """``budgetlens.analysis.whatif.evidence`` for ``f``, cached: the plain and Kaplan–Meier
    baselines presets rest on."""
    return _read("whatif.evidence", f)
