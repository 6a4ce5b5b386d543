"""SIGTERM of `backfill-assets backfill` in the middle of its release (its first run held
inside its shadow write by a fault checkpoint, so the signal arrives mid-release whatever
the machine's load): the command stops the daemon and the code server it started, and with
them the run, says in one line what it left in the instance, and exits; no process of its
instance is left (the process table). `cancel` then ends the release; nothing of it was
published."""

import os
import signal
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults, tags
from backfill_assets.core.warehouse import audit
from backfill_assets.release.instance import get_instance
from backfill_assets.settings import Settings
from backfill_assets_dev.generator import generate_backups
from backfill_assets_tests.helpers.processes import cli, cli_at_fault, cli_env, processes_with

pytestmark = pytest.mark.slow

DEADLINE_SECONDS = 600


def test_sigterm_mid_release_leaves_no_process_and_says_what_is_left(tmp_path: Path):
    generate_backups(
        tmp_path / "backups", start="2026-11-20T00", hours=2, clients=1, users_per_client=10,
        seed=3, workers=1,
    )  # fmt: skip
    env = cli_env(tmp_path, tmp_path / "backups")
    command = ["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T01"]
    with cli_at_fault(
        [*command, "--reason", "to interrupt"],
        env,
        tmp_path / "pause.fifo",
        faults.SHADOW_WRITE,
        stderr=subprocess.PIPE,
    ) as release:
        os.kill(release.pid, signal.SIGTERM)  # the command alone, as `kill PID` does
        out, err = release.communicate(timeout=DEADLINE_SECONDS)
    assert release.returncode == 128 + signal.SIGTERM, out[-2000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # nothing of its instance is left: daemon, code server, run worker, Spark JVM
    assert processes_with(f"DAGSTER_HOME={env['DAGSTER_HOME']}") == {}
    settings = Settings.from_env(env)
    instance = get_instance(settings)
    [backfill] = instance.get_backfills()
    [line] = [x for x in err.splitlines() if x.startswith("interrupted: ")]
    assert f"runs of release {backfill.backfill_id}" in line
    assert f"backfill-assets cancel --backfill {backfill.backfill_id}" in line
    assert audit.rows(settings.warehouse_dir, audit.PUBLICATIONS) == []  # nothing published
    # `cancel` finishes the job the line names
    cancelled = cli(env, "cancel", "--backfill", backfill.backfill_id, "--reason", "interrupted")
    assert cancelled.returncode == 0, cancelled.output[-3000:]
    assert instance.get_backfill(backfill.backfill_id).status.value == "CANCELED"
    runs = instance.get_runs(
        filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill.backfill_id})
    )
    assert runs and all(
        r.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE) for r in runs
    )
    assert processes_with(f"DAGSTER_HOME={env['DAGSTER_HOME']}") == {}
