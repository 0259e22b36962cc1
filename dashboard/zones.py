"""The sidebar's time zones: the choices and the conversion of a local day to naive UTC."""

from __future__ import annotations

import datetime as dt
import functools
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


@functools.cache
def zone_names() -> frozenset[str]:
    """Every IANA zone name of this machine (read once: ``zoneinfo.available_timezones`` walks
    the zone directory, a tenth of a second at every script run)."""
    return frozenset(zoneinfo.available_timezones())


def zones() -> list[str]:
    """The common zones, then every other IANA zone (a new list at each call)."""
    return [*COMMON_ZONES, *_other_zones()]


@functools.cache
def _other_zones() -> tuple[str, ...]:
    return tuple(sorted(zone_names() - set(COMMON_ZONES)))


def local_midnight_utc(day: dt.date, tz: str) -> dt.datetime:
    """Midnight of ``day`` in ``tz`` as a naive UTC datetime (the store's time base)."""
    local = dt.datetime.combine(day, dt.time(), tzinfo=zoneinfo.ZoneInfo(tz))
    return local.astimezone(dt.UTC).replace(tzinfo=None)


def to_local(ts_utc: dt.datetime, tz: str) -> dt.datetime:
    """A naive UTC datetime as an aware one in ``tz``."""
    return ts_utc.replace(tzinfo=dt.UTC).astimezone(zoneinfo.ZoneInfo(tz))
