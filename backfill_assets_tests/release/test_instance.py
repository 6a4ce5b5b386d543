"""Commands started together on a fresh DAGSTER_HOME all open the same instance."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
from backfill_assets.release.instance import get_instance
from backfill_assets.settings import Settings
instance = get_instance(Settings.from_env())
print(type(instance.run_coordinator).__name__, len(instance.get_runs()))
"""


def test_commands_started_together_on_a_fresh_home_all_open_it(tmp_path: Path):
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
        # the project's dagster.yaml (its run queue), never a partially copied file
        assert output.strip().splitlines()[-1] == "QueuedRunCoordinator 0", output[-3000:]
