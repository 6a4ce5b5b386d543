"""The newest hours of a tree, repaired as an operator does, with the partitions as shipped
(up to now): a real `backfill-assets backfill`, then the late hours land and the
reconciliation sensor's release (a real Dagster backfill run by the daemon) rebuilds them.

Session hours whose window reaches past the newest backup hour are built from what exists
and published *provisional* (the metadata and the report say so); once the later hours land,
the sensor's release rebuilds them and they become final. A session hour whose window reads
an hour that has backups but is not published (the newest hours, left to the live pipeline
by the sensor's grace period) is held back, naming that hour; the rest publishes. The same
treatment through a dry run and its `publish`: test_newest_hours_dry_run.py (a module of its
own, so that the two run side by side).
"""

import os
from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.hours import hours_between
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
from backfill_assets.release import daemon, launch
from backfill_assets.release.keys import table_key
from backfill_assets.settings import DRIVER_HOST_ENV, Settings
from backfill_assets.settings import PARTITIONS_END_ENV as ENV_END
from backfill_assets_dev.generator import generate_backups, land_held_back
from backfill_assets_tests.helpers.processes import cli
from backfill_assets_tests.helpers.releases import backfill_id_of, latest, provisional

pytestmark = pytest.mark.slow

FIRST, NEWEST = "2026-11-20T00", "2026-11-20T03"
LATE = hours_between("2026-11-20T04", "2026-11-20T08")  # the backup tool's outage


def test_the_newest_hours_publish_and_the_sensor_makes_their_provisional_sessions_final(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver_jvm: dict[str, str]
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
        # the daemon serving the instance, as `make ui`'s: its runs share a driver JVM (the
        # worker's warm one)
        monkeypatch.setenv(DRIVER_HOST_ENV, driver_jvm[DRIVER_HOST_ENV])
        log = tmp_path / "daemon.log"
        with daemon.DaemonSupervisor(settings, instance, log) as supervisor:
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
