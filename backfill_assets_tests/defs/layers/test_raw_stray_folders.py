"""A backfill does not silently ignore an ``hour=24`` folder (issue 9 item 8).

The raw read logs the stray folder as a warning, and the manifest reconciliation check
holds back every hour of its date (the folder's lines could be any of them), naming it.
"""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F

from backfill_assets.core.warehouse import audit
from backfill_assets.defs.layers.raw import MANIFEST_RECONCILIATION
from backfill_assets_tests.helpers.backups import zst

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"
STRAY = "raw/date=2026-11-20/hour=24"


def test_a_stray_hour_folder_is_logged_and_holds_back_its_date(
    spark, make_backups, run_release, instance: dg.DagsterInstance
) -> None:
    backups = make_backups(hours=2)
    folder = backups / STRAY / "client_id=1"
    folder.mkdir(parents=True)
    (folder / "part-00000.jsonl.zst").write_bytes(zst(['{"payload_id": "lost"}']))

    release = run_release(backups, FIRST, LAST, downstream=False)
    run = release.runs[0]

    assert not release.success
    check = run.checks[MANIFEST_RECONCILIATION]
    assert not check["passed"]
    warnings = [
        e.user_message
        for e in instance.all_logs(run.run_id)
        if e.level == 30 and e.step_key == "raw_shadow"
    ]
    assert any(m.startswith(f"{STRAY}: not an hour folder") for m in warnings), warnings
    failing = {
        r.hour: r.detail
        for r in audit.read(spark, audit.CHECK_RESULTS)
        .where(~F.col("passed") & (F.col("check_name") == MANIFEST_RECONCILIATION))
        .collect()
    }
    assert set(failing) == {FIRST, LAST}
    assert all(f"{STRAY}: not an hour folder" in d for d in failing.values())
    assert not spark.catalog.tableExists("raw.payloads") or (
        spark.table("raw.payloads").count() == 0
    )
