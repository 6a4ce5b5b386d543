"""Reconciliation end to end: a live run, late files, the sensor, the CLI, the report.

One live raw run (module fixture) is shared by the tests; each test that lands the late
files lands them in its own copy of the backup tree. The last test backfills the late hour,
so it stays last in this file.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from backfill_assets import launch, tags
from backfill_assets.cli.main import main
from backfill_assets.definitions import build_definitions
from backfill_assets.generator import generate_backups, land_held_back
from backfill_assets.layers import raw, registry
from backfill_assets.layers.windows import session_hours_touching
from backfill_assets.partitions import hour_range
from backfill_assets.publishing import audit
from backfill_assets.reporting import expected
from backfill_assets.reporting.diff import diff_layer
from backfill_assets.reporting.report import build_report
from backfill_assets.resources.backup_store import LocalBackupStore
from backfill_assets.sensors import findings, state
from backfill_assets.sensors.reconciliation import SENSOR_NAME
from backfill_assets.settings import Settings

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
LATE = "2026-11-20T01"  # client 2's folder of this hour lands after the live run


@dataclass
class Scenario:
    settings: Settings
    defs: dg.Definitions
    instance: dg.DagsterInstance
    backups: Path
    home: Path
    live_run_id: str


@pytest.fixture(scope="module")
def scenario(
    spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    """A live raw run over FIRST..LAST while client 2's folder of LATE is held back."""
    for row in spark.sql("SHOW DATABASES").collect():  # an empty catalog, as `warehouse`
        if row[0] != "default":
            spark.sql(f"DROP DATABASE IF EXISTS {row[0]} CASCADE")
    root = tmp_path_factory.mktemp("reconciliation")
    backups, home = root / "backups", root / "dagster_home"
    generate_backups(
        backups,
        start=FIRST,
        hours=4,
        clients=2,
        users_per_client=25,
        seed=11,
        workers=1,
        hold_back=[f"{LATE}/2"],
    )
    home.mkdir()
    settings = dataclasses.replace(base_settings, backup_root=str(backups), dagster_home=str(home))
    defs = build_definitions(settings)
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        runs = launch.launch(
            defs,
            instance,
            [("raw", FIRST, LAST)],
            reason="nightly ingest",
            ticket="OPS-7",
            requested_by="alice",
            extra_tags={tags.MODE: "live"},
        )
        assert runs[0].success, runs[0].failures
        yield Scenario(settings, defs, instance, backups, home, runs[0].run_id)


def landed_copy(scenario: Scenario, tmp_path: Path) -> Path:
    """The scenario's backup tree, copied, with the late folder landed."""
    copy = tmp_path / "landed"
    shutil.copytree(scenario.backups, copy)
    assert land_held_back(copy) == ["raw/date=2026-11-20/hour=01/client_id=2"]
    return copy


def evaluate(scenario: Scenario, backups: Path, cursor: str | None = None) -> dg.SensorResult:
    sensor = scenario.defs.resolve_sensor_def(SENSOR_NAME)
    context = dg.build_sensor_context(
        instance=scenario.instance,
        definitions=scenario.defs,
        cursor=cursor,
        resources={"backups": LocalBackupStore(root=str(backups))},
    )
    return sensor(context)


def ranges(result: dg.SensorResult) -> list[tuple[str, str, str]]:
    return [
        (
            r.tags[findings.LAYER_TAG],
            r.tags["dagster/asset_partition_range_start"],
            r.tags["dagster/asset_partition_range_end"],
        )
        for r in result.run_requests
    ]


def use_cli_env(monkeypatch: pytest.MonkeyPatch, scenario: Scenario, backups: Path) -> None:
    monkeypatch.setenv("BACKUP_ROOT", str(backups))
    monkeypatch.setenv("DATA_ROOT", scenario.settings.data_root)
    monkeypatch.setenv("DAGSTER_HOME", str(scenario.home))


def test_the_run_manifest_reaches_the_ledger_and_the_lineage(
    scenario: Scenario, spark: SparkSession
) -> None:
    ledger = (
        audit.read(spark, audit.PUBLICATIONS)
        .where(F.col("run_id") == scenario.live_run_id)
        .collect()
    )
    assert {(r["table_name"], r["phase"]) for r in ledger} == {
        (t, p) for t in ("raw.payloads", "raw.quarantine") for p in ("prepare", "commit")
    }
    assert {
        (r["reason"], r["requested_by"], r["ticket"], r["run_mode"], r["code_version"])
        for r in ledger
    } == {("nightly ingest", "alice", "OPS-7", "live", raw.CODE_VERSION)}
    for key in (raw.PAYLOADS, raw.SHADOW_PAYLOADS):
        record = scenario.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[LATE]), limit=1
        ).records[0]
        meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
        assert (
            meta["mode"],
            meta["reason"],
            meta["requested_by"],
            meta["ticket"],
            meta["run_id"],
        ) == ("live", "nightly ingest", "alice", "OPS-7", scenario.live_run_id)
    # the two readers of the published state agree
    layers = list(registry.LAYERS.values())
    from_ledger = state.published_from_ledger(spark, layers, hour_range(FIRST, LAST))["raw"]
    from_dagster = state.published_from_instance(
        scenario.instance, layers, hour_range(FIRST, LAST)
    )["raw"]
    assert sorted(from_ledger) == sorted(from_dagster) == hour_range(FIRST, LAST)
    for hour, pub in from_dagster.items():
        other = from_ledger[hour]
        assert (pub.rows, pub.version, pub.code_version) == (
            other.rows,
            other.version,
            other.code_version,
        )
        assert pub.read is not None and other.read is None


def test_before_the_late_files_land_the_sensor_sees_nothing_without_spark(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*args, **kwargs):
        raise AssertionError("the reconciliation sensor must not start Spark")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", no_spark)
    result = evaluate(scenario, scenario.backups)
    assert result.run_requests == [] and result.asset_events == []
    assert "no findings" in result.skip_reason.skip_message


def test_late_files_are_requested_once_with_the_session_hours_around_them(
    scenario: Scenario, tmp_path: Path
) -> None:
    landed = landed_copy(scenario, tmp_path)
    first = evaluate(scenario, landed)
    # exactly the late raw hour, and each later layer's hours for it, clipped to the tree
    wanted = []
    for layer, start, end in launch.plan_ranges(list(registry.LAYERS), LATE, LATE):
        hours = [h for h in hour_range(start, end) if FIRST <= h <= LAST]
        wanted.append((layer, hours[0], hours[-1]))
    assert ranges(first) == wanted
    assert wanted[0] == ("raw", LATE, LATE)
    session_layers = [
        name
        for name in registry.LAYERS
        if name not in getattr(launch, "RECEIVED_HOUR_LAYERS", registry.LAYERS)
    ]
    for name in session_layers:  # session hours whose windows touch the late hour
        lo, hi = session_hours_touching(LATE, LATE)
        assert (name, max(lo, FIRST), min(hi, LAST)) in wanted
    for request in first.run_requests:
        assert request.tags[tags.REQUESTED_BY] == "reconciliation-sensor"
        assert request.tags[tags.MODE] == "backfill"
        assert request.tags[tags.REASON].startswith(f"reconciliation: count_mismatch in raw {LATE}")
        assert "manifest_appeared" in request.tags[tags.REASON]
        assert set(request.asset_selection) == set(
            launch.layer_keys(scenario.defs, request.tags[findings.LAYER_TAG])
        )
    assert len({r.run_key for r in first.run_requests}) == len(first.run_requests)
    (observation,) = first.asset_events
    assert (observation.asset_key, observation.partition) == (raw.PAYLOADS, LATE)
    assert observation.metadata["kinds"].value == "count_mismatch, manifest_appeared"
    assert observation.metadata["action"].value.startswith(f"backfill requested: raw {LATE}")

    second = evaluate(scenario, landed, first.cursor)
    assert second.run_requests == []
    assert "nothing new to request" in second.skip_reason.skip_message

    # a run already rebuilding the raw hour (launched by anyone) is not requested again
    queued = dg.DagsterRun(
        job_name="__ASSET_JOB",
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset(launch.layer_keys(scenario.defs, "raw")),
        tags={
            "dagster/asset_partition_range_start": LATE,
            "dagster/asset_partition_range_end": LATE,
        },
    )
    scenario.instance.add_run(queued)
    try:
        third = evaluate(scenario, landed)
    finally:
        scenario.instance.delete_run(queued.run_id)
    assert ranges(third) == wanted[1:]


def test_a_bumped_code_version_reports_published_partitions_stale(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        registry.LAYERS, "raw", dataclasses.replace(raw.LAYER, code_version="raw-2")
    )
    result = evaluate(scenario, scenario.backups)
    assert ranges(result)[0] == ("raw", FIRST, LAST)
    stale = {e.partition: e.metadata["findings"].value for e in result.asset_events}
    assert sorted(stale) == hour_range(FIRST, LAST)
    assert all(
        f[0]["kind"] == "stale" and "raw-1" in f[0]["detail"] and "raw-2" in f[0]["detail"]
        for f in stale.values()
    )


def test_the_reconcile_command_prints_what_the_sensor_would_request(
    scenario: Scenario,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    landed = landed_copy(scenario, tmp_path)
    use_cli_env(monkeypatch, scenario, landed)
    runs_before = len(scenario.instance.get_run_records())
    assert main(["reconcile", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    sensor = evaluate(scenario, landed)
    assert [(r["layer"], r["first"], r["last"]) for r in document["requests"]] == ranges(sensor)
    assert [(f["hour"], f["kind"], f["client_id"]) for f in document["findings"]] == [
        (LATE, "count_mismatch", None),
        (LATE, "manifest_appeared", 2),
    ]
    assert document["requests"][0]["tags"][tags.REQUESTED_BY] == "reconciliation-sensor"
    assert main(["reconcile", "--source", "ledger"]) == 1
    text = capsys.readouterr().out
    assert "published state from the publication ledger" in text
    assert f"{LATE}  raw  count_mismatch" in text and f"raw          {LATE}..{LATE}" in text
    assert len(scenario.instance.get_run_records()) == runs_before  # launched nothing


def test_dry_run_diff_report_then_backfill_leaves_nothing_to_reconcile(
    scenario: Scenario,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    landed = landed_copy(scenario, tmp_path)
    found = evaluate(scenario, landed)
    defs = build_definitions(dataclasses.replace(scenario.settings, backup_root=str(landed)))
    request = {findings.REQUEST_ID_TAG: "req-e2e"}
    (dry,) = launch.launch(
        defs,
        scenario.instance,
        [("raw", LATE, LATE)],
        steps="shadow",
        reason="late files of client 2",
        requested_by="bob",
        extra_tags=request,
    )
    assert dry.success, dry.failures

    layers = list(registry.LAYERS.values())
    report = build_report(
        scenario.instance,
        layers,
        run_id=dry.run_id,
        diff=lambda layer, version, hours: diff_layer(spark, layer.pairs, version, hours),
    )
    (run,) = report.runs
    assert run.dry_run and run.manifest["requested_by"] == "bob"
    payloads = {p.table: p for p in run.partitions}["raw.payloads"]
    client_2 = [p for h, p in expected.read_deliveries(landed) if h == LATE and p.client_id == 2]
    assert payloads.status == "would publish"
    assert payloads.after - payloads.before == len(client_2)
    diff = run.diff["raw.payloads"][LATE]
    assert (diff.added, diff.removed, diff.changed) == (len({p.payload_id for p in client_2}), 0, 0)
    assert diff.unchanged == payloads.before  # no duplicate delivery in this hour
    markdown, chart = report.write(tmp_path / "report")
    text = markdown.read_text()
    assert f"# Backfill report: run {dry.run_id}" in text
    assert "| hour | table | before | after | change | status | added | removed | changed |" in text
    assert f"| {LATE} | raw.payloads | {payloads.before} | {payloads.after} |" in text
    assert "![rows per hour, before and after](rows_per_hour.png)" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (publish,) = launch.launch(
        defs, scenario.instance, [("raw", LATE, LATE)], steps="publish", extra_tags=request
    )
    assert publish.success, publish.failures
    after = evaluate(scenario, landed, found.cursor)
    assert after.run_requests == [] and "no findings" in after.skip_reason.skip_message
    (resolved,) = after.asset_events
    assert (resolved.partition, resolved.metadata["reconciliation"].value) == (LATE, "resolved")

    use_cli_env(monkeypatch, scenario, landed)
    assert main(["report", "--backfill", "req-e2e", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert f"raw: 1 hour(s) published, 1 with different rows ({LATE})" in out
    assert "would publish" in out and "added" in out
    assert (tmp_path / "cli" / "report.md").exists()
    assert (tmp_path / "cli" / "rows_per_hour.png").exists()
