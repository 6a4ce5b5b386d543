"""The newest hours of a tree, repaired as an operator does, with the partitions as shipped
(up to now): a real `backfill-assets backfill`, then the late hours land and the
reconciliation sensor's release (a real Dagster backfill run by the daemon) rebuilds them.

Session hours whose window reaches past the newest backup hour are built from what exists
and published *provisional* (the metadata and the report say so); once the later hours land,
the sensor's release rebuilds them and they become final. A session hour whose window reads
an hour that has backups but is not published (the newest hours, left to the live pipeline
by the sensor's grace period) is held back, naming that hour; the rest publishes. Last, an
operator repairs those newest hours with a dry run and its `publish`: the same treatment, and
the held-back hour becomes final.
"""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets import daemon, launch
from backfill_assets.definitions import build_definitions
from backfill_assets.partitions import ENV_END, hours_between
from backfill_assets.publishing.publisher import PROVISIONAL
from backfill_assets.publishing.tables import table_key
from backfill_assets.resources.backup_store import LocalBackupStore
from backfill_assets.sensors.reconciliation import SENSOR_NAME
from backfill_assets.sensors.state import metadata_value
from backfill_assets.settings import Settings
from backfill_assets_dev.generator import generate_backups, land_held_back

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent / "backfill-assets"
FIRST, NEWEST = "2026-11-20T00", "2026-11-20T03"
LATE = hours_between("2026-11-20T04", "2026-11-20T08")  # the backup tool's outage
SESSIONS = table_key("aggregated.sessions")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN), *args], env=env, capture_output=True, text=True, timeout=1200, check=False
    )


def latest(instance: dg.DagsterInstance, key: dg.AssetKey, hours: list[str]) -> dict[str, dict]:
    """hour -> metadata of the latest materialization of ``key`` there."""
    found = {}
    for hour in hours:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[hour]), limit=1
        )
        if result.records:
            found[hour] = result.records[0].asset_materialization.metadata
    return found


def backfill_id_of(done: subprocess.CompletedProcess) -> str:
    return next(
        line.split(":")[0].split()[-1]
        for line in done.stdout.splitlines()
        if line.startswith("submitted ")
    )


def provisional(instance: dg.DagsterInstance, hours: list[str]) -> dict[str, str]:
    return {
        h: str(metadata_value(meta, PROVISIONAL) or "")
        for h, meta in latest(instance, SESSIONS, hours).items()
    }


def test_the_newest_hours_publish_and_their_provisional_sessions_become_final(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    backups, home = tmp_path / "backups", tmp_path / "home"
    generate_backups(
        backups,
        start=FIRST,
        hours=9,
        clients=2,
        users_per_client=10,
        seed=5,
        workers=1,
        hold_back=LATE,
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != ENV_END},  # partitions up to now
        "BACKUP_ROOT": str(backups),
        "DATA_ROOT": str(tmp_path / "data"),
        "DAGSTER_HOME": str(home),
        "BACKFILL_RECONCILE_SENSOR": "off",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    # the operator's default: raw and everything downstream, published
    done = cli(env, "backfill", "--from", FIRST, "--to", NEWEST, "--reason", "INC-9 bad deploy")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    backfill_id = backfill_id_of(done)
    session_hours = hours_between("2026-11-19T21", "2026-11-20T06")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for table in ("raw.payloads", "transformed.payloads"):
            published = latest(instance, table_key(table), hours_between(FIRST, NEWEST))
            assert sorted(published) == hours_between(FIRST, NEWEST), table
        notes = provisional(instance, session_hours)
        assert sorted(notes) == session_hours  # every session hour published
        # a window that reaches past 03 (hours 01..06) had no data there yet
        assert {h for h, note in notes.items() if note} == set(session_hours[4:])
        assert "2026-11-20T04" in notes["2026-11-20T01"]
    report = cli(env, "report", "--backfill", backfill_id)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "provisional: aggregated 2026-11-20T01..2026-11-20T06" in report.stdout, report.stdout

    # the late hours land; the sensor's tick requests them, the daemon runs the release
    assert land_held_back(backups)
    # the sensor's submission, and the daemon's settings (its own ticks off: this test ticks)
    for name in ("BACKUP_ROOT", "DATA_ROOT", "DAGSTER_HOME", "BACKFILL_RECONCILE_SENSOR"):
        monkeypatch.setenv(name, env[name])
    settings = Settings.from_env(env)
    defs = build_definitions(settings)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        before = {b.backfill_id for b in instance.get_backfills()}
        context = dg.build_sensor_context(
            instance=instance,
            definitions=defs,
            resources={"backups": LocalBackupStore(root=str(backups))},
        )
        result = defs.resolve_sensor_def(SENSOR_NAME)(context)
        (repair,) = [b for b in instance.get_backfills() if b.backfill_id not in before]
        assert repair.backfill_id in result.skip_reason.skip_message
        with daemon.DaemonSupervisor(settings, instance, tmp_path / "daemon.log") as supervisor:
            outcome = launch.follow(instance, backfill_id=repair.backfill_id, supervisor=supervisor)
        # the sensor left the newest 2 hours (07, 08) to the live pipeline (grace period)
        requested = hours_between("2026-11-20T04", "2026-11-20T06")
        published = latest(instance, table_key("raw.payloads"), LATE)
        assert sorted(published) == requested
        assert outcome.status in ("COMPLETED", "COMPLETED_SUCCESS")
        notes = provisional(instance, session_hours)
        # 01..03 read up to 06: all there now, final
        assert notes["2026-11-20T01"] == notes["2026-11-20T02"] == notes["2026-11-20T03"] == ""
        # 04 reads 07, which has backups but is not published: held back, named
        held = [f for r in outcome.runs for f in r.failures if "held back" in f]
        assert any("2026-11-20T04" in f and "2026-11-20T07" in f for f in held), held
        assert "2026-11-20T07" in notes["2026-11-20T04"]  # still the first, provisional build

    # the newest hours, as an operator repairs them: a dry run, then its publish
    newest = hours_between("2026-11-20T07", "2026-11-20T08")
    dry = cli(env, "backfill", "--from", newest[0], "--to", newest[-1], "--dry-run")
    assert dry.returncode == 0, dry.stdout[-4000:] + dry.stderr[-4000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert latest(instance, table_key("raw.payloads"), newest) == {}  # built, not published
    dry_id = backfill_id_of(dry)
    published = cli(env, "publish", "--backfill", dry_id)
    assert published.returncode == 0, published.stdout[-4000:] + published.stderr[-4000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for table in ("raw.payloads", "transformed.payloads"):
            assert sorted(latest(instance, table_key(table), newest)) == newest, table
        notes = provisional(instance, hours_between("2026-11-20T04", "2026-11-20T11"))
    # 04 (held back above) and 05 read up to 08: final now; 06..11 reach past 08
    assert notes["2026-11-20T04"] == notes["2026-11-20T05"] == "", notes
    assert all("2026-11-20T09" in notes[h] for h in hours_between("2026-11-20T06", "2026-11-20T11"))
    report = cli(env, "report", "--backfill", dry_id)
    assert "provisional: aggregated 2026-11-20T06..2026-11-20T11" in report.stdout, report.stdout
