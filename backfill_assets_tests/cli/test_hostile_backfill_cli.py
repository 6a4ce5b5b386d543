"""A real Dagster backfill (the CLI, its daemon, the run worker's Spark; every layer, the
default partitions), under a 9 GiB memory cap, over an 8-hour tree with one hostile case
per folder (``helpers/hostile.py``): the hours of two 20 GiB decompression bombs (one
line; billions of empty lines) and of the links and FIFO are held back, each naming its
file (and the limit) in the CLI's output, and so are the hours of three hostile manifests
(nested 100,000 deep, 1e400 bytes, 10^30 records), which ``reconcile`` names too; no
process is killed for memory; the other hours are published (published + quarantined =
manifest records), the 300 MB line quarantined with its length, the 2,000-file folder
published whole; nothing outside the tree is opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.reconcile.findings import describe_hours
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.hostile import (
    BOMB_HOUR,
    CLEAN_HOUR,
    HOSTILE_PART,
    HOURS,
    LINKS_HOUR,
    LONG_HOUR,
    LONG_LINE_BYTES,
    SMALL_FILES,
    add_to_manifest,
    entry,
    hostile_tree,
    zstd_bomb,
)
from backfill_assets_tests.helpers.processes import cli, memory_cap

pytestmark = pytest.mark.slow


# Hostile manifests in three more hours (a client folder of each): each holds its hour
# back, in one line naming the manifest; nothing else of the release fails.
HOSTILE_MANIFESTS = {
    "2026-11-20T04": ('{"client_id": 1, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", None),
    "2026-11-20T05": (None, ("bytes", "1e400")),
    "2026-11-20T06": (None, ("records", "1" + "0" * 30)),
}


def hostile_manifests(root: Path) -> None:
    """Replace the manifest of the first client folder of each ``HOSTILE_MANIFESTS`` hour."""
    for hour, (text, change) in HOSTILE_MANIFESTS.items():
        hour_folder = root / "raw" / f"date={hour[:10]}" / f"hour={hour[11:]}"
        manifest = sorted(hour_folder.glob("client_id=*"))[0] / "_MANIFEST.json"
        if change is not None:
            body = json.loads(manifest.read_text())
            key, value = change
            (body["files"][0] if key == "bytes" else body)[key] = "__HOSTILE__"
            text = json.dumps(body).replace('"__HOSTILE__"', value)
        manifest.write_text(text)


# Decompression bombs of 20 GiB (one zstd frame of about 640 kB each, their manifest digest
# right): one long line (hour 00), and billions of empty lines (hour 07). The release runs
# under a 9 GiB memory cap: the per-file limit stops each as its output passes 512 MiB.
BIG_BOMB_BYTES = 20 * 2**30
EMPTY_LINES_HOUR = "2026-11-20T07"
MEMORY_CAP_BYTES = 9 * 2**30
LAST_HOUR = EMPTY_LINES_HOUR


def empty_lines_bomb(root: Path) -> str:
    """A 20 GiB frame of newlines in the first client folder of ``EMPTY_LINES_HOUR``."""
    hour_folder = root / "raw" / f"date={EMPTY_LINES_HOUR[:10]}" / f"hour={EMPTY_LINES_HOUR[11:]}"
    folder = sorted(hour_folder.glob("client_id=*"))[0]
    bomb = zstd_bomb(BIG_BOMB_BYTES, fill=b"\n")
    (folder / HOSTILE_PART).write_bytes(bomb)
    add_to_manifest(folder, [entry(HOSTILE_PART, bomb, 1)])
    return str((folder / HOSTILE_PART).relative_to(root))


def test_a_backfill_holds_back_the_hostile_hours_and_publishes_the_rest(tmp_path: Path):
    root = tmp_path / "backups"
    generate_backups(
        root, start=HOURS[0], hours=8, clients=2, users_per_client=25, seed=11, workers=1
    )
    found = hostile_tree(root, tmp_path / "outside", bomb_bytes=BIG_BOMB_BYTES)
    hostile_manifests(root)
    empty_lines = empty_lines_bomb(root)
    env = {
        **os.environ,
        "BACKUP_ROOT": str(root),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    # the operator's command: every downstream layer, the default partitions
    command = ["backfill", "--from", HOURS[0], "--to", LAST_HOUR]
    command += ["--reason", "hostile files"]
    try:
        with memory_cap(MEMORY_CAP_BYTES, "hostile-release") as cap:
            process = cli(
                env,
                *command,
                timeout=1500,
                preexec_fn=cap.join,  # the command, its daemon, code server, runs, JVMs
            )
        assert not any(f.opened for f in found.fifos)  # neither FIFO was ever opened
    finally:
        found.close()
    # no process of the release was killed for memory; what they used at most together
    assert cap.oom_kills == 0, cap
    assert 0 < cap.peak < MEMORY_CAP_BYTES
    output = process.stdout + process.stderr
    assert process.returncode != 0, output[-4000:]
    assert "Traceback" not in output and "Py4J" not in output, output[-4000:]
    held = [line for line in output.splitlines() if "held back" in line]
    bomb_folder, bomb_name = found.bomb.rsplit("/", 1)
    assert any(
        f"raw {BOMB_HOUR}" in line
        and f"{bomb_folder}: 1 unreadable/corrupt file(s): {bomb_name}: file_refused: "
        "decompresses past the limit of 536870912 bytes (BACKFILL_MAX_PART_EXPANDED_BYTES"
        in line
        for line in held
    ), output[-4000:]
    empty_folder, empty_name = empty_lines.rsplit("/", 1)
    assert any(
        f"raw {EMPTY_LINES_HOUR}" in line
        and f"{empty_folder}: 1 unreadable/corrupt file(s): {empty_name}: file_refused: "
        "decompresses past the limit of 536870912 bytes (BACKFILL_MAX_PART_EXPANDED_BYTES"
        in line
        for line in held
    ), output[-4000:]
    assert any(
        f"raw {LINKS_HOUR}" in line and f"{found.outside_link}: a symbolic link" in line
        for line in held
    ), output[-4000:]
    assert not any(f"raw {h}" in line for line in held for h in (CLEAN_HOUR, LONG_HOUR))
    for hour in HOSTILE_MANIFESTS:  # each named with its manifest, no traceback
        assert any(hour in line and "/_MANIFEST.json" in line for line in output.splitlines()), (
            hour,
            output[-4000:],
        )
    # reconcile names those folders too, instead of crashing
    reconciled = cli(env, "reconcile", "--from", HOURS[0], "--to", LAST_HOUR, timeout=600)
    assert reconciled.returncode == 1 and "Traceback" not in reconciled.stderr
    # its health line counts the held-back hours as not published, never as healthy
    [health] = [x for x in reconciled.stdout.splitlines() if x.strip().startswith("health raw:")]
    held_hours = describe_hours({BOMB_HOUR, LINKS_HOUR, EMPTY_LINES_HOUR, *HOSTILE_MANIFESTS})
    published_share = "25.0% of 8 hour(s) published and matching"  # the clean and long hours
    assert f"{published_share}; 6 of 8 hour(s) not published: {held_hours};" in health, health
    for hour, detail in zip(
        HOSTILE_MANIFESTS, ("nested too deep", "bytes must be", "records must be"), strict=True
    ):
        folder = f"hour={hour[11:]}/client_id="
        assert any(
            folder in line and "/_MANIFEST.json" in line and detail in line
            for line in reconciled.stdout.splitlines()
        ), (hour, reconciled.stdout[-3000:])
    assert found.outside_file.stat().st_atime == found.outside_atime

    published = _published(tmp_path / "data", env)
    inventory = take_inventory(LocalBackupStore(root=str(root)), list(HOURS))
    assert set(published["payloads"]) == {CLEAN_HOUR, LONG_HOUR}  # none of the hostile hours
    for hour in (CLEAN_HOUR, LONG_HOUR):
        quarantined = published["quarantined"].get(hour, 0)
        assert published["payloads"][hour] + quarantined == inventory[hour].expected_records
    assert published["long"] == [[2, f"line_too_long: {LONG_LINE_BYTES} bytes"]]
    assert published["small"] == SMALL_FILES
    # downstream: the transformed hours of the published raw hours are published too; none
    # of the held-back hours is (the session hours reading them wait for them)
    assert set(published["transformed"]) == {CLEAN_HOUR, LONG_HOUR}
    assert not set(published["aggregated"]) & {BOMB_HOUR, LINKS_HOUR}


def _published(data: Path, env: dict[str, str]) -> dict:
    """What the release published, read in a Spark session of its own (the metastore
    serves one process at a time, and the suite's session has another)."""
    code = """
import json
from pyspark.sql import functions as F
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings

spark = spark_session(Settings.from_env())
def per_hour(frame):
    return {r["hour"]: r["count"] for r in frame.groupBy("hour").count().collect()}
quarantine = spark.table("raw.quarantine")
long = quarantine.where(F.col("reason").startswith("line_too_long"))
print(json.dumps({
    "payloads": per_hour(spark.table("raw.payloads")),
    "quarantined": per_hour(quarantine.where(F.col("line_number").isNotNull())),
    "long": [[r.line_number, r.reason.split(",")[0]] for r in long.collect()],
    "small": spark.table("raw.payloads").where(F.col("client_id") == 3).count(),
    "transformed": per_hour(spark.table("transformed.payloads")),
    "aggregated": per_hour(spark.table("aggregated.sessions")),
}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])
