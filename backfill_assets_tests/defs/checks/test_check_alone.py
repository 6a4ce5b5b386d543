"""A check launched alone (from the UI) evaluates what it names; never a blind pass."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F

from backfill_assets.core.warehouse import audit
from backfill_assets.definitions import build_definitions
from backfill_assets.defs.checks.common import PRECOUNTED_LOG
from backfill_assets.defs.checks.published import RELEASE_GATE
from backfill_assets.defs.layers.raw import (
    MANIFEST_RECONCILIATION,
    PAYLOADS,
    QUARANTINE,
    ROW_RULES,
    SHADOW_PAYLOADS,
)
from backfill_assets.defs.layers.transformed import RAW_RECONCILIATION
from backfill_assets.defs.layers.transformed import ROW_RULES as TRANSFORMED_ROW_RULES
from backfill_assets.defs.layers.transformed import SHADOW_PAYLOADS as TRANSFORMED
from backfill_assets.release.outcomes import summarize

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"
CHECKS = {dg.AssetCheckKey(SHADOW_PAYLOADS, name) for name in (ROW_RULES, MANIFEST_RECONCILIATION)}


def check_alone(defs: dg.Definitions, instance, first: str | None, last: str | None, checks=CHECKS):
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=checks
    )
    run_tags = (
        {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        if first
        else {}
    )
    result = job.execute_in_process(instance=instance, tags=run_tags, raise_on_error=False)
    evaluations = [
        e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    return result.run_id, evaluations


def test_a_check_alone_rechecks_the_newest_version_of_its_hours(
    spark, run_release, make_backups, instance, settings_for
):
    tree = make_backups(hours=2)
    dry = run_release(tree, FIRST, LAST, downstream=False, publish=False)
    assert dry.success, dry.failures
    (build,) = dry.runs
    defs = build_definitions(settings_for(tree))

    run_id, evaluations = check_alone(defs, instance, FIRST, LAST)
    # the build's check took the rule counts of the build's statistics pass; alone, the
    # check counts them in its own scan of the version (and both pass)
    counted = PRECOUNTED_LOG
    assert any(counted in (r.user_message or "") for r in instance.all_logs(build.run_id))
    assert not any(counted in (r.user_message or "") for r in instance.all_logs(run_id))
    # one evaluation per (check, hour), on the hour's partition
    assert sorted((e.check_name, e.partition) for e in evaluations) == sorted(
        (name, hour) for name in (ROW_RULES, MANIFEST_RECONCILIATION) for hour in (FIRST, LAST)
    )
    assert all(e.passed and e.description == "pass" for e in evaluations)
    assert all(e.metadata["shadow_version"].value == build.run_id for e in evaluations)
    summaries = summarize(evaluations)
    assert {s.description for s in summaries.values()} == {"2 hour(s) pass"}
    history = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(SHADOW_PAYLOADS, ROW_RULES), limit=10
    )
    # the check's history holds a row per hour of each run, none left "planned"/skipped
    assert {(r.run_id, r.partition, r.status.value) for r in history} >= {
        (run_id, FIRST, "SUCCEEDED"),
        (run_id, LAST, "SUCCEEDED"),
    }
    rechecked = (
        audit.read(spark, audit.CHECK_RESULTS)
        .where(F.col("run_id") == run_id)
        .select("version", "hour", "check_name")
        .collect()
    )
    # recorded against the candidate it evaluated (the dry run's), by the checking run
    assert {r.version for r in rechecked} == {build.run_id}
    assert sorted({r.hour for r in rechecked}) == [FIRST, LAST]

    # nothing to evaluate is never a pass
    for first, last, why in (
        ("2026-11-21T00", "2026-11-21T01", "no shadow version of shadow.raw_payloads"),
        (None, None, "names no hours"),
    ):
        _, evaluations = check_alone(defs, instance, first, last)
        assert {e.check_name for e in evaluations} == {ROW_RULES, MANIFEST_RECONCILIATION}
        assert {e.partition for e in evaluations} == ({first, last} if first else {None})
        for evaluation in evaluations:
            assert not evaluation.passed
            assert evaluation.description.startswith("not evaluated: ") and why in (
                evaluation.description
            )


def test_a_transformed_check_alone_reconciles_with_the_raw_of_the_version_s_release(
    spark, run_release, make_backups, instance, settings_for
):
    """Re-checked alone (nothing published yet), the transformed candidate is compared with
    the raw candidates its own release built it from, not with published raw (none)."""
    tree = make_backups(hours=2)
    dry = run_release(
        tree, FIRST, LAST, layers=("raw", "transformed"), downstream=False, publish=False
    )
    assert dry.success, dry.failures
    defs = build_definitions(settings_for(tree))
    checks = {dg.AssetCheckKey(TRANSFORMED, n) for n in (TRANSFORMED_ROW_RULES, RAW_RECONCILIATION)}

    run_id, evaluations = check_alone(defs, instance, FIRST, LAST, checks)

    assert sorted((e.check_name, e.partition) for e in evaluations) == sorted(
        (n, h) for n in (TRANSFORMED_ROW_RULES, RAW_RECONCILIATION) for h in (FIRST, LAST)
    )
    assert all(e.passed for e in evaluations), [e.description for e in evaluations]
    # the build's check took the counts of the IO manager's read-back; alone, it scans
    counted = PRECOUNTED_LOG
    (build,) = dry.runs
    assert any(counted in (r.user_message or "") for r in instance.all_logs(build.run_id))
    assert not any(counted in (r.user_message or "") for r in instance.all_logs(run_id))


def test_the_release_gate_alone_reverifies_the_live_versions_from_the_ledger(
    run_release, make_backups, instance, settings_for
):
    tree = make_backups(hours=2)
    assert run_release(tree, FIRST, LAST, downstream=False).success
    defs = build_definitions(settings_for(tree))
    gate = {dg.AssetCheckKey(PAYLOADS, RELEASE_GATE), dg.AssetCheckKey(QUARANTINE, RELEASE_GATE)}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=gate
    )
    result = job.execute_in_process(
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": LAST,
            "dagster/asset_partition_range_end": "2026-11-20T02",
        },
    )
    verdicts = {
        (e.asset_check_evaluation_data.asset_key, e.asset_check_evaluation_data.partition): (
            e.asset_check_evaluation_data
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert set(verdicts) == {(k.asset_key, h) for k in gate for h in (LAST, "2026-11-20T02")}
    live = verdicts[(PAYLOADS, LAST)]
    assert live.passed and live.description.endswith("passed 2 check(s)")
    never = verdicts[(PAYLOADS, "2026-11-20T02")]
    assert not never.passed and never.description == "not evaluated: nothing published for the hour"
