"""Reconciliation end to end: a live release, late files, the sensor, the CLI, the report.

One live raw release (module fixture) is shared by the tests; each test that lands the late
files lands them in its own copy of the backup tree. The last test backfills the late hour,
so it stays last in this file. The sensor's evaluation is called directly (``evaluate``):
the sensor itself submits the requested releases as Dagster backfills, which the CLI tests
cover with a real daemon.
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

from backfill_assets.cli.main import main
from backfill_assets.core import names, plan, tags
from backfill_assets.core.backups.store import LocalBackupStore
from backfill_assets.core.hours import backup_hour_path, hour_range
from backfill_assets.core.reconcile import findings
from backfill_assets.core.reporting.diff import diff_layer
from backfill_assets.core.warehouse import audit
from backfill_assets.core.windows import session_hours_touching
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.layers import raw
from backfill_assets.defs.sensors.reconciliation import SENSOR_NAME, Evaluation, releases
from backfill_assets.defs.sensors.reconciliation import evaluate as evaluate_sensor
from backfill_assets.release import keys, state
from backfill_assets.release.estimate import estimate
from backfill_assets.release.keys import table_key
from backfill_assets.release.report import build_report
from backfill_assets.settings import Settings
from backfill_assets_dev import expected
from backfill_assets_dev.generator import generate_backups, land_held_back
from backfill_assets_tests.helpers.releases import (
    ReleaseResult,
    empty_warehouse,
    end_backfill,
    execute_release,
)

FIRST, LAST = "2026-11-20T00", "2026-11-20T03"
LATE = "2026-11-20T01"  # client 2's folder of this hour lands after the live run


@dataclass
class Scenario:
    settings: Settings
    defs: dg.Definitions
    instance: dg.DagsterInstance
    backups: Path
    home: Path
    live: ReleaseResult

    @property
    def live_run_id(self) -> str:  # the run that built the raw shadows
        return self.live.run_of("shadow/raw_payloads_candidate").run_id

    @property
    def publish_run_id(self) -> str:
        return self.live.run_of("release/publish").run_id


@pytest.fixture(scope="module")
def scenario(
    spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    """A live raw release over FIRST..LAST while client 2's folder of LATE is held back."""
    empty_warehouse(spark, base_settings)  # as `warehouse`, once for the module
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
        live = execute_release(
            defs,
            instance,
            FIRST,
            LAST,
            downstream=False,
            extra_tags={
                tags.MODE: "live",
                tags.REASON: "nightly ingest",
                tags.TICKET: "OPS-7",
                tags.REQUESTED_BY: "alice",
            },
        )
        assert live.success, live.failures
        yield Scenario(settings, defs, instance, backups, home, live)


def landed_copy(scenario: Scenario, tmp_path: Path) -> Path:
    """The scenario's backup tree, copied, with the late folder landed."""
    copy = tmp_path / "landed"
    shutil.copytree(scenario.backups, copy)
    assert land_held_back(copy) == ["raw/date=2026-11-20/hour=01/client_id=2"]
    return copy


def evaluate(scenario: Scenario, backups: Path, cursor: str | None = None) -> Evaluation:
    """One evaluation of the sensor (what it records and requests), submitting nothing."""
    layers = list(names.LAYERS.values())
    by_layer = {layer.name: keys.layer_keys(scenario.defs, layer.name) for layer in layers}
    return evaluate_sensor(
        scenario.instance,
        by_layer,
        LocalBackupStore(root=str(backups)),
        findings.ReconcileConfig.from_env({}),
        cursor,
        layers,
    )


def ranges(evaluation: Evaluation) -> list[tuple[str, str, str]]:
    return [(r.layer, r.first, r.last) for r in evaluation.requests]


def use_cli_env(monkeypatch: pytest.MonkeyPatch, scenario: Scenario, backups: Path) -> None:
    monkeypatch.setenv("BACKUP_ROOT", str(backups))
    monkeypatch.setenv("DATA_ROOT", scenario.settings.data_root)
    monkeypatch.setenv("DAGSTER_HOME", str(scenario.home))


def test_the_run_manifest_reaches_the_ledger_and_the_lineage(
    scenario: Scenario, spark: SparkSession
) -> None:
    ledger = (
        audit.read(spark, audit.PUBLICATIONS)
        .where(F.col("backfill_id") == scenario.live.release_id)
        .collect()
    )
    assert {r["run_id"] for r in ledger} == {scenario.publish_run_id}
    assert len({r["txn_id"] for r in ledger}) == 1  # one transaction for the release
    assert {(r["table_name"], r["phase"]) for r in ledger} == {
        (t, p) for t in ("raw.payloads", "raw.quarantine") for p in ("prepare", "commit")
    }
    assert {
        (r["reason"], r["requested_by"], r["ticket"], r["run_mode"], r["code_version"])
        for r in ledger
    } == {("nightly ingest", "alice", "OPS-7", "live", raw.CODE_VERSION)}
    for key, run_id in (
        (raw.PAYLOADS, scenario.publish_run_id),
        (raw.SHADOW_PAYLOADS, scenario.live_run_id),
    ):
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
        ) == ("live", "nightly ingest", "alice", "OPS-7", run_id)
        assert meta["backfill_id"] == scenario.live.release_id
    # the two readers of the published state agree
    layers = list(names.LAYERS.values())
    from_ledger = state.published_from_ledger(
        audit.warehouse_of(spark), layers, hour_range(FIRST, LAST)
    )["raw"]
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


def drift(evaluation: Evaluation) -> list[dg.AssetObservation]:
    """The evaluation's per-hour observations (not the per-layer health ones)."""
    return [e for e in evaluation.result.asset_events if e.partition]


def test_before_the_late_files_land_the_sensor_sees_nothing_without_spark(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*args, **kwargs):
        raise AssertionError("the reconciliation sensor must not start Spark")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", no_spark)
    evaluation = evaluate(scenario, scenario.backups)
    assert evaluation.requests == [] and drift(evaluation) == []
    # each layer's health, once (until it changes): every hour of the window in order
    health = {e.asset_key: e.metadata for e in evaluation.result.asset_events}
    assert set(health) == {table_key(layer.pairs[0][1]) for layer in names.LAYERS.values()}
    assert all(m["damaged_hours"].value == 0 for m in health.values())
    # the live release published raw only: the other layers' hours are not healthy, named
    raw_key = table_key(names.LAYERS["raw"].pairs[0][1])
    assert health[raw_key]["completeness"].value == 1.0
    assert health[raw_key]["unpublished_hours"].value == 0
    for key, numbers in health.items():
        if key != raw_key:
            assert numbers["completeness"].value == 0.0
            assert numbers["unpublished"].value == hour_range(FIRST, LAST)
    again = evaluate(scenario, scenario.backups, evaluation.result.cursor)
    assert again.result.asset_events == []  # nothing changed: nothing recorded
    message = evaluation.result.skip_reason.skip_message
    assert message.startswith("no findings in what is published; not published: ")
    assert f"transformed {FIRST}..{LAST} (4 of 4 hour(s))" in message
    # the sensor itself: nothing to submit, no Spark
    use_cli_env(monkeypatch, scenario, scenario.backups)
    sensor = scenario.defs.resolve_sensor_def(SENSOR_NAME)
    context = dg.build_sensor_context(
        instance=scenario.instance,
        definitions=scenario.defs,
        resources={"backups": LocalBackupStore(root=str(scenario.backups))},
    )
    result = sensor(context)
    assert result.run_requests in (None, []) and "no findings" in result.skip_reason.skip_message


def test_late_files_are_requested_once_with_the_session_hours_around_them(
    scenario: Scenario, tmp_path: Path
) -> None:
    landed = landed_copy(scenario, tmp_path)
    first = evaluate(scenario, landed)
    # exactly the late raw hour, and each later layer's hours for it, clipped to the tree
    wanted = []
    for layer, start, end in plan.plan_ranges(list(names.LAYERS), LATE, LATE):
        hours = [h for h in hour_range(start, end) if FIRST <= h <= LAST]
        wanted.append((layer, hours[0], hours[-1]))
    assert ranges(first) == wanted
    assert wanted[0] == ("raw", LATE, LATE)
    for name in names.LAYERS:  # session hours whose windows touch the late hour
        if name not in names.RECEIVED_HOUR_LAYERS:
            lo, hi = session_hours_touching(LATE, LATE)
            assert (name, max(lo, FIRST), min(hi, LAST)) in wanted
    # ONE release covers them all: rooted at the raw hour, downstream derived by Dagster
    [(root, chain)] = releases(first.requests)
    assert (root.layer, root.first, root.last, chain) == ("raw", LATE, LATE, list(plan.LAYERS))
    for request in first.requests:
        request_tags = request.tags(first.request_id)
        assert request_tags[tags.REQUESTED_BY] == "reconciliation-sensor"
        assert request_tags[tags.MODE] == "backfill"
        assert request_tags[tags.REASON].startswith(f"reconciliation: count_mismatch in raw {LATE}")
        assert "manifest_appeared" in request_tags[tags.REASON]
    assert len({r.run_key for r in first.requests}) == len(first.requests)
    (observation,) = drift(first)
    raw_health = first.reconciliation.health()["raw"]
    window = len(first.reconciliation.window.hours)
    assert (raw_health["damaged_hours"], raw_health["oldest_damage_hour"]) == (1, LATE)
    assert raw_health["completeness"] == round((window - 1) / window, 4)
    assert raw_health["oldest_damage_age_hours"] > 0
    assert (observation.asset_key, observation.partition) == (raw.PAYLOADS, LATE)
    assert observation.metadata["kinds"].value == "count_mismatch, manifest_appeared"
    assert observation.metadata["action"].value.startswith(f"backfill requested: raw {LATE}")

    second = evaluate(scenario, landed, first.result.cursor)
    assert second.requests == []
    assert "nothing new to request" in second.result.skip_reason.skip_message

    # a run already rebuilding the raw hour (launched by anyone) is not requested again
    queued = dg.DagsterRun(
        job_name="__ASSET_JOB",
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset(keys.layer_keys(scenario.defs, "raw")),
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
    # one release per hour at a time: the hours it holds are not requested in any layer
    assert ranges(third) == []


def test_a_bumped_code_version_reports_published_partitions_stale(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(names.LAYERS, "raw", dataclasses.replace(raw.LAYER, code_version="raw-2"))
    result = evaluate(scenario, scenario.backups)
    assert ranges(result)[0] == ("raw", FIRST, LAST)
    stale = {e.partition: e.metadata["findings"].value for e in drift(result)}
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
    assert set(document["health"]) == set(names.LAYERS)
    assert document["health"]["raw"]["damaged_hours"] == 1
    assert document["health"]["raw"]["oldest_damage_hour"] == LATE
    assert main(["reconcile", "--source", "ledger"]) == 1
    text = capsys.readouterr().out
    assert "published state from the publication ledger" in text
    assert f"{LATE}  raw  count_mismatch" in text, text
    assert f"raw          {LATE}..{LATE}" in text, text
    assert "health raw: " in text and f"1 to repair; oldest damage {LATE}" in text
    assert len(scenario.instance.get_run_records()) == runs_before  # launched nothing


def test_the_sensor_submits_the_release_as_one_backfill_launched_by_it(
    scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sensor itself (not its evaluation): one Dagster asset backfill through GraphQL,
    marked as the sensor's (the UI's "launched by"), with the request's manifest. No daemon
    runs here, so the backfill stays requested; the demo runs one to the end."""
    landed = landed_copy(scenario, tmp_path)
    use_cli_env(monkeypatch, scenario, landed)
    before = {b.backfill_id for b in scenario.instance.get_backfills()}
    sensor = scenario.defs.resolve_sensor_def(SENSOR_NAME)
    context = dg.build_sensor_context(
        instance=scenario.instance,
        definitions=scenario.defs,
        resources={"backups": LocalBackupStore(root=str(landed))},
    )
    result = sensor(context)
    (backfill,) = [b for b in scenario.instance.get_backfills() if b.backfill_id not in before]
    assert f"submitted release(s) {backfill.backfill_id} for reconcile-" in (
        result.skip_reason.skip_message
    )
    assert backfill.tags[tags.DAGSTER_SENSOR] == SENSOR_NAME
    assert backfill.tags[tags.REQUESTED_BY] == "reconciliation-sensor"
    assert backfill.tags[tags.MODE] == "backfill"
    assert backfill.tags[tags.REQUEST_ID] in result.skip_reason.skip_message
    assert backfill.tags[tags.REASON].startswith(f"reconciliation: count_mismatch in raw {LATE}")
    assert backfill.title == f"reconcile raw {LATE}..{LATE}"
    # the release: the late raw hour and everything Dagster derives from it, then publish
    targets = backfill.asset_backfill_data.target_subset
    raw_hours = {
        p.partition_key
        for p in targets.iterate_asset_partitions()
        if p.asset_key in (raw.PAYLOADS, raw.SHADOW_PAYLOADS)
    }
    assert raw_hours == {LATE}
    assert set(backfill.asset_selection) == set(
        keys.release_selection(scenario.defs, list(plan.LAYERS))
    )
    # the observations the daemon records for the tick name the request
    (observation,) = [e for e in result.asset_events if e.partition]
    assert observation.metadata["request_id"].value == backfill.tags[tags.REQUEST_ID]
    end_backfill(scenario.instance, backfill.backfill_id, "CANCELED")  # no daemon runs it


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
    dry = execute_release(
        defs,
        scenario.instance,
        LATE,
        LATE,
        downstream=False,
        publish=False,
        extra_tags={tags.REASON: "late files of client 2", tags.REQUESTED_BY: "bob"},
    )
    assert dry.success, dry.failures

    layers = list(names.LAYERS.values())
    report = build_report(
        scenario.instance,
        layers,
        backfill_id=dry.release_id,
        diff=lambda layer, version, hours: diff_layer(spark, layer.pairs, version, hours),
    )
    assert report.dry_run
    (run,) = report.runs
    assert run.dry_run and run.manifest["requested_by"] == "bob"
    payloads = {p.table: p for p in report.partitions}["raw.payloads"]
    client_2 = [p for h, p in expected.read_deliveries(landed) if h == LATE and p.client_id == 2]
    assert payloads.status == "would publish"
    assert payloads.after - payloads.before == len(client_2)
    diff = report.diff["raw.payloads"][LATE]
    assert (diff.added, diff.removed, diff.changed) == (len({p.payload_id for p in client_2}), 0, 0)
    assert diff.unchanged == payloads.before  # no duplicate delivery in this hour
    assert report.headline()[0] == (
        f"raw: 1 hour(s) would be published (dry run), 1 with different rows ({LATE})"
    )
    # speed and cost, from the run's lineage: the hour's manifests and Spark's task time
    speed = report.speed()
    manifests = sum(run.read["manifest_records_per_hour"].values())
    assert speed["payloads"] == manifests > 0 and speed["traffic_hours"] == 1
    # both shown to 0.1: the multiple of the exact wall time, within the rounded wall's range
    wall = speed["wall_seconds"]
    assert 3600 / (wall + 0.05) - 0.05 <= speed["real_time_multiple"] <= 3600 / (wall - 0.05) + 0.05
    # the estimate for the next launch: the hour's manifests at the rate measured here
    guess = estimate(scenario.instance, LocalBackupStore(root=str(landed)), [LATE])
    sizes = [f["bytes"] for m in landed.glob(f"raw/{backup_hour_path(LATE)}/*/_MANIFEST.json")
             for f in json.loads(m.read_text())["files"]]  # fmt: skip
    assert (guess.files, guess.bytes, guess.records) == (len(sizes), sum(sizes), manifests)
    assert guess.rate > 0 and guess.seconds == pytest.approx(sum(sizes) / guess.rate)
    assert f"about {guess.seconds:,.0f} s" in guess.line()
    assert speed["task_core_seconds"] > 0 and speed["held_core_seconds"] > 0
    markdown, chart = report.write(tmp_path / "report")
    text = markdown.read_text()
    assert f"# Backfill report: release {dry.release_id}" in text
    assert "| hour | table | before | after | change | status | added | removed | changed |" in text
    assert f"| {LATE} | raw.payloads | {payloads.before} | {payloads.after} |" in text
    assert "![rows per hour, before and after](rows_per_hour.png)" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    publish = execute_release(defs, scenario.instance, LATE, LATE, publish_only=dry.release_id)
    assert publish.success, publish.failures
    after = evaluate(scenario, landed, found.result.cursor)
    assert after.requests == [] and "no findings" in after.result.skip_reason.skip_message
    (resolved,) = drift(after)
    assert (resolved.partition, resolved.metadata["reconciliation"].value) == (LATE, "resolved")

    # The same release's report after publishing: what it replaced.
    use_cli_env(monkeypatch, scenario, landed)
    assert main(["report", "--backfill", dry.release_id, "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert f"raw: 1 hour(s) published, 1 with different rows ({LATE})" in out
    assert "published before vs after" in out and "would publish" not in out
    assert "x real time" in out and "executor core-seconds of Spark tasks" in out
    assert (tmp_path / "cli" / "report.md").exists()
    assert (tmp_path / "cli" / "rows_per_hour.png").exists()
