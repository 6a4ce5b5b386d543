"""Hour keys: one strict format shared by partitions, tables, paths and the CLI."""

import os
import subprocess
import sys

import dagster as dg
import pytest

from backfill_assets.core.hours import (
    InvalidHourError,
    backup_hour_path,
    hour_range,
    newest_partition,
    parse_hour,
    shift_hour,
)
from backfill_assets.defs.partitions import hourly_partitions_def
from backfill_assets.settings import PARTITIONS_END_ENV as ENV_END
from backfill_assets.settings import PARTITIONS_START_ENV as ENV_START
from backfill_assets.settings import SettingsError, partition_span


def test_partition_keys_are_table_hour_values():
    keys = hourly_partitions_def().get_partition_keys_in_range(
        dg.PartitionKeyRange("2026-11-20T22", "2026-11-21T01")
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
        "2026-11-20T00\n",  # a trailing newline ($ would accept it)
        "2026-11-20T\u0660\u0663",  # Arabic-Indic digits (\\d would accept them)
    ],
)
def test_invalid_hours_are_rejected(bad: str):
    with pytest.raises(InvalidHourError):
        parse_hour(bad)


def test_empty_range_is_an_error():
    with pytest.raises(InvalidHourError, match="before"):
        hour_range("2026-11-20T05", "2026-11-20T04")


def test_span_from_the_environment_is_validated_and_named():
    assert partition_span({}) == ("2026-01-01T00", None)
    span = {ENV_START: "2026-11-20T00", ENV_END: "2026-11-21T00"}
    assert partition_span(span) == ("2026-11-20T00", "2026-11-21T00")
    with pytest.raises(SettingsError, match=ENV_START):
        partition_span({ENV_START: "2026-11-20"})
    with pytest.raises(SettingsError, match=f"{ENV_END}=2026-11-20T00 must be after"):
        partition_span({ENV_START: "2026-11-20T00", ENV_END: "2026-11-20T00"})


def test_the_newest_partition_is_dagsters(monkeypatch):
    """Computed without Dagster, the newest partition is the one Dagster's definition of the
    same span ends with: the hour before the end, else the newest complete hour."""
    monkeypatch.delenv(ENV_END, raising=False)
    monkeypatch.setenv(ENV_START, "2026-01-01T00")
    assert newest_partition() == hourly_partitions_def().get_last_partition_key()
    monkeypatch.setenv(ENV_END, "2026-11-21T00")
    assert newest_partition() == hourly_partitions_def().get_last_partition_key()
    assert newest_partition() == "2026-11-20T23"


def test_a_configured_span_is_what_the_code_location_partitions(tmp_path):
    """In a process of its own (the span is read when the code location loads): the
    assets have exactly the span's hours, a range outside it is refused naming the
    variable, windows still reach across its edges."""
    code = """
import dagster as dg
from backfill_assets.definitions import defs
from backfill_assets.core.windows import session_hours_touching
from backfill_assets.core.hours import InvalidHourError, hour_range, shift_hour
keys = defs().resolve_assets_def(dg.AssetKey(["shadow", "raw_payloads_candidate"])).partitions_def
print(len(keys.get_partition_keys()), keys.get_first_partition_key(), keys.get_last_partition_key())
print(session_hours_touching("2026-11-20T00", "2026-11-20T01"), shift_hour("2026-11-20T00", -3))
for first, last in (("2026-11-19T23", "2026-11-20T01"), ("2026-11-20T22", "2026-11-21T00")):
    try:
        hour_range(first, last)
    except InvalidHourError as exc:
        print(exc)
"""
    env = {
        **os.environ,
        ENV_START: "2026-11-20T00",
        ENV_END: "2026-11-21T00",
        "DAGSTER_HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "24 2026-11-20T00 2026-11-20T23"
    assert out[1] == "('2026-11-20T00', '2026-11-20T04') 2026-11-19T21"
    assert f"before the first partition 2026-11-20T00 ({ENV_START})" in out[2]
    assert f"the partitions end before 2026-11-21T00: {ENV_END}" in out[3]
