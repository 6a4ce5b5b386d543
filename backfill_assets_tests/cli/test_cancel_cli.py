"""`backfill-assets cancel --backfill ID` stops a release whose first run is in progress.

A real Dagster backfill (the CLI's, with its daemon) is cancelled while its first run is
inside its shadow write (held there by a fault checkpoint, so the run cannot end before the
cancellation reaches it, whatever the machine's load): its runs end cancelled, nothing of it
is published and the ledger holds no publication of it, only the cancellation (who, why);
the report says so; and the reconciliation sensor does not relaunch the same hours for the
same damage.
"""

from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core import faults, tags
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.warehouse import audit
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
from backfill_assets.release.instance import get_instance
from backfill_assets.release.keys import table_key
from backfill_assets.settings import Settings
from backfill_assets_tests.helpers.processes import cli, cli_at_fault, operator_tree

pytestmark = pytest.mark.slow

DEADLINE_SECONDS = 600


def backfill_with_reason(instance: dg.DagsterInstance, reason: str) -> str:
    [found] = [b.backfill_id for b in instance.get_backfills() if b.tags.get(tags.REASON) == reason]
    return found


def tick(settings: Settings, instance: dg.DagsterInstance, cursor: str | None):
    defs = build_definitions(settings)
    context = dg.build_sensor_context(
        instance=instance,
        definitions=defs,
        cursor=cursor,
        resources={"backups": LocalBackupStore(root=settings.backup_root)},
    )
    return defs.resolve_sensor_def(SENSOR_NAME)(context)


def test_a_release_cancelled_during_its_first_run_publishes_nothing_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    env, settings = operator_tree(tmp_path, monkeypatch)
    command = ["backfill", "--from", "2026-11-20T00", "--to", "2026-11-20T01"]
    command += ["--layers", "raw", "--no-downstream", "--reason", "to cancel"]
    # the first run stops inside its shadow write until it is cancelled
    with cli_at_fault(command, env, tmp_path / "pause.fifo", faults.SHADOW_WRITE) as release:
        instance = get_instance(settings)
        backfill_id = backfill_with_reason(instance, "to cancel")
        assert any(
            r.status == dg.DagsterRunStatus.STARTED
            for r in instance.get_runs(
                filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill_id})
            )
        )
        cancel = cli(
            env,
            *["cancel", "--backfill", backfill_id, "--by", "alice", "--reason", "oops"],
            timeout=DEADLINE_SECONDS,
        )
        output = release.communicate(timeout=DEADLINE_SECONDS)[0]
    assert cancel.returncode == 0, cancel.stdout[-3000:] + cancel.stderr[-3000:]
    assert f"release {backfill_id} cancelled by alice" in cancel.stdout
    assert release.returncode == 1 and f"backfill {backfill_id}: canceled" in output, output
    # its runs were stopped (the first one while in progress), its publish never ran
    assert instance.get_backfill(backfill_id).status.value == "CANCELED"
    runs = instance.get_runs(filters=dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill_id}))
    assert runs and all(r.status == dg.DagsterRunStatus.CANCELED for r in runs)
    # published data and the ledger as before it started (nothing), plus the cancellation
    for table in ("raw.payloads", "raw.quarantine"):
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=table_key(table)), limit=1
        )
        assert page.records == []
    assert audit.rows(settings.warehouse_dir, audit.PUBLICATIONS) == []
    [row] = audit.rows(settings.warehouse_dir, audit.CANCELLATIONS)
    assert (row["release_id"], row["cancelled_by"], row["reason"]) == (backfill_id, "alice", "oops")
    assert row["hours"] == "2026-11-20T00..2026-11-20T01"
    report = cli(
        env,
        *["report", "--backfill", backfill_id, "--no-diff", "--out", str(tmp_path)],
        timeout=DEADLINE_SECONDS,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert "cancelled by alice at " in report.stdout and "(oops)" in report.stdout
    # the sensor does not relaunch the cancelled hours for the same damage, tick after tick
    before = len(instance.get_backfills())
    first = tick(settings, instance, None)
    second = tick(settings, instance, first.cursor)
    assert len(instance.get_backfills()) == before
    for result in (first, second):
        assert "releases requested" not in result.skip_reason.skip_message
