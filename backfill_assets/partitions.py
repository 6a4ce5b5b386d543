"""The one hourly partitioning shared by every layer, and strict helpers for hour keys.

Partition keys are the table's ``hour`` values (``YYYY-MM-DDTHH``, UTC), so what the UI
shows, what the CLI takes and what the tables hold are the same strings.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import dagster as dg

HOUR_FORMAT = "%Y-%m-%dT%H"
PARTITIONS_START = "2026-01-01T00"
_HOUR_KEY = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}$")

hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=PARTITIONS_START, fmt=HOUR_FORMAT, timezone="UTC"
)


class InvalidHourError(ValueError):
    """An hour key that is not ``YYYY-MM-DDTHH`` (UTC) or lies outside the partitions."""


def parse_hour(key: str) -> datetime:
    """Parse and validate an hour key; the only way a key may reach SQL or a path."""
    if not isinstance(key, str) or not _HOUR_KEY.match(key):
        raise InvalidHourError(f"invalid hour {key!r}: expected YYYY-MM-DDTHH (UTC)")
    try:
        hour = datetime.strptime(key, HOUR_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise InvalidHourError(f"invalid hour {key!r}: {exc}") from None
    if hour < datetime.strptime(PARTITIONS_START, HOUR_FORMAT).replace(tzinfo=UTC):
        raise InvalidHourError(f"hour {key} is before the first partition {PARTITIONS_START}")
    return hour


def hour_key(moment: datetime) -> str:
    """The hour key (UTC) that contains ``moment``."""
    return moment.astimezone(UTC).strftime(HOUR_FORMAT)


def shift_hour(key: str, hours: int) -> str:
    return hour_key(parse_hour(key) + timedelta(hours=hours))


def hour_range(first: str, last: str) -> list[str]:
    """Every hour key from ``first`` to ``last``, both inclusive."""
    start, end = parse_hour(first), parse_hour(last)
    if end < start:
        raise InvalidHourError(f"empty range: {last} is before {first}")
    return [
        hour_key(start + timedelta(hours=i))
        for i in range(int((end - start).total_seconds() // 3600) + 1)
    ]


def backup_hour_path(key: str) -> str:
    """The backup folder of an hour, relative to ``<backup_root>/raw``."""
    hour = parse_hour(key)
    return f"date={hour:%Y-%m-%d}/hour={hour:%H}"
