"""A run whose process was SIGKILLed is marked failed, so its hours are not blocked forever."""

import os
import sys
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults
from backfill_assets.release.orphans import fail_orphaned_runs, worker_pid
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import importable, kill_at_fault

pytestmark = pytest.mark.slow

SCRIPT = """
import dagster as dg
from backfill_assets.definitions import build_definitions
from backfill_assets.settings import Settings
from backfill_assets_tests.helpers.releases import execute_release
with dg.DagsterInstance.get() as instance:
    execute_release(build_definitions(Settings.from_env()), instance,
                    "2026-11-20T00", "2026-11-20T01", downstream=False)
"""


def test_a_killed_run_is_marked_failed_naming_its_process(tmp_path: Path):
    generate_backups(
        tmp_path / "backups", start="2026-11-20T00", hours=2, clients=1, users_per_client=5,
        seed=1, workers=1,
    )  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(home),
    }
    pid = kill_at_fault(
        [sys.executable, "-c", SCRIPT],
        importable(env),
        tmp_path / "pause.fifo",
        faults.SHADOW_WRITE,
    )

    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.STARTED  # nobody reported its end
        assert worker_pid(instance, run.run_id) == pid
        assert fail_orphaned_runs(instance) == [run.run_id]
        failed = instance.get_run_by_id(run.run_id)
        assert failed.status == dg.DagsterRunStatus.FAILURE
        messages = [r.message for r in instance.all_logs(run.run_id)]
        assert any(f"pid {pid}" in m and "is gone" in m for m in messages)
        assert fail_orphaned_runs(instance) == []  # once
