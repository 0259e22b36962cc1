"""The sidebar's time zones: the choices and the conversion of a local day to naive UTC."""

from __future__ import annotations

import datetime as dt
import zoneinfo

#: Offered first in the time-zone box; every other IANA zone follows, sorted.
COMMON_ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Berlin",
    "America/New_York",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
)


def zones() -> list[str]:
    """The common zones, then every other IANA zone."""
    others = sorted(zoneinfo.available_timezones() - set(COMMON_ZONES))
    return list(COMMON_ZONES) + others


def local_midnight_utc(day: dt.date, tz: str) -> dt.datetime:
    """Midnight of ``day`` in ``tz`` as a naive UTC datetime (the store's time base)."""
    local = dt.datetime.combine(day, dt.time(), tzinfo=zoneinfo.ZoneInfo(tz))
    return local.astimezone(dt.UTC).replace(tzinfo=None)


def to_local(ts_utc: dt.datetime, tz: str) -> dt.datetime:
    """A naive UTC datetime as an aware one in ``tz``."""
    return ts_utc.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(tz))
