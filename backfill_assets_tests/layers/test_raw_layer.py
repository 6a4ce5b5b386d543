"""Raw layer end to end on real Spark, metastore and Dagster instance (issue 3)."""

import json
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from conftest import read_tree_lines, write_backup_folder, zst
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.generator.truth import read_truth_folders
from backfill_assets.layers.raw import (
    CODE_VERSION,
    LAYER,
    MANIFEST_RECONCILIATION,
    PAYLOADS,
    SHADOW_PAYLOADS,
)
from backfill_assets.partitions import hour_range
from backfill_assets.publishing import audit, publisher
from backfill_assets.publishing.tables import partition_location

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
HOURS = hour_range(FIRST, LAST)


def published_rows(spark) -> list[tuple]:
    spark.catalog.refreshTable("raw.payloads")
    rows = (
        spark.table("raw.payloads")
        .select("payload_id", F.unix_millis("received_at").alias("ms"), "client_id")
        .collect()
    )
    return sorted(tuple(r) for r in rows)


def locations(spark, table: str = "raw.payloads") -> dict[str, str | None]:
    return {hour: partition_location(spark, table, hour) for hour in HOURS}


def test_range_runs_once_and_publishes_exactly_the_valid_lines(
    spark, make_backups, run_layers, instance, capsys
):
    backups = make_backups(malformed_rate=0.05, duplicate_rate=0.3)
    valid, malformed = read_tree_lines(backups)
    assert malformed and len(valid) != len({v[0] for v in valid}), "tree must have junk + dups"

    runs = run_layers(backups, [("raw", FIRST, LAST)])

    assert [r.success for r in runs] == [True], runs[0].failures
    assert published_rows(spark) == sorted(valid)  # duplicates kept: faithful typed copy
    quarantined = spark.table("raw.quarantine").select("file", "line_number", "reason").collect()
    assert sorted((r.file, r.line_number) for r in quarantined) == sorted(malformed)
    assert all(r.reason for r in quarantined)
    assert instance.get_materialized_partitions(PAYLOADS) == set(HOURS)
    assert len(instance.get_runs()) == 1  # the whole range in ONE run

    shadow = instance.get_latest_materialization_event(SHADOW_PAYLOADS).asset_materialization
    lineage = {k: v.value for k, v in shadow.metadata.items()}
    assert lineage["run_id"] == runs[0].run_id and lineage["code_version"] == CODE_VERSION
    assert lineage["partition_range"] == f"{FIRST}..{LAST}"
    assert lineage["input_files"] == len(lineage["input_files_list"]) > 0
    assert all(len(f["sha256"]) == 64 for f in lineage["input_files_list"])
    assert sum(lineage["manifest_records_per_hour"].values()) == len(valid) + len(malformed)
    assert sum(lineage["rows_per_hour"].values()) == len(valid)
    assert set(lineage["checksum_per_hour"]) == set(HOURS)
    assert lineage["rows_per_second"] > 0 and "location" in lineage
    # contract: a line received outside its folder's hour is published in it and counted
    outside = Counter()
    for folder in read_truth_folders(backups):
        outside[folder["hour"]] += folder["received_outside_hour"]
    assert lineage["received_outside_hour_per_hour"] == {h: n for h, n in outside.items() if n}
    assert lineage["received_outside_hour"] == sum(outside.values()) > 0
    published = instance.get_latest_materialization_event(PAYLOADS).asset_materialization
    per_hour = published.metadata["published"].value
    assert set(per_hour) == set(HOURS)
    assert all(f"version={runs[0].run_id}" in v["new_location"] for v in per_hour.values())

    from backfill_assets.cli.main import main

    assert (
        main(
            [
                "sql",
                "SELECT hour, count(*) AS n FROM raw.payloads GROUP BY hour",
                "--format",
                "jsonl",
            ]
        )
        == 0
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sum(r["n"] for r in printed) == len(valid)
    assert main(["sql", "DROP TABLE raw.payloads"]) == 2
    assert spark.catalog.tableExists("raw.payloads")


def test_rerun_is_idempotent_and_rollback_restores_previous_version(
    spark, make_backups, run_layers, base_settings
):
    backups = make_backups()
    run_layers(backups, [("raw", FIRST, LAST)])
    first_rows, first_locations = published_rows(spark), locations(spark)
    run_layers(backups, [("raw", FIRST, LAST)])
    second_locations = locations(spark)

    assert published_rows(spark) == first_rows
    assert all(second_locations[h] != first_locations[h] for h in HOURS)  # new immutable versions
    ledger = audit.read(spark, audit.PUBLICATIONS).where(F.col("phase") == "commit")
    checksums = {}
    for row in ledger.collect():
        checksums.setdefault((row.table_name, row.hour), set()).add(row.checksum)
    assert all(len(values) == 1 for values in checksums.values()), "same input, same checksum"

    publisher.rollback(
        spark,
        base_settings.warehouse_dir,
        LAYER,
        "2026-11-20T01",
        run_id="rollback-test",
        manifest={"reason": "test"},
    )
    after = locations(spark)
    assert after["2026-11-20T01"] == first_locations["2026-11-20T01"]
    assert after["2026-11-20T02"] == second_locations["2026-11-20T02"]
    events = [
        r.mode
        for r in audit.read(spark, audit.PUBLICATIONS)
        .where(
            (F.col("table_name") == "raw.payloads")
            & (F.col("hour") == "2026-11-20T01")
            & (F.col("phase") == "commit")
        )
        .orderBy("recorded_at")
        .collect()
    ]
    assert events == ["publish", "publish", "rollback"]
    assert publisher.verify(spark, ["raw.payloads", "raw.quarantine"]) == []


def test_failing_hour_is_held_back_and_named_while_others_publish(
    spark, make_backups, run_layers, instance
):
    backups = make_backups()
    run_layers(backups, [("raw", FIRST, LAST)])
    before_rows, before = published_rows(spark), locations(spark)
    bad_hour = "2026-11-20T01"
    part = next((backups / "raw/date=2026-11-20/hour=01").glob("client_id=*/part-*.jsonl.zst"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # bit rot: digest no longer matches the manifest
    part.write_bytes(bytes(data))

    runs = run_layers(backups, [("raw", FIRST, LAST)])

    assert not runs[0].success
    check = runs[0].checks[MANIFEST_RECONCILIATION]
    assert not check["passed"] and bad_hour in check["description"]
    assert any(bad_hour in failure for failure in runs[0].failures)
    after = locations(spark)
    assert after[bad_hour] == before[bad_hour]  # published partition unchanged
    assert all(after[h] != before[h] for h in HOURS if h != bad_hour)
    bad_rows = [r for r in before_rows if r[1] // 3_600_000 == before_rows[0][1] // 3_600_000 + 1]
    assert [r for r in published_rows(spark) if r in bad_rows] == bad_rows
    status = instance.get_status_by_partition(PAYLOADS, HOURS, LAYER_PARTITIONS())
    assert status[bad_hour] == dg.AssetPartitionStatus.FAILED
    corrupt = (
        spark.table("shadow.raw_quarantine")
        .where(F.col("reason").startswith("file_digest_mismatch"))
        .count()
    )
    assert corrupt == 1


def LAYER_PARTITIONS():
    from backfill_assets.partitions import hourly_partitions

    return hourly_partitions


def test_dry_run_publishes_nothing_then_publish_uses_the_checked_versions(
    spark, make_backups, run_layers
):
    backups = make_backups()
    dry = run_layers(backups, [("raw", FIRST, LAST)], steps="shadow")
    assert dry[0].success and set(dry[0].checks) == set(LAYER.checks)
    assert not spark.catalog.tableExists("raw.payloads")

    published = run_layers(backups, [("raw", FIRST, LAST)], steps="publish")

    assert published[0].success
    assert all(f"version={dry[0].run_id}" in loc for loc in locations(spark).values())
    row = audit.read(spark, audit.PUBLICATIONS).where(F.col("phase") == "commit").first()
    assert row.version == dry[0].run_id and row.mode == "publish"


def test_bad_input_is_quarantined_or_held_back_with_named_reasons(
    spark, tmp_path: Path, run_layers
):
    good = (
        '{"payload_id":"p%d","client_id":1,"user_id":"u","event_time":'
        '"2026-11-20T00:10:00.000Z","received_at":"2026-11-20T00:10:01.000Z",'
        '"event_type":"pageview","page_url":"https://a.example/","device":"mobile"%s}'
    )
    root = tmp_path / "tree"
    junk = [
        "not json",
        "[1,2]",
        good.replace('"user_id":"u",', "") % (90, ""),  # missing field
        good.replace('"client_id":1', '"client_id":"1"') % (91, ""),  # mistyped
        good.replace("pageview", "hover") % (92, ""),  # unknown event_type
    ]
    write_backup_folder(
        root,
        "2026-11-20T00",
        1,
        {
            "part-00000.jsonl.zst": zst([good % (1, ""), good % (2, ',"unknown_key":[1]'), *junk]),
        },
    )
    truncated = zst([good.replace("T00:10:01", "T01:10:01") % (3, "")])[:-6]
    write_backup_folder(
        root,
        "2026-11-20T01",
        1,
        {"part-00000.jsonl.zst": truncated},
        records={"part-00000.jsonl.zst": 1},
    )
    # 2026-11-20T02: no folder at all (outage)
    write_backup_folder(root, "2026-11-20T03", 1, {"part-00000.jsonl.zst": zst([])}, closed=False)
    write_backup_folder(
        root, "2026-11-20T03", 2, {"part-00000.jsonl.zst": zst([])}, manifest={"records": 5}
    )

    runs = run_layers(root, [("raw", FIRST, LAST)])

    held = runs[0].checks[MANIFEST_RECONCILIATION]["description"]
    assert not runs[0].success
    for hour in ("2026-11-20T01", "2026-11-20T02", "2026-11-20T03"):
        assert hour in held
    assert sorted(r.payload_id for r in spark.table("raw.payloads").collect()) == ["p1", "p2"]
    assert "unknown_key" not in spark.table("raw.payloads").columns
    reasons = sorted(r.reason.split(":")[0] for r in spark.table("raw.quarantine").collect())
    assert reasons == [
        "missing_field",
        "not_json",
        "not_object",
        "unknown_event_type",
        "wrong_type",
    ]
    results = {
        (r.hour, r.check_name): r.detail
        for r in audit.read(spark, audit.CHECK_RESULTS).where(~F.col("passed")).collect()
    }
    detail = " ".join(results.values())
    assert "unreadable" in detail and "no backup folder" in detail
    assert "no _MANIFEST.json" in detail and "manifest records 5" in detail

    allowed = run_layers(
        root,
        [("raw", "2026-11-20T02", "2026-11-20T02")],
        extra_tags={tags.ALLOW_MISSING_HOURS: "2026-11-20T02"},
    )
    assert allowed[0].success
    assert partition_location(spark, "raw.payloads", "2026-11-20T02") is not None
    assert spark.table("raw.payloads").where(F.col("hour") == "2026-11-20T02").count() == 0


@pytest.mark.parametrize("hour", ["2026-11-20T00'; DROP TABLE raw.payloads; --"])
def test_cli_rejects_unsafe_hours(hour: str, capsys):
    from backfill_assets.cli.main import main

    assert main(["backfill", "--from", hour, "--to", "2026-11-20T01", "--layers", "raw"]) == 2
    assert "invalid hour" in capsys.readouterr().err
