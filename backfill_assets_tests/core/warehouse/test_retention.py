"""Retention: vacuum deletes exactly the versions nobody can publish or roll back to."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import functions as F

from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import audit, publisher, retention
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.jobs.vacuum import VACUUM_JOB, VACUUM_OP

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"
RAW = [LAYERS["raw"]]


def versions_of(spark, release_id: str) -> dict[str, str]:
    """location -> shadow table of every version the release wrote."""
    rows = (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where(F.col("release_id") == release_id)
        .select("location", "table_name")
        .collect()
    )
    return {r.location: r.table_name for r in rows}


def on_disk(location: str) -> bool:
    return Path(location.removeprefix("file:")).exists()


def test_vacuum_keeps_published_and_rollback_targets_and_deletes_the_rest(
    spark, run_release, make_backups, instance, settings_for, base_settings
):
    tree = make_backups(hours=2)
    first, second = (
        run_release(tree, FIRST, LAST, downstream=False),
        run_release(tree, FIRST, LAST, downstream=False),
    )
    dry = run_release(tree, FIRST, LAST, downstream=False, publish=False)
    for release in (first, second, dry):
        assert release.success, release.failures
    versions = {r.release_id: versions_of(spark, r.release_id) for r in (first, second, dry)}
    assert all(len(v) >= 2 for v in versions.values())  # both hours, payloads (+ quarantine)
    published_rows = spark.table("raw.payloads").count()
    live = {t: partition_locations(spark, t) for t in LAYERS["raw"].tables}

    # Within the defaults nothing goes: one superseded version (depth 3), a fresh dry run.
    assert (
        retention.plan(
            spark,
            RAW,
            max_age=timedelta(days=7),
            rollback_depth=1,
            now=audit.now(),
        )
        == []
    )

    job = build_definitions(settings_for(tree)).resolve_job_def(VACUUM_JOB)

    def vacuum(**config) -> dg.ExecuteInProcessResult:
        return job.execute_in_process(
            instance=instance, run_config={"ops": {VACUUM_OP: {"config": config}}}
        )

    # Dry run with no age limit and no rollback depth: lists the first release (superseded)
    # and the dry run (unpublished), with sizes; deletes nothing.
    listed = vacuum(dry_run=True, max_age_days=0, rollback_depth=0)
    output = next(e for e in listed.all_events if e.is_successful_output)
    metadata = output.step_output_data.metadata
    expected = {**versions[first.release_id], **versions[dry.release_id]}
    assert metadata["versions"].value == len(expected)
    assert metadata["bytes"].value > 0
    assert all(on_disk(loc) for loc in expected)
    assert not audit.deleted(spark)

    result = vacuum(max_age_days=0, rollback_depth=0)
    gone = audit.deleted(spark)
    assert set(gone) == set(expected)
    kinds = {loc: row["kind"] for loc, row in gone.items()}
    assert {kinds[loc] for loc in versions[first.release_id]} == {retention.SUPERSEDED}
    assert {kinds[loc] for loc in versions[dry.release_id]} == {retention.UNPUBLISHED}
    assert all(row["run_id"] == result.run_id for row in gone.values())
    assert all(row["bytes"] > 0 for row in gone.values() if row["row_count"])
    assert not any(on_disk(loc) for loc in expected)
    assert all(on_disk(loc) for loc in versions[second.release_id])
    shadow_versions = {
        r.version for r in spark.table("shadow.raw_payloads").select("version").distinct().collect()
    }
    assert shadow_versions == {row["version"] for row in versions_rows(spark, second.release_id)}
    # the published data did not move
    assert {t: partition_locations(spark, t) for t in LAYERS["raw"].tables} == live
    assert spark.table("raw.payloads").count() == published_rows
    assert publisher.verify(spark, LAYERS["raw"].tables) == []
    assert publisher.orphan_versions(spark) == []

    # what needs a deleted version is refused, naming the deletion
    with pytest.raises(publisher.PublishError, match="deleted by vacuum"):
        publisher.rollback_release(
            spark,
            base_settings.warehouse_dir,
            RAW,
            release_id=second.release_id,
            run_id="retention-test",
            manifest={},
        )
    republished = run_release(tree, FIRST, LAST, publish_only=dry.release_id)
    assert not republished.success
    assert any("deleted by vacuum" in f for f in republished.failures), republished.failures

    # idempotent: nothing left to delete
    assert vacuum(max_age_days=0, rollback_depth=0).success
    assert set(audit.deleted(spark)) == set(expected)

    # publishing goes on after a vacuum
    assert publisher.verify(spark, LAYERS["raw"].tables) == []
    third = run_release(tree, FIRST, LAST, downstream=False)
    assert third.success, third.failures
    assert versions_of(spark, third.release_id)


def versions_rows(spark, release_id: str) -> list:
    return (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where((F.col("release_id") == release_id) & (F.col("table_name") == "shadow.raw_payloads"))
        .collect()
    )
