"""The CLI submits real Dagster asset backfills and runs Dagster's daemon meanwhile.

Two `backfill-assets backfill` processes start together against one instance and one
embedded metastore: both are recorded as backfills with their runs, the instance's run
queue (one run at a time locally) serializes their runs, both finish, and no process hits
the embedded metastore's one-JVM limit.
"""

import itertools
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets import tags
from backfill_assets.generator import generate_backups
from backfill_assets.publishing.assets import PUBLISH

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "backfill-assets"


def test_two_cli_backfills_are_dagster_backfills_queued_and_both_finish(tmp_path: Path):
    generate_backups(
        tmp_path / "backups",
        start="2026-11-20T00",
        hours=2,
        clients=2,
        users_per_client=10,
        seed=3,
        workers=1,
    )
    env = {
        **os.environ,
        "BACKUP_ROOT": str(tmp_path / "backups"),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    # two layers chained in one backfill that publishes; and a raw-only dry run (the stack
    # test runs a release of every layer through the daemon)
    first = ["--from", "2026-11-20T00", "--to", "2026-11-20T01", "--layers", "raw,transformed"]
    second = ["--from", "2026-11-20T01", "--to", "2026-11-20T01", "--layers", "raw"]
    commands = [
        ["backfill", *first, "--no-downstream", "--reason", "first"],
        ["backfill", *second, "--no-downstream", "--reason", "second", "--dry-run"],
    ]
    processes = [
        subprocess.Popen(
            [str(BIN), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for args in commands
    ]
    try:
        outputs = [p.communicate(timeout=1500)[0] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-4000:]
        assert "Derby" not in output and "SessionHiveMetaStoreClient" not in output
        assert "estimate: " in output  # printed before launching (nothing measured yet)
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        backfills = instance.get_backfills()
        assert len(backfills) == 2
        runs = {
            b.backfill_id: instance.get_runs(
                filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: b.backfill_id})
            )
            for b in backfills
        }
        for backfill in backfills:
            assert backfill.status.value in ("COMPLETED", "COMPLETED_SUCCESS")
            assert backfill.backfill_id in "".join(outputs)  # the CLI named its backfill
            assert runs[backfill.backfill_id]
            assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs[backfill.backfill_id])
        # the two-layer release built raw and transformed, then ran its publish step
        chained = next(b for b in backfills if "first" in str(b.tags.get(tags.REASON)))
        selected = [
            sorted(k.to_user_string() for k in r.asset_selection) for r in runs[chained.backfill_id]
        ]
        assert ["release/publish"] in selected
        assert any("shadow/transformed_payloads_candidate" in s for s in selected)
        dry = next(b for b in backfills if b is not chained)
        assert dry.tags.get(tags.MODE) == "dry_run"
        # built and checked, nothing published
        assert all(PUBLISH not in r.asset_selection for r in runs[dry.backfill_id])
        # the queue ran one run at a time: no two runs of the instance overlapped
        spans = sorted(
            (instance.get_run_stats(r.run_id).start_time, instance.get_run_stats(r.run_id).end_time)
            for rs in runs.values()
            for r in rs
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # the daemons (and code servers) the commands started are gone with them
    assert processes_with(f"DAGSTER_HOME={tmp_path / 'home'}") == {}


def processes_with(setting: str) -> dict[int, str]:
    """Live processes whose environment holds ``setting`` (``KEY=value``): pid -> process
    group, state and command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if setting.encode() in environ:
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except OSError:
                continue
            found[int(proc.name)] = f"state {stat[0]} ppid {stat[1]} pgid {stat[2]}: {command}"
    return found
