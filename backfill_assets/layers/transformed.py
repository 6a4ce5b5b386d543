"""Transformed layer: the raw payloads of each received hour (the release's candidates, else
the published ones), de-duplicated by ``payload_id`` within the hour and with ``page_url``
normalized; published by the release after the checks."""

import time
from collections.abc import Iterator

import dagster as dg
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from backfill_assets.checks.digests import id_digest_columns
from backfill_assets.checks.schemas import TransformedPayloadSchema
from backfill_assets.holds import refuse_if_held
from backfill_assets.layers import raw
from backfill_assets.layers.common import (
    SINGLE_RUN,
    refuse,
    release_input,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.layers.urls import normalize_urls
from backfill_assets.names import TRANSFORMED
from backfill_assets.partitions import hourly_partitions
from backfill_assets.publishing.tables import table_key
from backfill_assets.resources.io_managers import UpstreamGap
from backfill_assets.resources.launch_form import LaunchForm
from backfill_assets.resources.shadow_stats import WithRules

CODE_VERSION = TRANSFORMED.code_version
GROUP = "transformed"
SHADOW_PAYLOADS = table_key("shadow.transformed_payloads")
PAYLOADS = table_key("transformed.payloads")
SOURCE_TABLE = "raw.payloads"
TABLE = TRANSFORMED.tables[0]

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
ROW_RULES, RAW_RECONCILIATION = TRANSFORMED.checks

PAYLOAD_COLUMNS = list(raw.PAYLOAD_COLUMNS)
# The copy of a payload kept within an hour: earliest delivery, then every other column, so
# the choice is the same in every run whatever the order Spark reads the rows in (copies
# that tie on all of these are identical, so which one is kept does not matter).
DEDUPLICATION_ORDER = [
    "received_at",
    "event_time",
    *(c for c in PAYLOAD_COLUMNS if c not in ("payload_id", "received_at", "event_time")),
]

LAYER = TRANSFORMED


def deduplicate(payloads: DataFrame, keys: list[str]) -> DataFrame:
    """One row per ``keys`` + ``payload_id``: the first in ``DEDUPLICATION_ORDER``."""
    order = [F.col(c).asc_nulls_last() for c in DEDUPLICATION_ORDER if c in payloads.columns]
    rank = F.row_number().over(Window.partitionBy(*keys, "payload_id").orderBy(*order))
    return payloads.withColumn("_rank", rank).where(F.col("_rank") == 1).drop("_rank")


def transform(raw_payloads: DataFrame) -> DataFrame:
    """Published raw rows (with ``hour``) -> transformed rows (without lineage columns)."""
    distinct = deduplicate(raw_payloads.select(*PAYLOAD_COLUMNS, "hour"), ["hour"])
    return normalize_urls(distinct, "page_url")


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
    ins={
        "raw_payloads": release_input(
            raw.SHADOW_PAYLOADS, published=SOURCE_TABLE, reader=LAYER.checked_table
        )
    },
    partitions_def=hourly_partitions,
    backfill_policy=SINGLE_RUN,
    can_subset=False,
)
def transformed_shadow(
    context: dg.AssetExecutionContext,
    raw_payloads: DataFrame | UpstreamGap,
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
    """Rebuild the transformed shadow table of the hours from the release's raw payloads."""
    refuse_if_held(context)  # an earlier release in flight holds some of its hours
    started = time.monotonic()
    hours = list(context.partition_keys)
    if isinstance(raw_payloads, UpstreamGap):
        yield from refuse(context, raw_payloads.verdict, {"missing_hours": raw_payloads.missing})
        return
    transformed = with_lineage(transform(raw_payloads), context, CODE_VERSION)
    context.log.info(f"transformed {hours[0]}..{hours[-1]}")
    yield dg.MaterializeResult(
        asset_key=SHADOW_PAYLOADS,
        # the check's rules and id digests counted in the read-back of what is written
        value=WithRules(
            transformed.select(*PAYLOAD_COLUMNS, "run_id", "code_version", "hour"),
            TransformedPayloadSchema,
            id_digest_columns(),
        ),
        metadata={
            **run_lineage(context, CODE_VERSION),
            "source_table": SOURCE_TABLE,
            "seconds": round(time.monotonic() - started, 2),
        },
    )
