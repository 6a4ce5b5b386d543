"""Hour keys and the partitions' span, strictly (Dagster-free).

Partition keys are the table's ``hour`` values (``YYYY-MM-DDTHH``, UTC), so what the UI
shows, what the CLI takes and what the tables hold are the same strings. The partitions
span ``BACKFILL_PARTITIONS_START`` .. ``BACKFILL_PARTITIONS_END`` (``settings.partition_span``,
read at each use; unset end: up to the newest complete hour). ``defs.partitions`` makes
Dagster's partitions definition of the same span.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from backfill_assets.settings import (
    HOUR_FORMAT,
    PARTITIONS_END_ENV,
    PARTITIONS_START_ENV,
    partition_span,
)

_HOUR_KEY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}")  # fullmatch, ASCII digits


class InvalidHourError(ValueError):
    """An hour key that is not ``YYYY-MM-DDTHH`` (UTC) or lies outside the partitions."""


def _strict_hour(key: str) -> datetime:
    if not isinstance(key, str) or not _HOUR_KEY.fullmatch(key):
        raise InvalidHourError(f"invalid hour {key!r}: expected YYYY-MM-DDTHH (UTC)")
    try:
        return datetime.strptime(key, HOUR_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise InvalidHourError(f"invalid hour {key!r}: {exc}") from None


def parse_hour(key: str) -> datetime:
    """Parse and validate an hour key; the only way a key may reach SQL or a path."""
    hour = _strict_hour(key)
    start, end = partition_span()
    if key < start:
        raise InvalidHourError(
            f"hour {key} is before the first partition {start} ({PARTITIONS_START_ENV})"
        )
    if end is not None and key >= end:
        raise InvalidHourError(
            f"hour {key} is after the last partition (the partitions end before "
            f"{end}: {PARTITIONS_END_ENV})"
        )
    return hour


def hour_key(moment: datetime) -> str:
    """The hour key (UTC) that contains ``moment``."""
    return moment.astimezone(UTC).strftime(HOUR_FORMAT)


def shift_hour(key: str, hours: int) -> str:
    """Hour arithmetic (the result may lie outside the partitions: windows reach there)."""
    return hour_key(_strict_hour(key) + timedelta(hours=hours))


def _keys(start: datetime, end: datetime) -> list[str]:
    return [
        hour_key(start + timedelta(hours=i))
        for i in range(int((end - start).total_seconds() // 3600) + 1)
    ]


def hour_range(first: str, last: str) -> list[str]:
    """Every hour key from ``first`` to ``last``, both inclusive, all within the partitions
    (the validation of a range that someone asked for)."""
    start, end = parse_hour(first), parse_hour(last)
    if end < start:
        raise InvalidHourError(f"empty range: {last} is before {first}")
    return _keys(start, end)


def hours_between(first: str, last: str) -> list[str]:
    """Every hour key of ``first..last`` (inclusive), inside the partitions or not: the
    hours a window reads."""
    start, end = _strict_hour(first), _strict_hour(last)
    return _keys(start, end) if start <= end else []


def clamp_range(first: str, last: str) -> tuple[str, str] | None:
    """``first..last`` cut to the partitions (None if nothing of it is inside)."""
    start, end = partition_span()
    first = max(first, start)
    if end is not None:
        last = min(last, shift_hour(end, -1))
    return (first, last) if first <= last else None


def backup_hour_path(key: str) -> str:
    """The backup folder of an hour, relative to ``<backup_root>/raw``."""
    hour = _strict_hour(key)
    return f"date={hour:%Y-%m-%d}/hour={hour:%H}"


def newest_partition(now: datetime | None = None) -> str | None:
    """The newest partition: the hour before ``BACKFILL_PARTITIONS_END``, else the newest
    complete hour (UTC; as Dagster's hourly partitions end); None before the first."""
    start, end = partition_span()
    if end is not None:
        newest = shift_hour(end, -1)
    else:
        newest = hour_key((now or datetime.now(UTC)) - timedelta(hours=1))
    return newest if newest >= start else None


def within_partitions(last: str) -> None:
    """Refuse a range ending after the newest partition (with ``BACKFILL_PARTITIONS_END``
    unset: the newest complete hour, which moves with the clock)."""
    newest = newest_partition()
    if newest is None or last > newest:
        raise InvalidHourError(
            f"hour {last} is not a partition yet: the newest is {newest or 'none'} "
            + (
                f"({PARTITIONS_END_ENV}={partition_span()[1]})"
                if partition_span()[1]
                else "(the newest complete hour, UTC)"
            )
            + "; nothing of it can be rebuilt"
        )


def range_hours(first: str, last: str, cap: int) -> list[str]:
    """The hours of ``first..last``, refused beyond ``cap`` hours (before anything runs)."""
    hours = hour_range(first, last)
    within_partitions(last)
    if len(hours) > cap:
        raise ValueError(
            f"{first}..{last} is {len(hours):,} hours, more than the cap of {cap:,} "
            f"(BACKFILL_MAX_RANGE_HOURS); split the range or raise the cap for this command"
        )
    return hours
