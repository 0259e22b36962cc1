"""The shared filters of every page and command (``Filters``), the time windows they are built
from (``window_filters``, ``window_coverage``) and the runner of the analysis SQL (``run_query``)
with the queries that need nothing else (``data_extent``, ``count_runs``, ``filter_options``).
``budgetlens.analysis.views`` re-exports every name here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import numbers
import re
import zoneinfo
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from budgetlens.analysis import queries as q
from budgetlens.analysis.values import scalar
from budgetlens.attribution import tags_json

__all__ = [
    "DEFAULT_WINDOW_DAYS",
    "Filters",
    "WindowCoverage",
    "count_runs",
    "data_extent",
    "filter_options",
    "run_query",
    "used_params",
    "utc_now",
    "window_coverage",
    "window_filters",
]

DEFAULT_WINDOW_DAYS = 14

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Filters:
    """The shared filters of every page and command.

    ``start_utc`` inclusive and ``end_utc`` exclusive are naive UTC datetimes (an aware one is
    converted), None = no bound. Empty tuples mean "all". ``teams``/``users``: a run matches
    when its team (= tenant) / user is in the tuple; ``tags``: ``(key, value)`` pairs a run must
    all carry. ``tz`` is an IANA zone name for the day/hour buckets. Raises ValueError naming the
    field for an unknown zone, a reversed window or a tag that is not a (key, value) pair.
    """

    start_utc: dt.datetime | None = None
    end_utc: dt.datetime | None = None
    task_types: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    tz: str = "UTC"
    teams: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        for name in ("start_utc", "end_utc"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dt.datetime):
                raise ValueError(f"Filters.{name} must be a datetime or None, got {value!r}")
            if value is not None and value.tzinfo is not None:
                naive = value.astimezone(dt.UTC).replace(tzinfo=None)
                object.__setattr__(self, name, naive)
        for name in ("task_types", "models", "services", "teams", "users"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))
        tags = tuple(tuple(pair) for pair in self.tags or ())
        if not all(len(pair) == 2 and all(isinstance(p, str) for p in pair) for pair in tags):
            raise ValueError(f"Filters.tags must be (key, value) pairs of strings, got {self.tags!r}")
        object.__setattr__(self, "tags", tags)
        try:
            zoneinfo.ZoneInfo(self.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
            raise ValueError(f"Filters.tz: unknown IANA time zone {self.tz!r}") from None
        if self.start_utc and self.end_utc and self.start_utc >= self.end_utc:
            raise ValueError("Filters: start_utc must be before end_utc")

    def params(self) -> dict:
        """The named parameters of ``budgetlens.analysis.queries.FILTERED`` (and ``$tz``)."""
        return {
            "start_utc": self.start_utc,
            "end_utc": self.end_utc,
            "task_types": list(self.task_types),
            "models": list(self.models),
            "services": list(self.services),
            "teams": list(self.teams),
            "users": list(self.users),
            "tags": tags_json(dict(self.tags)) or "{}",
            "tz": self.tz,
        }

    def scope(self) -> Filters:
        """These filters without the time bounds (what ``window_coverage`` counts against)."""
        return dataclasses.replace(self, start_utc=None, end_utc=None)


def utc_now() -> dt.datetime:
    """The current time as a naive UTC datetime (the store's convention)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def window_filters(days: float = DEFAULT_WINDOW_DAYS, now_utc: dt.datetime | None = None, **kw) -> Filters:
    """Filters for the last ``days`` days up to now (``now_utc``, default: the clock; a later
    one is clamped to the clock: a window never ends in the future).

    The window does not follow the data: "last 14 days" on a store whose newest run is a month
    old keeps nothing, and ``window_coverage`` says how many runs it left out. Other keyword
    arguments are ``Filters`` fields. A window reaching back before the year 1 (or infinite)
    has no start bound. Raises ValueError for ``days`` <= 0 or NaN.
    """
    if isinstance(days, bool) or not isinstance(days, numbers.Real) or not days > 0:
        raise ValueError(f"days must be a number > 0, got {days!r}")
    clock = utc_now()
    if now_utc is None:
        now_utc = clock
    elif now_utc.tzinfo is not None:
        now_utc = now_utc.astimezone(dt.UTC).replace(tzinfo=None)
    now_utc = min(now_utc, clock)
    # The store keeps microseconds: +1 µs makes the exclusive end include now_utc itself.
    end = now_utc + dt.timedelta(microseconds=1)
    try:
        start = now_utc - dt.timedelta(days=days)
    except OverflowError:  # longer than datetime can count back: every run up to now
        start = None
    return Filters(start_utc=start, end_utc=end, **kw)


@dataclass(frozen=True)
class WindowCoverage:
    """How much of its scope a window keeps: ``kept`` runs of ``total`` (the same task type,
    model and service filters without the time bounds); ``before`` runs started before the
    window, ``after`` at or after its end (a custom range in the past). ``newest_utc`` is the
    newest run start of the scope (naive UTC, None when it has no run)."""

    kept: int
    total: int
    before: int
    after: int
    newest_utc: dt.datetime | None

    @property
    def left_out(self) -> int:
        """Runs of the scope outside the window (``before + after``)."""
        return self.total - self.kept


def window_coverage(conn, f: Filters) -> WindowCoverage:
    """Count what the window of ``f`` keeps and leaves out of its scope (one pass over the runs
    of the scope; statement ``budgetlens.analysis.queries.WINDOW_COVERAGE``)."""
    params = {**f.scope().params(), "window_start": f.start_utc, "window_end": f.end_utc}
    row = run_query(conn, q.WINDOW_COVERAGE, params).iloc[0]
    total, before, after = (int(row[c] or 0) for c in ("total", "n_before", "n_after"))
    return WindowCoverage(
        kept=total - before - after,
        total=total,
        before=before,
        after=after,
        newest_utc=scalar(row["newest_utc"]),
    )


def run_query(conn: duckdb.DuckDBPyConnection, statement: str, params: dict) -> pd.DataFrame:
    """Run the named ``statement`` with the ``params`` it uses (``$name``; the others are left
    out, so one ``Filters.params()`` serves every statement); the result as a DataFrame."""
    return conn.execute(statement, used_params(statement, params)).df()


def fetch_arrays(conn, statement: str, params: dict) -> dict[str, np.ndarray]:
    """``statement`` (with the ``params`` it names) as numpy arrays by column name, through Arrow
    (a DuckDB connection or ``budgetlens.store.readers.RemoteStore``): NULL numbers become NaN
    (DOUBLE columns), NULL strings None (object arrays). No pandas round trip."""
    table = conn.execute(statement, used_params(statement, params)).to_arrow_table()
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def used_params(statement: str, params: dict) -> dict:
    """The entries of ``params`` that ``statement`` names (``$name``)."""
    used = set(_PARAM.findall(statement))
    return {k: v for k, v in params.items() if k in used}


def data_extent(conn) -> tuple[dt.datetime | None, dt.datetime | None, int]:
    """Return (oldest run start, newest run start, number of runs); (None, None, 0) when empty."""
    first, last, n = conn.execute(q.DATA_EXTENT).fetchone()
    return first, last, int(n)


def count_runs(conn, f: Filters) -> int:
    """The number of runs ``f`` keeps."""
    return int(run_query(conn, q.COUNT_FILTERED, f.params()).iloc[0]["runs"])


def filter_options(conn) -> dict[str, list[str]]:
    """Return the values the filters can take: ``task_types``, ``models``, ``services``,
    ``teams``, ``users``, ``tags`` (``key=value``; sorted)."""
    return {
        "task_types": [r[0] for r in conn.execute(q.OPTION_TASK_TYPES).fetchall()],
        "models": [r[0] for r in conn.execute(q.OPTION_MODELS).fetchall()],
        "services": [r[0] for r in conn.execute(q.OPTION_SERVICES).fetchall()],
        "teams": [r[0] for r in conn.execute(q.OPTION_TEAMS).fetchall()],
        "users": [r[0] for r in conn.execute(q.OPTION_USERS).fetchall()],
        "tags": [r[0] for r in conn.execute(q.OPTION_TAGS).fetchall()],
    }
