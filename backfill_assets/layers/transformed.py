"""Transformed layer: the published raw payloads of each received hour, de-duplicated by
``payload_id`` within the hour and with ``page_url`` normalized; published after the checks."""

import time

import dagster as dg
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.layers import raw
from backfill_assets.layers.common import (
    SINGLE_RUN,
    json_metadata,
    publish_asset,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.layers.urls import normalize_url_column
from backfill_assets.partitions import hourly_partitions
from backfill_assets.publishing.publisher import Layer
from backfill_assets.publishing.tables import published_hours, table_exists
from backfill_assets.resources.warehouse import Warehouse

CODE_VERSION = "transformed-1"
GROUP = "transformed"
SHADOW_PAYLOADS = dg.AssetKey(["shadow", "transformed_payloads"])
PAYLOADS = dg.AssetKey(["transformed", "payloads"])
SOURCE_TABLE = "raw.payloads"
TABLE = "transformed.payloads"

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
ROW_RULES = "transformed_row_rules"
RAW_RECONCILIATION = "transformed_raw_reconciliation"

PAYLOAD_COLUMNS = list(raw.PAYLOAD_COLUMNS)
# The copy of a payload kept within an hour: earliest delivery, then every other column, so
# the choice is the same in every run whatever the order Spark reads the rows in (copies
# that tie on all of these are identical, so which one is kept does not matter).
DEDUPLICATION_ORDER = [
    "received_at",
    "event_time",
    *(c for c in PAYLOAD_COLUMNS if c not in ("payload_id", "received_at", "event_time")),
]

LAYER = Layer(
    name="transformed",
    checked_table="shadow.transformed_payloads",
    pairs=(("shadow.transformed_payloads", TABLE),),
    checks=(ROW_RULES, RAW_RECONCILIATION),
    code_version=CODE_VERSION,
)


def deduplicate(payloads: DataFrame, keys: list[str]) -> DataFrame:
    """One row per ``keys`` + ``payload_id``: the first in ``DEDUPLICATION_ORDER``."""
    order = [F.col(c).asc_nulls_last() for c in DEDUPLICATION_ORDER if c in payloads.columns]
    rank = F.row_number().over(Window.partitionBy(*keys, "payload_id").orderBy(*order))
    return payloads.withColumn("_rank", rank).where(F.col("_rank") == 1).drop("_rank")


def transform(raw_payloads: DataFrame) -> DataFrame:
    """Published raw rows (with ``hour``) -> transformed rows (without lineage columns)."""
    return deduplicate(raw_payloads.select(*PAYLOAD_COLUMNS, "hour"), ["hour"]).withColumn(
        "page_url", normalize_url_column(F.col("page_url"))
    )


def unpublished_hours(
    spark: SparkSession, table: str, hours: list[str], allowed_missing: set[str]
) -> list[str]:
    """Hours of ``hours`` without a published partition of ``table`` (and not declared empty)."""
    published = set(published_hours(spark, table))
    return [h for h in hours if h not in published and h not in allowed_missing]


@dg.multi_asset(
    name="transformed_shadow",
    outs={
        "transformed_payloads": shadow_out(
            SHADOW_PAYLOADS,
            group=GROUP,
            code_version=CODE_VERSION,
            description="Distinct payloads of the received hour with page_url normalized, "
            "one immutable shadow version per run.",
        ),
    },
    deps=[raw.PAYLOADS],
    partitions_def=hourly_partitions,
    backfill_policy=SINGLE_RUN,
    can_subset=False,
)
def transformed_shadow(context: dg.AssetExecutionContext, warehouse: Warehouse):
    """Rebuild the transformed shadow table of the hours from the published raw payloads."""
    started = time.monotonic()
    hours = list(context.partition_keys)
    spark = warehouse.spark
    # Only hours named in the tag: a blanket "true" is for the raw layer, which then
    # publishes hours without backups as empty partitions (so they are published here).
    allowed = tags.allowed_missing_hours(context.run.tags, [])
    missing = unpublished_hours(spark, SOURCE_TABLE, hours, allowed)
    if missing or not table_exists(spark, SOURCE_TABLE):
        missing = missing or hours
        raise dg.Failure(
            description=(
                f"{SOURCE_TABLE} is not published for {len(missing)} hour(s) the transformed "
                f"layer reads: {', '.join(missing)}; backfill the raw layer first (or declare "
                f"hours without backups empty with {tags.ALLOW_MISSING_HOURS})"
            ),
            metadata={"missing_hours": missing},
            allow_retries=False,
        )
    source = spark.table(SOURCE_TABLE).where(F.col("hour").isin(hours))
    transformed = with_lineage(transform(source), context, CODE_VERSION)
    context.log.info(f"transformed {hours[0]}..{hours[-1]} from {SOURCE_TABLE}")
    yield dg.MaterializeResult(
        asset_key=SHADOW_PAYLOADS,
        value=transformed.select(*PAYLOAD_COLUMNS, "run_id", "code_version", "hour"),
        metadata={
            **run_lineage(context, CODE_VERSION),
            "source_table": SOURCE_TABLE,
            "allowed_missing_hours": json_metadata(sorted(allowed & set(hours))),
            "seconds": round(time.monotonic() - started, 2),
        },
    )


transformed_published = publish_asset(
    LAYER,
    name="transformed_publish",
    group=GROUP,
    descriptions={
        TABLE: "Published transformed payloads: the distinct payloads of each received hour "
        "with page_url normalized.",
    },
    deps=[SHADOW_PAYLOADS],
)
