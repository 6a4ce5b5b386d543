"""The one hourly partitioning shared by every layer, and strict helpers for hour keys.

Partition keys are the table's ``hour`` values (``YYYY-MM-DDTHH``, UTC), so what the UI
shows, what the CLI takes and what the tables hold are the same strings.

The partitions span the hours that hold data, so the catalog, the partition bar and the
launch dialog show those and not months of empty hours before them:

- ``BACKFILL_PARTITIONS_START`` (``2026-01-01T00``): the first hour;
- ``BACKFILL_PARTITIONS_END`` (unset: up to the current hour): the first hour *after* the
  partitions (exclusive), for a fixed data set such as the demo's day.

Both are read once, when the code location loads (every process that loads it: the
webserver, the daemon, each run, the CLI); a malformed value fails the load naming the
variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import dagster as dg

HOUR_FORMAT = "%Y-%m-%dT%H"
ENV_START, ENV_END = "BACKFILL_PARTITIONS_START", "BACKFILL_PARTITIONS_END"
DEFAULT_START = "2026-01-01T00"
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


def configured_span(env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(first hour, first hour after the partitions or None) from the environment."""
    env = os.environ if env is None else env
    start = env.get(ENV_START, "").strip() or DEFAULT_START
    end = env.get(ENV_END, "").strip() or None
    for name, value in ((ENV_START, start), (ENV_END, end)):
        if value is not None:
            try:
                _strict_hour(value)
            except InvalidHourError as exc:
                raise InvalidHourError(f"{name}: {exc}") from None
    if end is not None and end <= start:
        raise InvalidHourError(f"{ENV_END}={end} must be after {ENV_START}={start}")
    return start, end


PARTITIONS_START, PARTITIONS_END = configured_span()

hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=PARTITIONS_START, end_date=PARTITIONS_END, fmt=HOUR_FORMAT, timezone="UTC"
)


def parse_hour(key: str) -> datetime:
    """Parse and validate an hour key; the only way a key may reach SQL or a path."""
    hour = _strict_hour(key)
    if key < PARTITIONS_START:
        raise InvalidHourError(
            f"hour {key} is before the first partition {PARTITIONS_START} ({ENV_START})"
        )
    if PARTITIONS_END is not None and key >= PARTITIONS_END:
        raise InvalidHourError(
            f"hour {key} is after the last partition (the partitions end before "
            f"{PARTITIONS_END}: {ENV_END})"
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
    first = max(first, PARTITIONS_START)
    if PARTITIONS_END is not None:
        last = min(last, shift_hour(PARTITIONS_END, -1))
    return (first, last) if first <= last else None


def backup_hour_path(key: str) -> str:
    """The backup folder of an hour, relative to ``<backup_root>/raw``."""
    hour = _strict_hour(key)
    return f"date={hour:%Y-%m-%d}/hour={hour:%H}"


def within_partitions(last: str) -> None:
    """Refuse a range ending after the newest partition (with ``BACKFILL_PARTITIONS_END``
    unset: the newest complete hour, which moves with the clock)."""
    newest = hourly_partitions.get_last_partition_key()
    if newest is None or last > newest:
        raise InvalidHourError(
            f"hour {last} is not a partition yet: the newest is {newest or 'none'} "
            + (
                f"({ENV_END}={PARTITIONS_END})"
                if PARTITIONS_END
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
