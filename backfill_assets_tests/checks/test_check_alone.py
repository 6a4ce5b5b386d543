"""A check launched alone (from the UI) evaluates the newest candidate; never a blind pass."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import functions as F

from backfill_assets.definitions import build_definitions
from backfill_assets.layers.raw import MANIFEST_RECONCILIATION, ROW_RULES, SHADOW_PAYLOADS
from backfill_assets.publishing import audit

FIRST, LAST = "2026-11-20T00", "2026-11-20T01"
CHECKS = {dg.AssetCheckKey(SHADOW_PAYLOADS, name) for name in (ROW_RULES, MANIFEST_RECONCILIATION)}


def check_alone(defs: dg.Definitions, instance, first: str | None, last: str | None):
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection=CHECKS
    )
    run_tags = (
        {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        if first
        else {}
    )
    result = job.execute_in_process(instance=instance, tags=run_tags, raise_on_error=False)
    evaluations = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
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
    assert set(evaluations) == {ROW_RULES, MANIFEST_RECONCILIATION}
    assert all(e.passed and e.description == "2 hour(s) pass" for e in evaluations.values())
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
        assert set(evaluations) == {ROW_RULES, MANIFEST_RECONCILIATION}
        for evaluation in evaluations.values():
            assert not evaluation.passed
            assert evaluation.description.startswith("not evaluated: ") and why in (
                evaluation.description
            )
