"""Blocking checks of the transformed shadow table: pandera row rules, and reconciliation
with the raw payloads it was built from (the release's raw candidates, else the published
ones): one row per distinct raw payload id of the hour, no more.

Spark work: the rules and the transformed ids' digests in one aggregation over the
transformed rows (in a build run, the IO manager's read-back of the rows it wrote: no scan
here); the distinct raw ids' digests in one more (of their hashes); the exact per-id
comparison (duplicated, missing and extra ids) only for the hours whose digests differ.
"""

from collections.abc import Mapping

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets.core.layers.digests import (
    NO_IDS,
    id_digest,
    id_digest_columns,
    id_digests,
    id_hashes,
)
from backfill_assets.core.layers.upstream import resolve_upstream
from backfill_assets.defs.checks import common
from backfill_assets.defs.layers.raw import SHADOW_PAYLOADS as RAW_SHADOW
from backfill_assets.defs.layers.transformed import (
    LAYER,
    RAW_RECONCILIATION,
    ROW_RULES,
    SHADOW_PAYLOADS,
    SOURCE_TABLE,
)
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.keys import table_name

LAYER_RAW_SHADOW = table_name(RAW_SHADOW)


def reconcile_with_raw(transformed: DataFrame, raw: DataFrame) -> dict[str, dict[str, int]]:
    """Per hour, in one Spark job: transformed rows, distinct raw payload ids, and the
    payload ids that are duplicated, missing from or extra in the transformed hour."""
    per_id = (
        transformed.select("hour", "payload_id", F.lit(1).alias("t"), F.lit(0).alias("r"))
        .unionByName(raw.select("hour", "payload_id", F.lit(0).alias("t"), F.lit(1).alias("r")))
        .groupBy("hour", "payload_id")
        .agg(F.sum("t").alias("t"), F.max("r").alias("r"))
    )
    rows = (
        per_id.groupBy("hour")
        .agg(
            F.sum("t").alias("rows"),
            F.sum("r").alias("raw_distinct_ids"),
            F.sum(F.when(F.col("t") > 1, 1).otherwise(0)).alias("duplicated_ids"),
            F.sum(F.when((F.col("r") == 1) & (F.col("t") == 0), 1).otherwise(0)).alias(
                "missing_ids"
            ),
            F.sum(F.when((F.col("r") == 0) & (F.col("t") > 0), 1).otherwise(0)).alias("extra_ids"),
        )
        .collect()
    )
    return {r["hour"]: {k: int(r[k]) for k in r.asDict() if k != "hour"} for r in rows}


# ``reconcile_with_raw``'s counts of an hour without rows
NO_COUNTS = {
    "rows": 0,
    "raw_distinct_ids": 0,
    "duplicated_ids": 0,
    "missing_ids": 0,
    "extra_ids": 0,
}


def reconcile_by_digest(
    transformed: DataFrame,
    raw: DataFrame,
    hours: list[str],
    transformed_digests: Mapping[str, tuple[int, tuple[int, ...]]],
) -> dict[str, dict[str, int]]:
    """``reconcile_with_raw``'s counts, hour by hour, from the digests: an hour whose
    transformed rows and raw distinct ids have the same count and digest holds each raw id
    exactly once (no id duplicated, missing or extra); the other hours get the exact
    per-id comparison (one Spark job over them only). ``transformed_digests``: the
    transformed rows' ``id_digests`` (the rule check computes them in its own scan)."""
    # The distinct raw ids of an hour as distinct pairs of their hashes: two longs a row
    # to shuffle instead of the id's text (ids whose both hashes collide count once, with
    # the probability the digest already accepts).
    raw_digests = id_digests(id_hashes(raw).distinct(), hashed=True)
    counts: dict[str, dict[str, int]] = {}
    differing = []
    for hour in hours:
        rows, digest = transformed_digests.get(hour, NO_IDS)
        ids, raw_digest = raw_digests.get(hour, NO_IDS)
        if (rows, digest) != (ids, raw_digest):
            differing.append(hour)
        elif rows:
            counts[hour] = {**NO_COUNTS, "rows": rows, "raw_distinct_ids": ids}
    if differing:
        in_differing = F.col("hour").isin(differing)
        counts.update(reconcile_with_raw(transformed.where(in_differing), raw.where(in_differing)))
    return counts


def reconciliation_failures(hours: list[str], counts: dict[str, dict[str, int]]) -> dict[str, str]:
    """Failing hours -> reason, from ``reconcile_with_raw``'s counts."""
    failing = {}
    for hour in hours:
        c = counts.get(hour, NO_COUNTS)
        if (
            c["rows"] != c["raw_distinct_ids"]
            or c["duplicated_ids"]
            or c["missing_ids"]
            or c["extra_ids"]
        ):
            failing[hour] = (
                f"{c['rows']} transformed row(s) for {c['raw_distinct_ids']} distinct raw "
                f"payload id(s): {c['duplicated_ids']} duplicated, {c['missing_ids']} missing, "
                f"{c['extra_ids']} not in {SOURCE_TABLE}"
            )
    return failing


@dg.multi_asset_check(
    specs=[
        common.check_spec(
            ROW_RULES,
            SHADOW_PAYLOADS,
            "pandera: types, nullability, values, received hour and "
            "normalized page_url of transformed payloads",
        ),
        common.check_spec(
            RAW_RECONCILIATION,
            SHADOW_PAYLOADS,
            "transformed rows = distinct payload ids of the raw hour it was built from "
            "(each exactly once)",
        ),
    ],
    can_subset=False,
)
def transformed_checks(context: dg.AssetCheckExecutionContext, warehouse: Warehouse):
    """Check the transformed shadow version this run wrote, hour by hour; record outcomes."""
    from backfill_assets.core.layers.models import TransformedPayloadSchema

    spark = warehouse.spark
    table = LAYER.checked_table
    version, hours, why = common.version_to_check(context, spark, table)
    if not hours:
        yield from common.not_evaluated(context, why)
        return
    # The rules and the ids' digests: counted by the build in its read-back of what it wrote,
    # else in one scan here; the rows are read again only for the hours whose digests
    # differ from the raw ids'.
    payloads = common.shadow_version(spark, table, version)
    report = common.evaluate_rules(
        context,
        ROW_RULES,
        table,
        version,
        payloads,
        TransformedPayloadSchema,
        ["hour", "payload_id", "client_id", "page_url", "received_at"],
        extra=id_digest_columns(),
    )
    raw = resolve_upstream(
        spark,
        LAYER_RAW_SHADOW,
        SOURCE_TABLE,
        hours,
        common.release_of(context, spark, table, version),
    ).frame
    transformed_digests = {
        hour: (report.group_rows[(hour,)], id_digest(values))
        for (hour,), values in report.group_values.items()
    }
    counts = reconcile_by_digest(payloads, raw, hours, transformed_digests)
    rule_failing = report.reasons
    recon_failing = reconciliation_failures(hours, counts)
    common.record_and_log(
        context,
        spark,
        warehouse.warehouse_dir,
        LAYER.name,
        table,
        version,
        hours,
        {ROW_RULES: rule_failing, RAW_RECONCILIATION: recon_failing},
    )
    yield from common.results(
        context,
        ROW_RULES,
        hours,
        rule_failing,
        version=version,
        per_hour={h: {"rows_checked": report.group_rows.get((h,), 0)} for h in hours},
        on_failure={
            "pandera_errors": report.pandera_errors,
            "failing_examples": report.examples,
        },
    )
    yield from common.results(
        context,
        RAW_RECONCILIATION,
        hours,
        recon_failing,
        version=version,
        per_hour={h: counts.get(h, {}) for h in hours},
    )
