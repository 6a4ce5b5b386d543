"""A backfill is one release: chained shadows, one publish transaction, release rollback."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import functions as F

from backfill_assets.core.hours import hour_range
from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import audit, publisher
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.checks.published import RELEASE_GATE
from backfill_assets.defs.layers import aggregated, raw
from backfill_assets.release.keys import table_key
from backfill_assets_dev import expected
from backfill_assets_dev.generator import land_held_back

FIRST, LAST = "2026-11-20T00", "2026-11-20T06"
LATE = "2026-11-20T03"
TABLES = [t for layer in LAYERS.values() for t in layer.tables]


def published_sessions(spark, hours: list[str]) -> Counter:
    rows = (
        spark.table("aggregated.sessions")
        .where(F.col("hour").isin(hours))
        .select(
            "client_id",
            "user_id",
            F.unix_millis("session_start_at").alias("start"),
            F.unix_millis("session_end_at").alias("end"),
            "payload_count",
        )
        .collect()
    )
    return Counter(tuple(r) for r in rows)


def expected_sessions(backups: Path, hours: list[str]) -> Counter:
    truth = expected.sessions(expected.read_deliveries(backups), hours)
    return Counter(expected.session_key(s) for h in hours for s in truth[h])


def releases_on_top(spark) -> dict[tuple[str, str], str | None]:
    stacks = publisher.history(publisher.ledger(spark, TABLES))
    return {key: stack[-1].release_id for key, stack in stacks.items() if stack}


@pytest.fixture
def late_tree(make_backups) -> Path:
    return make_backups(hours=7, hold_back=[f"{LATE}/2"])


def test_dry_run_publish_and_rollback_of_a_release_across_every_layer(
    spark, late_tree: Path, run_release, instance, settings_for
):
    live = run_release(late_tree, FIRST, LAST)
    assert live.success, live.failures
    session_hours = hour_range("2026-11-20T00", "2026-11-20T06")
    land_held_back(late_tree)
    before = published_sessions(spark, session_hours)
    assert before != expected_sessions(late_tree, session_hours)  # the late files matter
    locations = {t: partition_locations(spark, t) for t in TABLES}

    dry = run_release(late_tree, LATE, LATE, publish=False)
    assert dry.success, dry.failures
    # Every downstream shadow of the dry run read the raw/transformed candidates of the
    # same release for the rebuilt hour, and the published data for the rest.
    reads = audit.read(spark, audit.RELEASE_READS).where(F.col("release_id") == dry.release_id)
    sources = {(r.reader_table, r.hour): r.source for r in reads.collect()}
    assert sources[("shadow.transformed_payloads", LATE)] == "release"
    assert sources[("shadow.sessions", LATE)] == "release"
    assert sources[("shadow.sessions", "2026-11-20T01")] == "published"
    assert set(releases_on_top(spark).values()) == {live.release_id}  # nothing published yet
    assert published_sessions(spark, session_hours) == before

    published = run_release(late_tree, LATE, LATE, publish_only=dry.release_id)
    assert published.success, published.failures
    on_top = releases_on_top(spark)
    assert {on_top[("raw.payloads", LATE)], on_top[("transformed.payloads", LATE)]} == {
        dry.release_id
    }
    assert {on_top[("aggregated.sessions", h)] for h in session_hours} == {dry.release_id}
    assert published_sessions(spark, session_hours) == expected_sessions(late_tree, session_hours)
    assert publisher.verify(spark, TABLES) == []

    # Rollback of the release restores every layer it published, in one job run.
    job = build_definitions(settings_for(late_tree)).resolve_job_def("rollback_release")

    def rollback(**config) -> dg.ExecuteInProcessResult:
        return job.execute_in_process(
            instance=instance,
            run_config={"ops": {"rollback_op": {"config": config}}},
            raise_on_error=False,
        )

    assert rollback(release_id=dry.release_id).success
    assert {t: partition_locations(spark, t) for t in TABLES} == locations
    assert published_sessions(spark, session_hours) == before
    assert publisher.verify(spark, TABLES) == []
    # reported to Dagster in the publish format: the sensor sees the restored version
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=table_key("raw.payloads"), asset_partitions=[LATE]),
        limit=1,
    ).records[0]
    metadata = record.asset_materialization.metadata
    assert metadata["status"].value == "rolled_back"
    assert metadata["release_id"].value == live.release_id

    assert not rollback(release_id=dry.release_id).success  # already rolled back
    # one step further back from an hour: the first release, a first-ever publish, is
    # removed from every layer it published
    assert rollback(hour=LATE, layer="raw").success
    assert all(partition_locations(spark, t) == {} for t in TABLES)
    assert publisher.verify(spark, TABLES) == []


def latest_check_per_hour(instance, asset: dg.AssetKey, name: str) -> dict[str, tuple]:
    """Hour -> (status, description) of the newest evaluation of the check (what the UI
    shows on the hour's partition)."""
    history = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(asset, name), limit=1000
    )
    found = {}
    for record in history:  # newest first
        if record.partition not in found:
            evaluation = record.event.dagster_event.event_specific_data if record.event else None
            found[record.partition] = (record.status.value, getattr(evaluation, "description", ""))
    return found


def test_held_back_raw_hour_holds_back_the_session_hours_that_read_it(
    spark, make_backups, run_release, instance
):
    backups = make_backups(hours=7)
    assert run_release(backups, FIRST, LAST).success
    on_top = releases_on_top(spark)
    # corrupt one closed folder's file: the raw manifest check fails for that hour only
    bad = next((backups / "raw" / "date=2026-11-20" / "hour=03").glob("client_id=1/part-*"))
    bad.write_bytes(bad.read_bytes()[:-7])
    release = run_release(backups, "2026-11-20T02", "2026-11-20T04")
    assert not release.success
    now = releases_on_top(spark)
    assert now[("raw.payloads", LATE)] == on_top[("raw.payloads", LATE)]  # held back
    assert now[("raw.payloads", "2026-11-20T02")] == release.release_id
    # sessions of 00..06 read raw hour 03 of the release (held back): all keep theirs
    for hour in hour_range("2026-11-20T00", "2026-11-20T06"):
        assert now[("aggregated.sessions", hour)] == on_top[("aggregated.sessions", hour)]
    assert any(
        "held back" in f and LATE in f and "raw_manifest_reconciliation" in f
        for f in release.failures
    ), release.failures

    # each hour's verdict is on its partition: the shadow's check, the published gate
    manifest = latest_check_per_hour(instance, raw.SHADOW_PAYLOADS, raw.MANIFEST_RECONCILIATION)
    assert manifest[LATE][0] == "FAILED" and "client_id=1" in manifest[LATE][1]
    assert manifest["2026-11-20T02"] == manifest["2026-11-20T04"] == ("SUCCEEDED", "pass")
    gate = latest_check_per_hour(instance, raw.PAYLOADS, RELEASE_GATE)
    assert gate[LATE][0] == "FAILED" and gate[LATE][1].startswith("held back from release")
    assert gate["2026-11-20T02"][0] == "SUCCEEDED"
    sessions_gate = latest_check_per_hour(instance, aggregated.SESSIONS, RELEASE_GATE)
    assert {sessions_gate[h][0] for h in hour_range(FIRST, LAST)} == {"FAILED"}
    assert (
        f"reads transformed {LATE} of this release, which is held back" in (sessions_gate[FIRST][1])
    )


def test_a_raw_only_backfill_moves_downstream_and_stales_a_dry_run_that_read_it(
    spark, late_tree: Path, run_release
):
    assert run_release(late_tree, FIRST, LAST).success
    land_held_back(late_tree)
    # a dry run of the sessions reads the published transformed hour ...
    dry = run_release(late_tree, LATE, LATE, layers=("aggregated",), publish=False)
    assert dry.success, dry.failures
    # ... which a raw-only release then republishes, with everything downstream of it
    release = run_release(late_tree, LATE, LATE, layers=("raw",))
    assert release.success, release.failures
    on_top = releases_on_top(spark)
    assert on_top[("transformed.payloads", LATE)] == release.release_id
    for hour in hour_range("2026-11-20T00", "2026-11-20T06"):
        assert on_top[("aggregated.sessions", hour)] == release.release_id
        assert on_top[("aggregated.client_hourly", hour)] == release.release_id
    # the dry run's inputs changed since it was built: publishing it is refused
    refused = run_release(late_tree, LATE, LATE, publish_only=dry.release_id)
    assert not refused.success
    assert any("changed since it was built" in f for f in refused.failures), refused.failures
    assert releases_on_top(spark) == on_top


def test_a_release_that_would_empty_published_hours_is_held_unless_allowed(
    spark, make_backups, run_release, tmp_path: Path
):
    from backfill_assets.core import tags

    backups = make_backups(hours=4)
    live = run_release(backups, FIRST, "2026-11-20T03", layers=("raw",), downstream=False)
    assert live.success, live.failures
    before = partition_locations(spark, "raw.payloads")
    # a wrong BACKUP_ROOT (an empty tree) with "publish hours without backups as empty"
    wrong = tmp_path / "wrong-root"
    (wrong / "raw").mkdir(parents=True)
    refused = run_release(
        wrong,
        FIRST,
        "2026-11-20T03",
        layers=("raw",),
        downstream=False,
        extra_tags={tags.ALLOW_MISSING_HOURS: "true"},
    )
    assert not refused.success
    assert any(
        # the clients removed are named first (the hour's rows finding follows them)
        "change gate: raw 2026-11-20T00: client 1 rows " in f
        and "-> 0, every row of the client removed" in f
        for f in refused.failures
    ), refused.failures
    assert partition_locations(spark, "raw.payloads") == before  # nothing lost
    # the never-published versions are listed by verify as orphans
    orphans = {o["release_id"] for o in publisher.orphan_versions(spark)}
    assert refused.release_id in orphans and live.release_id not in orphans
    allowed = run_release(
        wrong,
        FIRST,
        "2026-11-20T03",
        layers=("raw",),
        downstream=False,
        extra_tags={tags.ALLOW_MISSING_HOURS: "true", tags.APPROVE_CHANGES: "true"},
    )
    assert allowed.success, allowed.failures
    assert spark.table("raw.payloads").count() == 0
