"""Raw layer end to end on real Spark, metastore and Dagster instance (issue 3), as releases."""

import json
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.hours import backup_hour_path, hour_range
from backfill_assets.core.layers.shadow_stats import partition_stats
from backfill_assets.core.warehouse import audit, publisher
from backfill_assets.core.warehouse.tables import partition_locations
from backfill_assets.defs.layers.raw import (
    BACKUP_PROBLEMS,
    CODE_VERSION,
    HOUR_BACKUP_PROBLEMS,
    LAYER,
    MANIFEST_RECONCILIATION,
    PAYLOADS,
    SHADOW_PAYLOADS,
)
from backfill_assets_dev.generator.truth import read_truth_folders
from backfill_assets_tests.helpers.backups import read_tree_lines, write_backup_folder, zst

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
    listed = partition_locations(spark, table)
    return {hour: listed.get(hour) for hour in HOURS}


def published_event(instance, hour: str, key: dg.AssetKey = PAYLOADS) -> dict:
    """Metadata of the newest publish materialization of ``key`` at ``hour``."""
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[hour]), limit=1
    ).records[0]
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def parquet_dictionaries(root: str) -> set[str]:
    """The columns dictionary-encoded in some row group of the Parquet files under ``root``."""
    import pyarrow.parquet as pq

    found = set()
    for path in Path(root.removeprefix("file:")).rglob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            for i in range(meta.num_columns):
                column = meta.row_group(group).column(i)
                if any("DICTIONARY" in e for e in column.encodings):
                    found.add(column.path_in_schema)
    return found


RAW_ONLY = {"downstream": False}  # these tests are about the raw layer alone


def test_range_runs_once_and_publishes_exactly_the_valid_lines(
    spark, make_backups, run_release, instance, capsys
):
    backups = make_backups(malformed_rate=0.05, duplicate_rate=0.3)
    valid, malformed = read_tree_lines(backups)
    assert malformed and len(valid) != len({v[0] for v in valid}), "tree must have junk + dups"

    release = run_release(backups, FIRST, LAST, **RAW_ONLY)

    assert release.success, release.failures
    assert published_rows(spark) == sorted(valid)  # duplicates kept: faithful typed copy
    quarantined = spark.table("raw.quarantine").select("file", "line_number", "reason").collect()
    assert sorted((r.file, r.line_number) for r in quarantined) == sorted(malformed)
    assert all(r.reason for r in quarantined)
    assert instance.get_materialized_partitions(PAYLOADS) == set(HOURS)
    raw_run = release.run_of("shadow/raw_payloads_candidate")
    # the whole range in ONE run, then the release's one publish step
    assert len(instance.get_runs()) == len(release.runs) == 2
    assert raw_run.partition_range == f"{FIRST}..{LAST}"

    # lineage: the run's facts on every hour's event, each hour's own counts on its event
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=SHADOW_PAYLOADS, asset_partitions=HOURS), limit=100
    ).records
    per_hour = {
        r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
    }
    assert sorted(per_hour) == HOURS
    lineage = per_hour[FIRST]
    assert lineage["run_id"] == raw_run.run_id and lineage["code_version"] == CODE_VERSION
    assert lineage["partition_range"] == f"{FIRST}..{LAST}"
    assert lineage["release_id"] == release.release_id
    assert lineage["rows_per_second"] > 0 and "location" in lineage
    assert lineage["input_files"] == sum(m["hour_input_files"] for m in per_hour.values()) > 0
    for hour, meta in per_hour.items():  # only the hour's own files, all of them
        assert meta["hour_input_files"] == len(meta["input_files_list"])
        assert all(
            f["file"].startswith(f"raw/{backup_hour_path(hour)}/") for f in meta["input_files_list"]
        )
        assert all(len(f["sha256"]) == 64 for f in meta["input_files_list"])
        assert meta["checksum"].startswith(f"{meta['rows']}:")
        assert not any(k.endswith("_per_hour") for k in meta)  # no whole-range dicts
    # measured on the cached lines before the write, equal to the written rows' own
    written = partition_stats(
        spark.table("shadow.raw_payloads").where(F.col("version") == raw_run.run_id)
    )
    assert {h: m["checksum"] for h, m in per_hour.items()} == {
        h: written.get(h, (0, "0:0"))[1] for h in HOURS
    }
    assert sum(m["manifest_records"] for m in per_hour.values()) == len(valid) + len(malformed)
    assert sum(m["rows"] for m in per_hour.values()) == len(valid)
    # ids and timestamps are written without a Parquet dictionary, the other columns with one
    assert parquet_dictionaries(lineage["location"]) == {
        "client_id",
        "user_id",
        "event_type",
        "page_url",
        "device",
        "referrer",
        "schema_version",
        "run_id",
        "code_version",
    }
    # contract: a line received outside its folder's hour is published in it and counted
    outside = Counter()
    for folder in read_truth_folders(backups):
        outside[folder["hour"]] += folder["received_outside_hour"]
    assert {h: m["received_outside_this_hour"] for h, m in per_hour.items()} == {
        h: outside[h] for h in HOURS
    }
    assert lineage["received_outside_hour"] == sum(outside.values()) > 0
    # one materialization per published (table, hour), all of one transaction
    events = [published_event(instance, hour) for hour in HOURS]
    assert all(e["status"] == "published" for e in events)
    assert all(e["release_id"] == release.release_id for e in events)
    assert all(f"version={raw_run.run_id}" in e["new_location"] for e in events)
    assert len({e["txn_id"] for e in events}) == 1 and events[0]["txn_id"]
    assert sum(int(e["row_count"]) for e in events) == len(valid)

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
    spark, make_backups, run_release, base_settings
):
    backups = make_backups()
    first = run_release(backups, FIRST, LAST, **RAW_ONLY)
    assert first.success, first.failures
    first_rows, first_locations = published_rows(spark), locations(spark)
    second = run_release(backups, FIRST, LAST, **RAW_ONLY)
    assert second.success, second.failures
    second_locations = locations(spark)

    assert published_rows(spark) == first_rows
    assert all(second_locations[h] != first_locations[h] for h in HOURS)  # new immutable versions
    ledger = audit.read(spark, audit.PUBLICATIONS).where(F.col("phase") == "commit")
    checksums = {}
    for row in ledger.collect():
        checksums.setdefault((row.table_name, row.hour), set()).add(row.checksum)
    assert all(len(values) == 1 for values in checksums.values()), "same input, same checksum"

    def rollback(hour: str) -> str:
        released, _ = publisher.rollback_release(
            spark,
            base_settings.warehouse_dir,
            [LAYER],
            hour=hour,
            layer="raw",
            run_id="rollback-test",
            manifest={"reason": "test"},
        )
        return released

    # Rolling back at one hour rolls back the release published there, in every hour.
    assert rollback("2026-11-20T01") == second.release_id
    assert locations(spark) == first_locations
    assert locations(spark, "raw.quarantine") == {
        h: loc.replace("raw_payloads", "raw_quarantine") if loc else loc
        for h, loc in first_locations.items()
    }
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
    # A second rollback walks one step further back: the first-ever publish, removed.
    assert rollback("2026-11-20T01") == first.release_id
    assert locations(spark) == dict.fromkeys(HOURS)
    assert publisher.verify(spark, ["raw.payloads", "raw.quarantine"]) == []


def test_failing_hour_is_held_back_and_named_while_others_publish(
    spark, make_backups, run_release, instance
):
    backups = make_backups()
    first = run_release(backups, FIRST, LAST, **RAW_ONLY)
    assert first.success, first.failures
    before_rows, before = published_rows(spark), locations(spark)
    bad_hour = "2026-11-20T01"
    part = next((backups / "raw/date=2026-11-20/hour=01").glob("client_id=*/part-*.jsonl.zst"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # bit rot: digest no longer matches the manifest
    part.write_bytes(bytes(data))

    release = run_release(backups, FIRST, LAST, **RAW_ONLY)

    assert not release.success
    check = release.checks[MANIFEST_RECONCILIATION]
    assert not check["passed"] and bad_hour in check["description"]
    assert any(bad_hour in failure for failure in release.failures)
    after = locations(spark)
    assert after[bad_hour] == before[bad_hour]  # published partition unchanged
    assert all(after[h] != before[h] for h in HOURS if h != bad_hour)
    bad_rows = [r for r in before_rows if r[1] // 3_600_000 == before_rows[0][1] // 3_600_000 + 1]
    assert [r for r in published_rows(spark) if r in bad_rows] == bad_rows
    # The catalog shows per partition which release is published: the held-back hour keeps
    # the previous one.
    on_top = {h: published_event(instance, h)["release_id"] for h in HOURS}
    assert on_top[bad_hour] == first.release_id
    assert {on_top[h] for h in HOURS if h != bad_hour} == {release.release_id}
    corrupt = (
        spark.table("shadow.raw_quarantine")
        .where(F.col("reason").startswith("file_digest_mismatch"))
        .count()
    )
    assert corrupt == 1


def test_dry_run_publishes_nothing_then_publish_uses_the_checked_versions(
    spark, make_backups, run_release
):
    backups = make_backups()
    dry = run_release(backups, FIRST, LAST, publish=False, **RAW_ONLY)
    assert dry.success and set(dry.checks) == set(LAYER.checks)
    assert not spark.catalog.tableExists("raw.payloads")

    published = run_release(backups, FIRST, LAST, publish_only=dry.release_id)

    assert published.success, published.failures
    assert [r.assets for r in published.runs] == [["release/publish"]]  # nothing rebuilt
    version = dry.run_of("shadow/raw_payloads_candidate").run_id
    assert all(f"version={version}" in loc for loc in locations(spark).values())
    row = audit.read(spark, audit.PUBLICATIONS).where(F.col("phase") == "commit").first()
    assert row.version == version and row.mode == "publish"
    assert row.backfill_id == dry.release_id


def test_bad_input_is_quarantined_or_held_back_with_named_reasons(
    spark, tmp_path: Path, run_release, instance
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

    release = run_release(root, FIRST, LAST, **RAW_ONLY)

    held = release.checks[MANIFEST_RECONCILIATION]["description"]
    assert not release.success
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
    # each hour's backup problems on that hour's event; the run's metadata holds a count
    per_hour = {
        r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=SHADOW_PAYLOADS, asset_partitions=HOURS), limit=100
        ).records
    }
    listed = {h: m.get(HOUR_BACKUP_PROBLEMS, []) for h, m in per_hour.items()}
    assert listed["2026-11-20T00"] == []
    assert listed["2026-11-20T00"] == listed["2026-11-20T01"] == []
    assert "no backup folder" in " ".join(listed["2026-11-20T02"])
    assert "no _MANIFEST.json" in " ".join(listed["2026-11-20T03"])
    assert all(m[BACKUP_PROBLEMS] == sum(map(len, listed.values())) > 0 for m in per_hour.values())

    allowed = run_release(
        root,
        "2026-11-20T02",
        "2026-11-20T02",
        extra_tags={tags.ALLOW_MISSING_HOURS: "2026-11-20T02"},
        **RAW_ONLY,
    )
    assert allowed.success, allowed.failures
    assert "2026-11-20T02" in partition_locations(spark, "raw.payloads")
    assert spark.table("raw.payloads").where(F.col("hour") == "2026-11-20T02").count() == 0


def test_a_folder_read_short_of_its_manifest_names_the_file_that_differs(
    spark, run_release, tmp_path
):
    line = (
        '{"payload_id":"p%d","client_id":1,"user_id":"u","event_time":'
        '"2026-11-20T00:10:00.000Z","received_at":"2026-11-20T00:10:01.000Z",'
        '"event_type":"pageview","page_url":"https://a.example/","device":"mobile"}'
    )
    root = tmp_path / "tree"
    files = {
        "part-00000.jsonl.zst": zst([line % 1, line % 2]),
        "part-00001.jsonl.zst": zst([line % 3]),
    }
    write_backup_folder(root, FIRST, 1, files, records={"part-00001.jsonl.zst": 3})

    release = run_release(root, FIRST, FIRST, **RAW_ONLY)

    assert not release.success
    [held] = [
        r.detail
        for r in audit.read(spark, audit.CHECK_RESULTS).where(~F.col("passed")).collect()
        if r.check_name == MANIFEST_RECONCILIATION
    ]
    assert "client_id=1: read 3 line(s), manifest says 5" in held
    assert "(files: part-00001.jsonl.zst read 1, manifest 3)" in held
    assert "part-00000" not in held


@pytest.mark.parametrize("hour", ["2026-11-20T00'; DROP TABLE raw.payloads; --"])
def test_cli_rejects_unsafe_hours(hour: str, capsys):
    from backfill_assets.cli.main import main

    assert main(["backfill", "--from", hour, "--to", "2026-11-20T01", "--layers", "raw"]) == 2
    assert "invalid hour" in capsys.readouterr().err
