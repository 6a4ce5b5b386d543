"""Transformed layer: the raw payloads of each received hour (the release's candidates, else
the published ones), de-duplicated by ``payload_id`` within the hour and with ``page_url``
normalized; published by the release after the checks."""

import time
from collections.abc import Iterator

import dagster as dg
from pyspark.sql import DataFrame

from backfill_assets.core.layers import transformed as core_transformed
from backfill_assets.core.layers.digests import id_digest_columns
from backfill_assets.core.layers.shadow_stats import WithRules
from backfill_assets.core.layers.upstream import UpstreamGap
from backfill_assets.core.names import TRANSFORMED
from backfill_assets.defs.layers import raw
from backfill_assets.defs.layers.common import (
    refuse,
    release_input,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.defs.partitions import RUN_POLICY, hourly_partitions
from backfill_assets.defs.resources.launch_form import LaunchForm
from backfill_assets.release.holds import refuse_if_held
from backfill_assets.release.keys import table_key

CODE_VERSION = TRANSFORMED.code_version
GROUP = "transformed"
SHADOW_PAYLOADS = table_key("shadow.transformed_payloads")
PAYLOADS = table_key("transformed.payloads")
SOURCE_TABLE = "raw.payloads"
TABLE = TRANSFORMED.tables[0]

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
ROW_RULES, RAW_RECONCILIATION = TRANSFORMED.checks

LAYER = TRANSFORMED


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
    backfill_policy=RUN_POLICY,
    can_subset=False,
)
def transformed_shadow(
    context: dg.AssetExecutionContext,
    raw_payloads: DataFrame | UpstreamGap,
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
    """Rebuild the transformed shadow table of the hours from the release's raw payloads."""
    from backfill_assets.core.layers.models import TransformedPayloadSchema

    refuse_if_held(context)  # an earlier release in flight holds some of its hours
    started = time.monotonic()
    hours = list(context.partition_keys)
    if isinstance(raw_payloads, UpstreamGap):
        yield from refuse(context, raw_payloads.verdict, {"missing_hours": raw_payloads.missing})
        return
    transformed = with_lineage(core_transformed.transform(raw_payloads), context, CODE_VERSION)
    context.log.info(f"transformed {hours[0]}..{hours[-1]}")
    yield dg.MaterializeResult(
        asset_key=SHADOW_PAYLOADS,
        # the check's rules and id digests counted in the read-back of what is written
        value=WithRules(
            transformed.select(*core_transformed.PAYLOAD_COLUMNS, "run_id", "code_version", "hour"),
            TransformedPayloadSchema,
            id_digest_columns(),
        ),
        metadata={
            **run_lineage(context, CODE_VERSION),
            "source_table": SOURCE_TABLE,
            "seconds": round(time.monotonic() - started, 2),
        },
    )
