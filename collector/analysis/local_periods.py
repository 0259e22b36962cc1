"""Local day and hour buckets of a window whose time zone keeps one UTC offset (issue 25).

The charts per local day or hour (``queries.HIT_RATE_DAILY``, ``HIT_RATE_HOURLY``,
``COST_BY_PERIOD_TASK``, ``rollup_queries.COST_BY_PERIOD_MODEL``) count runs per 15-minute UTC
bucket and convert only the buckets to local time, since the offset may change inside the
window (daylight saving time). Most windows hold no change (two weeks in November, say): then a
run's local day or hour is integer arithmetic on its start (``epoch_us`` plus the offset, divided
by the unit), and the runs are counted per local day or hour at once, a few dozen groups per key
instead of thousands (half of these statements' time at 1M runs). ``for_window`` rewrites the
statement that way when it holds and says which parameters it then reads; the buckets' local
starts are the same timestamps, so the rows are the same.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from budgetlens.analysis import queries as q
from budgetlens.analysis.filters import Filters, data_extent

__all__ = ["fixed_offset_us", "for_window"]

_US = 1_000_000
#: The bucket of a run in the rewritten statement: its local day or hour as a count of units since
#: the epoch (``$unit_us``: a day for the day, week and month charts, an hour for the hourly one).
#: Integer division truncates toward zero, so the rewrite is used only after the epoch.
_FIXED_BUCKET = "(epoch_us(start_utc) + $offset_us) // $unit_us"
#: The bucket's local start (naive local timestamp), where the statement converts a UTC bucket.
_FIXED_LOCAL_BUCKET = "make_timestamp(bucket * $unit_us)"
#: How often the offset is looked up across the window (no zone changes it twice within an hour).
_STEP = dt.timedelta(hours=1)
_EPOCH = dt.datetime(1970, 1, 2)


def fixed_offset_us(conn, f: Filters) -> int | None:
    """The UTC offset of ``f.tz`` (microseconds) when it is the same at every hour of the window
    and at its ends (an open end: the oldest or newest stored run, ``data_extent``); None when it
    changes, when the window reaches before 1970 or when no run is stored."""
    start, end = f.start_utc, f.end_utc
    if start is None or end is None:
        first, last, n = data_extent(conn)
        if not n or first is None or last is None:
            return None
        start = start or first
        end = end or last + dt.timedelta(microseconds=1)
    if start < _EPOCH or end <= start:
        return None
    zone = zoneinfo.ZoneInfo(f.tz)
    utc = dt.UTC

    def offset(at: dt.datetime) -> dt.timedelta | None:
        return at.replace(tzinfo=utc).astimezone(zone).utcoffset()

    first_offset = offset(start)
    at = start
    while at < end:
        at = min(at + _STEP, end)
        if offset(at) != first_offset:
            return None
    if first_offset is None:
        return None
    return (first_offset.days * 86_400 + first_offset.seconds) * _US + first_offset.microseconds


def for_window(conn, statement: str, f: Filters, period: str) -> tuple[str, dict]:
    """``statement`` (one of the charts in the module docstring) as the window of ``f`` reads it
    per local ``period`` ('hour', 'day', 'week' or 'month'), and the parameters it adds: counted
    per local day or hour directly when the zone keeps one offset (``fixed_offset_us``), else
    unchanged (per 15-minute UTC bucket). The same rows either way. Raises ValueError for a
    statement without the UTC bucket."""
    if q.BUCKET not in statement or q.LOCAL_BUCKET not in statement:
        raise ValueError("for_window: the statement has no 15-minute UTC bucket")
    offset_us = fixed_offset_us(conn, f)
    if offset_us is None:
        return statement, {}
    unit_us = 3600 * _US if period == "hour" else 86_400 * _US
    fixed = statement.replace(q.BUCKET, _FIXED_BUCKET).replace(q.LOCAL_BUCKET, _FIXED_LOCAL_BUCKET)
    return fixed, {"offset_us": offset_us, "unit_us": unit_us}
