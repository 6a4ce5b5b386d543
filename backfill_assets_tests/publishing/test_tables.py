"""Values that reach SQL or paths are validated: no injection through keys or paths."""

import dagster as dg
import pytest

from backfill_assets.partitions import InvalidHourError
from backfill_assets.publishing import tables


def test_table_names_come_from_two_part_asset_keys():
    assert tables.table_name(dg.AssetKey(["raw", "payloads"])) == "raw.payloads"
    with pytest.raises(tables.UnsafeValueError):
        tables.table_name(dg.AssetKey(["raw", "payloads; drop table x"]))
    with pytest.raises(tables.UnsafeValueError):
        tables.table_name(dg.AssetKey(["payloads"]))


def test_partition_spec_accepts_only_valid_hours_and_run_ids():
    assert tables.partition_spec("2026-11-20T03") == "hour='2026-11-20T03'"
    assert tables.partition_spec("2026-11-20T03", "abc-123") == (
        "hour='2026-11-20T03', version='abc-123'"
    )
    with pytest.raises(InvalidHourError):
        tables.partition_spec("2026-11-20T03' OR '1'='1")
    with pytest.raises(tables.UnsafeValueError):
        tables.partition_spec("2026-11-20T03", "x' OR 'y")


@pytest.mark.parametrize("bad", ["/data/it's", "/data/../etc", "/data/a b", "/d/x;drop"])
def test_locations_are_validated(bad: str):
    with pytest.raises(tables.UnsafeValueError):
        tables.location(bad)
