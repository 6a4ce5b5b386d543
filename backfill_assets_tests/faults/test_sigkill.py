"""SIGKILL real processes between any two swaps of a publish (a kill inside a shadow write:
sensors/test_orphans.py).

Each step is a real process with its own Spark and embedded metastore (the suite's session
holds another one); the test reaches the exact crash point through a FIFO (no sleeps) and
SIGKILLs the process group. A publish is one transaction over every table and hour of a
release: whatever swap it dies after, recovery leaves every table on one release.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets.core import faults
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import importable, kill_at_fault

pytestmark = pytest.mark.slow

FIRST, LAST, LATE = "2026-11-20T00", "2026-11-20T01", "2026-11-20T01"
# One script for every step: prepare (a live release, late files, a dry run, built
# in-process as the suite's fast path; then maybe publish the dry run), or settle + inspect
# the ledger and metastore and then maybe publish a release. (A kill inside a shadow write
# is sensors/test_orphans.py.)
SCRIPT = """
import json, os, sys
from pathlib import Path
import dagster as dg
from backfill_assets.definitions import build_definitions
from backfill_assets_dev.generator import land_held_back
from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import publisher
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.core.spark.session import spark_session
from backfill_assets.settings import Settings
from backfill_assets_tests.helpers.releases import execute_release

action, out = sys.argv[1], sys.argv[2]
settings = Settings.from_env()
layers = [LAYERS["raw"], LAYERS["transformed"]]
tables = [t for layer in layers for t in layer.tables]


def build(instance, first, last, publish):
    result = execute_release(
        build_definitions(settings), instance, first, last,
        layers=("raw", "transformed"), downstream=False, publish=publish,
    )
    return {"release": result.release_id, "ok": result.success, "failures": result.failures}


def inspect(spark):
    settled = publisher.recover(spark, settings.warehouse_dir, tables)
    tops = {
        f"{t}/{h}": s[-1].release_id
        for (t, h), s in publisher.history(publisher.ledger(spark, tables)).items() if s
    }
    return {
        "settled": sorted({e["phase"] for e in settled}),
        "verify": publisher.verify(spark, tables),
        "tops": tops,
        "locations": {t: partition_locations(spark, t) for t in tables},
    }


if action == "prepare":  # a live release, late files land, a dry run of the late hour
    first, last, late = sys.argv[3:6]
    with dg.DagsterInstance.get() as instance:
        live = build(instance, first, last, True)
        land_held_back(Path(settings.backup_root))
        dry = build(instance, late, late, False)
    spark = spark_session(settings)
    json.dump({"live": live, "dry": dry, "before": inspect(spark)}, open(out, "w"))
    if len(sys.argv) > 6:  # then publish the dry run, pausing (to be killed) at a swap
        os.environ["BACKFILL_ASSETS_PAUSE_AT"] = sys.argv[6]
        publisher.publish_release(
            spark, settings.warehouse_dir, dry["release"], layers, run_id="fault-test",
            manifest={},
        )
else:  # settle and inspect; then maybe publish a release
    spark = spark_session(settings)
    json.dump(inspect(spark), open(out, "w"))
    if action == "publish":
        publisher.publish_release(
            spark, settings.warehouse_dir, sys.argv[3], layers, run_id="fault-test", manifest={}
        )
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    generate_backups(
        tmp_path / "backups",
        start=FIRST,
        hours=2,
        clients=2,
        users_per_client=10,
        seed=5,
        workers=1,
        hold_back=[f"{LATE}/2"],
    )
    home = tmp_path / "home"
    home.mkdir()
    # the steps import the suite's helpers (``execute_release``)
    return importable(
        {
            **os.environ,
            "BACKUP_ROOT": str(tmp_path / "backups"),
            "DATA_ROOT": str(tmp_path / "data"),
            "DAGSTER_HOME": str(home),
            "DAGSTER_DISABLE_TELEMETRY": "1",
        }
    )


def step(env: dict[str, str], tmp_path: Path, *args: str, pause_at: str | None = None) -> dict:
    """Run SCRIPT with ``args``; with ``pause_at``, SIGKILL it at that fault point of its
    publish. Returns what it wrote before it published."""
    out = tmp_path / "step.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-c", SCRIPT, args[0], str(out), *args[1:]]
    if pause_at is None:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        kill_at([*command, pause_at] if args[0] == "prepare" else command, env, tmp_path, pause_at)
    return json.loads(out.read_text())


def kill_at(command: list[str], env: dict[str, str], tmp_path: Path, pause_at: str) -> None:
    # prepare arms the pause itself, once its releases are built
    kill_at_fault(command, env, tmp_path / "pause.fifo", pause_at, arm=command[3] != "prepare")


def test_sigkill_at_every_swap_of_a_release_leaves_every_table_on_one_release(env, tmp_path):
    # raw.payloads, raw.quarantine and transformed.payloads of the late hour: 3 swaps; the
    # first process builds the releases and is killed at swap 0 of publishing the dry run
    tables = ("raw.payloads", "raw.quarantine", "transformed.payloads")
    prepared = step(
        env, tmp_path, "prepare", FIRST, LAST, LATE, pause_at=f"{faults.PUBLISH_SWAP}.0"
    )
    live, dry, before = prepared["live"], prepared["dry"], prepared["before"]
    assert live["ok"] and dry["ok"], (live["failures"], dry["failures"])
    assert set(before["tops"].values()) == {live["release"]} and before["verify"] == []
    for index in range(1, len(tables)):
        state = step(
            env, tmp_path, "publish", dry["release"], pause_at=f"{faults.PUBLISH_SWAP}.{index}"
        )
        # what the previous kill left was settled as a whole: every table on one release
        assert state["settled"] == ["abort"], index  # the half-done transaction undone
        assert state["verify"] == [], (index, state["verify"])
        assert state["tops"] == before["tops"], index
        assert state["locations"] == before["locations"], index
    # killed after the last swap, before the commit: recovery finishes the transaction
    after = step(env, tmp_path, "inspect")
    assert after["settled"] == ["commit"] and after["verify"] == []
    moved = {k for k, v in after["tops"].items() if v == dry["release"]}
    assert moved == {f"{t}/{LATE}" for t in tables}
    assert all(v == live["release"] for k, v in after["tops"].items() if k not in moved)
