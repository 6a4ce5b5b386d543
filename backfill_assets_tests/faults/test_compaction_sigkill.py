"""SIGKILL a real process compacting an audit table, between its seal and its swap.

Each step is a process with its own Spark and embedded metastore (the suite's session holds
another one); the test reaches the crash point through a FIFO (no sleeps) and SIGKILLs the
process group. The table stays where it was, whole, and the next compaction completes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backfill_assets import faults
from backfill_assets_tests.conftest import kill_at_fault

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
SCRIPT = f"""
import json, sys
from collections import Counter
sys.path.insert(0, {str(TESTS.parent)!r})
from backfill_assets.publishing import audit, compaction
from backfill_assets.publishing.tables import table_location
from backfill_assets.resources.spark import spark_session
from backfill_assets.settings import Settings
from backfill_assets_tests.publishing.test_compaction import TABLE, rows

action, out = sys.argv[1], sys.argv[2]
settings = Settings.from_env()
spark = spark_session(settings)


def state():
    where = table_location(spark, TABLE)
    seen = Counter(r.run_id for r in audit.read(spark, TABLE).select("run_id").collect())
    return {{"location": where, "seen": seen, "sealed": audit.read_seal(spark, where) is not None}}


if action == "compact":  # three batches, then a compaction (killed after its seal)
    for i in range(3):
        audit.append(spark, settings.warehouse_dir, TABLE, rows(f"b{{i}}"))
    json.dump(state(), open(out, "w"))
    compaction.compact(spark, settings.warehouse_dir, TABLE, min_files=2)
else:  # after the kill: the table as found; a compaction; an append
    found = state()
    done = compaction.compact(spark, settings.warehouse_dir, TABLE, min_files=2)
    audit.append(spark, settings.warehouse_dir, TABLE, rows("after"))
    json.dump({{"found": found, "outcome": done.outcome, "then": state()}}, open(out, "w"))
"""


def run(env: dict[str, str], tmp_path: Path, action: str, pause_at: str | None = None) -> dict:
    out = tmp_path / f"{action}.json"
    command = [sys.executable, "-c", SCRIPT, action, str(out)]
    if pause_at is None:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(out.read_text())
    kill_at_fault(command, env, tmp_path / "pause.fifo", pause_at)
    return json.loads(out.read_text())


def test_sigkill_between_seal_and_swap_leaves_the_table_whole(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    before = run(env, tmp_path, "compact", pause_at=faults.AUDIT_COMPACTION)
    assert before["seen"] == {"b0": 2, "b1": 2, "b2": 2} and not before["sealed"]

    after = run(env, tmp_path, "inspect")
    found = after["found"]
    # killed after the seal: the table has not moved and reads every row once
    assert found["location"] == before["location"] and found["sealed"]
    assert found["seen"] == before["seen"]
    # the next compaction completes; appends go on
    assert after["outcome"] == "compacted"
    assert after["then"]["location"] != before["location"]
    assert after["then"]["seen"] == {"b0": 2, "b1": 2, "b2": 2, "after": 2}
    assert not after["then"]["sealed"]
