"""SIGKILL real processes in the shadow write and between any two swaps of a publish.

Each step is a real process with its own Spark and embedded metastore (the suite's session
holds another one); the test reaches the exact crash point through a FIFO (no sleeps) and
SIGKILLs the process group. A publish is one transaction over every table and hour of a
release: whatever swap it dies after, recovery leaves every table on one release.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets import faults
from backfill_assets.generator import generate_backups, land_held_back

pytestmark = pytest.mark.slow

FIRST, LAST, LATE = "2026-11-20T00", "2026-11-20T03", "2026-11-20T02"
TESTS = Path(__file__).resolve().parents[1]
# One script for every step: build a release in-process (the suite's fast path), or
# settle + inspect the ledger and metastore, then optionally publish a release.
SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(TESTS.parent)!r})
import dagster as dg
from backfill_assets.definitions import build_definitions
from backfill_assets.layers.registry import LAYERS
from backfill_assets.publishing import publisher
from backfill_assets.publishing.tables import partition_locations
from backfill_assets.resources.spark import spark_session
from backfill_assets.settings import Settings
from backfill_assets_tests.conftest import execute_release

action, out = sys.argv[1], sys.argv[2]
settings = Settings.from_env()
if action == "build":
    first, last, layers, publish = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6] == "1"
    with dg.DagsterInstance.get() as instance:
        result = execute_release(
            build_definitions(settings), instance, first, last,
            layers=tuple(layers.split(",")), downstream=False, publish=publish,
        )
    json.dump({{"release": result.release_id, "ok": result.success,
               "failures": result.failures}}, open(out, "w"))
    sys.exit(0)
spark = spark_session(settings)
layers = [LAYERS["raw"], LAYERS["transformed"]]
tables = [t for layer in layers for t in layer.tables]
settled = publisher.recover(spark, settings.warehouse_dir)
tops = {{
    f"{{t}}/{{h}}": s[-1].release_id
    for (t, h), s in publisher.history(publisher.ledger(spark, tables)).items() if s
}}
json.dump({{
    "settled": sorted({{e["phase"] for e in settled}}),
    "verify": publisher.verify(spark, tables),
    "tops": tops,
    "locations": {{t: partition_locations(spark, t) for t in tables}},
}}, open(out, "w"))
if action == "publish":
    publisher.publish_release(
        spark, settings.warehouse_dir, sys.argv[3], layers, run_id="fault-test", manifest={{}}
    )
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    generate_backups(
        tmp_path / "backups",
        start=FIRST,
        hours=4,
        clients=2,
        users_per_client=20,
        seed=5,
        workers=1,
        hold_back=[f"{LATE}/2"],
    )
    home = tmp_path / "home"
    home.mkdir()
    return {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }


def step(env: dict[str, str], tmp_path: Path, *args: str, pause_at: str | None = None) -> dict:
    """Run SCRIPT with ``args``; with ``pause_at``, SIGKILL it at that fault point. Returns
    what it wrote (for a killed publish: its inspection, written before it published)."""
    out = tmp_path / "step.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-c", SCRIPT, args[0], str(out), *args[1:]]
    if pause_at is None:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(out.read_text())
    kill_at(command, env, tmp_path, pause_at)
    return json.loads(out.read_text()) if out.exists() else {}


def kill_at(command: list[str], env: dict[str, str], tmp_path: Path, pause_at: str) -> None:
    fifo = tmp_path / "pause.fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    process = subprocess.Popen(
        command,
        env={**env, "BACKFILL_ASSETS_PAUSE_AT": pause_at, "BACKFILL_ASSETS_PAUSE_FIFO": str(fifo)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with open(fifo) as reader:  # blocks until the process reaches the fault point
            assert reader.read() == pause_at
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def test_sigkill_at_every_swap_of_a_release_leaves_every_table_on_one_release(env, tmp_path):
    live = step(env, tmp_path, "build", FIRST, LAST, "raw,transformed", "1")
    assert live["ok"], live["failures"]
    land_held_back(Path(env["BACKUP_ROOT"]))
    # killed in its shadow write: nothing of that run is published
    step(env, tmp_path, "build", LATE, LAST, "raw,transformed", "1", pause_at=faults.SHADOW_WRITE)
    dry = step(env, tmp_path, "build", LATE, LAST, "raw,transformed", "0")
    assert dry["ok"], dry["failures"]
    before = step(env, tmp_path, "inspect")
    assert set(before["tops"].values()) == {live["release"]} and before["verify"] == []
    # raw.payloads, raw.quarantine, transformed.payloads x 2 hours: 6 swaps
    swaps = 6
    for index in range(swaps):
        state = step(env, tmp_path, "publish", dry["release"], pause_at=f"publish.swap.{index}")
        # what the previous kill left was settled as a whole: every table on one release
        assert state["verify"] == [], (index, state["verify"])
        assert state["tops"] == before["tops"], index
        assert state["locations"] == before["locations"], index
        if index:
            assert state["settled"] == ["abort"], index  # the half-done transaction undone
    # killed after the last swap, before the commit: recovery finishes the transaction
    after = step(env, tmp_path, "inspect")
    assert after["settled"] == ["commit"] and after["verify"] == []
    moved = {k for k, v in after["tops"].items() if v == dry["release"]}
    tables = ("raw.payloads", "raw.quarantine", "transformed.payloads")
    assert moved == {f"{t}/{h}" for t in tables for h in ("2026-11-20T02", LAST)}
    assert all(v == live["release"] for k, v in after["tops"].items() if k not in moved)
