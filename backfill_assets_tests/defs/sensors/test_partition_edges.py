"""The edges of the partition space are normal: on a fresh tree whose first hour is the first
partition (``BACKFILL_PARTITIONS_START``, read when the code loads: a process of its own),
``reconcile`` and a sensor tick list the findings, with no traceback, though the sessions'
windows reach hours before the first partition (and after the newest backup hour)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import SENSOR_TICK

FIRST = "2026-11-20T00"
# A sensor tick as the daemon evaluates it: the sensor itself, with a real instance, its
# releases submitted through GraphQL (no daemon runs here: they stay requested).
TICK = (
    SENSOR_TICK
    + """
    hours = sorted({
        p.partition_key
        for b in instance.get_backfills()
        for p in b.asset_backfill_data.target_subset.iterate_asset_partitions()
        if p.partition_key
    })
    json.dump({"skip": result.skip_reason.skip_message, "hours": hours}, sys.stdout)
"""
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    generate_backups(
        tmp_path / "backups",
        start=FIRST,
        hours=4,
        clients=2,
        users_per_client=10,
        seed=5,
        workers=1,
    )
    (tmp_path / "home").mkdir()
    return {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "BACKFILL_PARTITIONS_START": FIRST,
    }


def test_reconcile_at_the_first_partition_lists_findings_without_a_traceback(env):
    done = subprocess.run(
        [sys.executable, "-m", "backfill_assets.cli.main", "reconcile", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr and "InvalidHourError" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr[-2000:]  # documented: 1 when a backfill is due
    result = json.loads(done.stdout)
    requests = result["requests"]
    assert requests and all(r["first"] >= FIRST for r in requests)
    sessions = next(r for r in requests if r["layer"] == "aggregated")
    assert all(h >= FIRST for h in sessions["allow_missing_hours"])  # no hour before the first
    # nothing is published here: no layer is healthy, every hour of the window is named
    window = result["window"]["hours"]
    for layer, health in result["health"].items():
        assert health["completeness"] == 0.0 and health["healthy_hours"] == 0, layer
        assert health["unpublished_hours"] == window == len(health["unpublished"]), layer


def test_a_sensor_tick_at_the_first_partition_requests_releases_inside_the_partitions(env):
    done = subprocess.run(
        [sys.executable, "-c", TICK], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    tick = json.loads(done.stdout)
    assert "submitted release(s)" in tick["skip"], tick
    assert tick["hours"] and tick["hours"][0] == FIRST
