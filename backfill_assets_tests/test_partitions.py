"""Hour keys: one strict format shared by partitions, tables, paths and the CLI."""

import pytest

from backfill_assets.partitions import (
    InvalidHourError,
    backup_hour_path,
    hour_range,
    hourly_partitions,
    parse_hour,
    shift_hour,
)


def test_partition_keys_are_table_hour_values():
    keys = hourly_partitions.get_partition_keys_in_range(
        __import__("dagster").PartitionKeyRange("2026-11-20T22", "2026-11-21T01")
    )
    assert keys == hour_range("2026-11-20T22", "2026-11-21T01")
    assert keys == ["2026-11-20T22", "2026-11-20T23", "2026-11-21T00", "2026-11-21T01"]


def test_shift_and_backup_path():
    assert shift_hour("2026-11-20T23", 2) == "2026-11-21T01"
    assert backup_hour_path("2026-11-20T03") == "date=2026-11-20/hour=03"


@pytest.mark.parametrize(
    "bad",
    [
        "2026-11-20",
        "2026-11-20T3",
        "2026-11-20T24",
        "2026-13-01T00",
        "2026-11-20T00'; DROP",
        "../2026-11-20T00",
        "2025-12-31T23",
        " 2026-11-20T00",
    ],
)
def test_invalid_hours_are_rejected(bad: str):
    with pytest.raises(InvalidHourError):
        parse_hour(bad)


def test_empty_range_is_an_error():
    with pytest.raises(InvalidHourError, match="before"):
        hour_range("2026-11-20T05", "2026-11-20T04")
