"""Change gates: a large change of a published hour waits for approval; a small one does not."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
import zstandard
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.partitions import backup_hour_path
from backfill_assets.publishing import audit, gates
from backfill_assets.publishing.assets import PublishConfig, approval_of
from backfill_assets.publishing.tables import partition_locations
from backfill_assets_tests.conftest import write_backup_folder, zst

SMALL, LARGE = "2026-11-20T00", "2026-11-20T01"


def thin(root: Path, hour: str, client_id: int, keep: float) -> None:
    """Rewrite one (hour, client) folder keeping the first ``keep`` share of each file's
    lines, with a manifest that matches (a smaller but well-formed backup)."""
    folder = root / "raw" / backup_hour_path(hour) / f"client_id={client_id}"
    files = {}
    for part in sorted(folder.glob("*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        lines = data.splitlines()
        kept = lines[: int(len(lines) * keep)]
        files[part.name] = zst(kept)
    shutil.rmtree(folder)
    write_backup_folder(root, hour, client_id, files)


def test_limits_name_the_change_and_let_small_ones_through():
    limits = gates.Limits()
    assert limits.breach("rows", 8210, 4012) == "rows 8,210 -> 4,012, -51%, over the 20% limit"
    assert limits.breach("rows", 1000, 850) is None  # -15%
    assert limits.breach("users", 10, 250) is None  # growth is not gated by default
    growth = gates.Limits.from_env({gates.ENV_MAX_INCREASE: "1"})
    assert growth.breach("users", 10, 25) == "users 10 -> 25, +150%, over the 100% limit"
    assert gates.Limits.from_env({gates.ENV_MAX_INCREASE: "off"}).max_increase is None
    assert limits.breach("rows", 0, 500) is None  # nothing published to compare with
    assert gates.Limits.from_env({gates.ENV_MAX_DECREASE: "0.05"}).breach("rows", 100, 90)
    with pytest.raises(ValueError, match=gates.ENV_MAX_DECREASE):
        gates.Limits.from_env({gates.ENV_MAX_DECREASE: "lots"})
    with pytest.raises(ValueError, match=gates.ENV_MAX_DECREASE):
        gates.Limits.from_env({gates.ENV_MAX_DECREASE: "1.5"})


def test_row_counts_are_the_recorded_ones_and_only_other_measures_scan(spark):
    """A gate's row count is the one each version's build recorded: the raw gate, rows
    only, runs no Spark job; the other tables' gates scan for the rest of their measures."""
    counts = {(SMALL, "v1"): 8210, (SMALL, "v2"): 4012}
    assert gates.measure(spark, "shadow.not_gated", counts) == {}
    spark.sparkContext.setJobGroup("raw-gate", "the raw gate's measures")
    try:
        measured = gates.measure(spark, "shadow.raw_payloads", counts)
        assert spark.sparkContext.statusTracker().getJobIdsForGroup("raw-gate") == []
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert measured == {(SMALL, "v1"): {"rows": 8210.0}, (SMALL, "v2"): {"rows": 4012.0}}
    finding = gates.findings(
        gates.Limits(), "raw", SMALL, measured[(SMALL, "v1")], measured[(SMALL, "v2")]
    )
    assert finding == [f"raw {SMALL}: rows 8,210 -> 4,012, -51%, over the 20% limit"]


def test_an_approval_needs_a_reason_and_valid_hours():
    with pytest.raises(dg.Failure, match="approval_reason"):
        approval_of(PublishConfig(release_id="r1", approve=True), {})
    with pytest.raises(dg.Failure, match="approve_hours"):
        approval_of(
            PublishConfig(release_id="r1", approve=True, approval_reason="x", approve_hours=["x"]),
            {},
        )
    given = approval_of(
        PublishConfig(release_id="r1", approve=True, approval_reason=" fix "),
        {"backfill_assets/requested_by": "bob"},
    )
    assert (given.approved_by, given.reason, given.hours) == ("bob", "fix", None)
    at_launch = approval_of(PublishConfig(), {"backfill_assets/approve_changes": "true"})
    assert at_launch is not None and at_launch.reason.startswith("approved at launch")
    assert approval_of(PublishConfig(), {}) is None


def test_a_gate_holds_a_large_change_until_approved_and_lets_a_small_one_through(
    spark, make_backups, run_release, instance: dg.DagsterInstance, tmp_path: Path, base_settings
):
    backups = make_backups(hours=2)
    live = run_release(backups, SMALL, LARGE, layers=("raw",), downstream=False)
    assert live.success, live.failures
    before = partition_locations(spark, "raw.payloads")
    rows_before = {
        r["hour"]: r["count"] for r in spark.table("raw.payloads").groupBy("hour").count().collect()
    }

    changed = tmp_path / "changed"
    shutil.copytree(backups, changed)
    thin(changed, SMALL, 1, keep=0.9)  # a few percent of the hour
    thin(changed, LARGE, 1, keep=0.3)  # a third of the hour gone
    release = run_release(changed, SMALL, LARGE, layers=("raw",), downstream=False)

    # The small change is published; the large one is held, naming the change and the way out.
    assert not release.success
    failure = next(f for f in release.failures if "held back" in f)
    rows_after = spark.table("shadow.raw_payloads").where(
        (F.col("hour") == LARGE) & F.col("run_id").isin([r.run_id for r in release.runs])
    )
    expected = f"change gate: raw {LARGE}: rows {rows_before[LARGE]:,} -> {rows_after.count():,}, "
    assert expected in failure and "over the 20% limit" in failure, failure
    assert f"backfill-assets approve --backfill {release.release_id}" in failure
    assert f"raw {SMALL}" not in failure
    now = partition_locations(spark, "raw.payloads")
    assert now[LARGE] == before[LARGE]  # unchanged while it waits
    assert now[SMALL] != before[SMALL]
    # an expected outcome, not a crash: the run succeeded, tagged, the verdict in metadata
    publish_run = instance.get_run_by_id(release.run_of("release/publish").run_id)
    assert publish_run.status == dg.DagsterRunStatus.SUCCESS
    assert publish_run.tags[tags.HELD_BACK] == "1"
    assert not instance.all_logs(publish_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == publish_run.run_id
    metadata = published.asset_materialization.metadata
    assert metadata["awaiting_approval"].value == [f"raw {LARGE}"]
    assert metadata["verdict"].value in failure

    # An approval on record for another change of the hour (given when something else was
    # published there, say) does not cover this one: still held, saying so.
    version = rows_after.select("version").first()["version"]
    other_change = f"raw {LARGE}: rows 1,000 -> 10, -99%, over the 20% limit"
    audit.append(
        spark,
        base_settings.warehouse_dir,
        audit.APPROVALS,
        [
            {
                "release_id": release.release_id,
                "layer": "raw",
                "hour": LARGE,
                "version": version,
                "gate": other_change,
                "approved_by": "mallory",
                "reason": "an earlier change",
                "approved_at": audit.now(),
            }
        ],
    )
    again = run_release(changed, SMALL, LARGE, publish_only=release.release_id)
    assert not again.success
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == again.run_of("release/publish").run_id
    reasons = published.asset_materialization.metadata["held_back"].value[f"raw {LARGE}"]
    assert reasons[0].startswith(expected), reasons
    assert reasons[1] == (
        f"change gate: the approval on record (by mallory) was for another change: {other_change}"
    )
    assert partition_locations(spark, "raw.payloads")[LARGE] == before[LARGE]

    # Approved: published by the same release, the approval on record with who and why.
    approved = run_release(
        changed,
        SMALL,
        LARGE,
        publish_only=release.release_id,
        publish_config={
            "approve": True,
            "approval_reason": "client 1 re-sent a corrected, smaller export",
            "approved_by": "alice",
        },
    )
    assert approved.success, approved.failures
    after = partition_locations(spark, "raw.payloads")
    assert after[SMALL] == now[SMALL] and after[LARGE] != before[LARGE]
    approvals = audit.read(spark, audit.APPROVALS).where(F.col("approved_by") != "mallory")
    records = [r.asDict() for r in approvals.collect()]
    assert len(records) == 1
    record = records[0]
    assert (record["release_id"], record["layer"], record["hour"]) == (
        release.release_id,
        "raw",
        LARGE,
    )
    assert record["approved_by"] == "alice"
    assert record["reason"] == "client 1 re-sent a corrected, smaller export"
    assert record["gate"].startswith(f"raw {LARGE}: rows ")
    published = instance.get_latest_materialization_event(dg.AssetKey(["release", "publish"]))
    assert published.run_id == approved.runs[0].run_id
    assert published.asset_materialization.metadata["approvals"].value[0]["approved_by"] == "alice"
