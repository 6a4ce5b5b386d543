"""Shared mechanics of the blocking checks: what a run wrote, recording, severity."""

from __future__ import annotations

import dagster as dg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.publishing import audit
from backfill_assets.publishing.tables import run_id


def not_evaluated(context: dg.AssetCheckExecutionContext, why: str) -> list[dg.AssetCheckResult]:
    """Results for every check of the step that say it evaluated nothing (never a pass)."""
    return [
        dg.AssetCheckResult(
            check_name=spec.name,
            asset_key=spec.asset_key,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"not evaluated: {why}",
        )
        for spec in context.check_specs
    ]


def version_to_check(
    context: dg.AssetCheckExecutionContext, spark: SparkSession, table: str
) -> tuple[str, list[str], str]:
    """The shadow version a check step evaluates, its hours, and why nothing (if so).

    In a build run: the version this run wrote. In a run that wrote nothing (the check
    launched alone, from the UI): the newest version written for the run's hours, so a
    re-check evaluates the candidate a publish would take, with the current rules.
    """
    own = context.run.run_id
    hours = written_hours(spark, table, own)
    if hours:
        return own, hours, ""
    wanted = tags.partition_range(context.run.tags)
    if not wanted:
        return own, [], "this run wrote no shadow version and names no hours (choose a range)"
    newest = (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where((F.col("table_name") == table) & F.col("hour").isin(wanted))
        .orderBy(F.col("written_at").desc())
        .select("version")
        .first()
    )
    if newest is None:
        return own, [], f"no shadow version of {table} for {wanted[0]}..{wanted[-1]} yet"
    return newest[0], [h for h in written_hours(spark, table, newest[0]) if h in wanted], ""


def written_hours(spark: SparkSession, table: str, version: str) -> list[str]:
    """Hours of ``table`` that run ``version`` wrote (from ``audit.shadow_partitions``)."""
    rows = (
        audit.read(spark, audit.SHADOW_PARTITIONS)
        .where((F.col("table_name") == table) & (F.col("version") == run_id(version)))
        .select("hour")
        .distinct()
        .collect()
    )
    return sorted(r[0] for r in rows)


def shadow_version(spark: SparkSession, table: str, version: str) -> DataFrame:
    return spark.table(table).where(F.col("version") == run_id(version)).drop("version")


def record_all(
    spark: SparkSession,
    warehouse_dir: str,
    table: str,
    version: str,
    hours: list[str],
    outcomes: dict[str, dict[str, str]],
    checked_by: str | None = None,
) -> None:
    """Append one row per (check, hour) to ``audit.check_results`` (the publisher's gate),
    in one Spark job; ``outcomes`` maps check name -> {failing hour: reason}."""
    now = audit.now()
    audit.append(
        spark,
        warehouse_dir,
        audit.CHECK_RESULTS,
        [
            {
                "table_name": table,
                "hour": h,
                "version": version,
                "check_name": name,
                "passed": h not in failing,
                "detail": failing.get(h, "ok")[:2000],
                "run_id": checked_by or version,
                "checked_at": now,
            }
            for name, failing in outcomes.items()
            for h in hours
        ],
    )


def record_and_log(
    context: dg.AssetCheckExecutionContext,
    spark: SparkSession,
    warehouse_dir: str,
    layer: str,
    table: str,
    version: str,
    hours: list[str],
    failing: dict[str, dict[str, str]],
) -> None:
    """Record every check's per-hour outcome of ``version`` (one job) and log each failing
    hour."""
    record_all(spark, warehouse_dir, table, version, hours, failing, context.run.run_id)
    for name, reasons in failing.items():
        for hour, reason in sorted(reasons.items()):
            context.log.warning(f"{layer} {hour} fails {name}: {reason}")


def result(
    check_name: str,
    asset_key: dg.AssetKey,
    hours: list[str],
    failing: dict[str, str],
    metadata: dict,
) -> dg.AssetCheckResult:
    """One check result for the whole range.

    Severity is ERROR when no hour passes (Dagster then blocks the publish step), WARN
    when only some hours fail: the publish step then publishes exactly the passing hours,
    holds back the failing ones and fails naming them.
    """
    passed = not failing
    severity = (
        dg.AssetCheckSeverity.ERROR
        if failing and len(failing) == len(hours)
        else dg.AssetCheckSeverity.WARN
    )
    names = sorted(failing)
    description = (
        f"{len(hours)} hour(s) pass"
        if passed
        else f"{len(names)} of {len(hours)} hour(s) fail: {', '.join(names[:24])}"
        + (" ..." if len(names) > 24 else "")
    )
    return dg.AssetCheckResult(
        check_name=check_name,
        asset_key=asset_key,
        passed=passed,
        severity=severity,
        description=description,
        metadata={
            "hours_checked": len(hours),
            "hours_failing": len(names),
            "failing_hours": dg.MetadataValue.json({h: failing[h] for h in names}),
            **metadata,
        },
    )
