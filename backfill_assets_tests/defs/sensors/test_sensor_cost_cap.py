"""The reconciliation sensor never starts a release estimated above
``BACKFILL_MAX_CORE_HOURS``: it submits nothing for it and says why in its evaluation (the
tick's skip reason in the UI) and its log; under the cap it would submit."""

from pathlib import Path

import dagster as dg
import pytest

from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME
from backfill_assets.settings import Settings


def test_a_release_over_the_cost_cap_is_not_submitted_and_the_tick_says_why(
    tmp_path: Path, make_backups, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
):
    backups = make_backups(hours=2)
    for key, value in {
        "BACKUP_ROOT": str(backups),
        "DATA_ROOT": str(tmp_path / "data"),
        "BACKFILL_MAX_CORE_HOURS": "0.000001",
        "BACKFILL_RECONCILE_GRACE_HOURS": "0",
    }.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(Settings.from_env())
    context = dg.build_sensor_context(
        instance=instance,
        definitions=defs,
        resources={"backups": LocalBackupStore(root=str(backups))},
    )
    result = defs.resolve_sensor_def(SENSOR_NAME)(context)
    reason = result.skip_reason.skip_message
    assert instance.get_backfills() == []  # nothing submitted
    assert "not submitted: refused: release of raw 2026-11-20T00..2026-11-20T01" in reason, reason
    assert "above BACKFILL_MAX_CORE_HOURS=1e-06" in reason
    assert "backfill-assets backfill --from 2026-11-20T00 --to 2026-11-20T01" in reason
