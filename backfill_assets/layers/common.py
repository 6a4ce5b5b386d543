"""What every layer shares: backfill policy, lineage columns and metadata, the publish asset."""

import hashlib
import json
import time

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.partitions import hourly_partitions
from backfill_assets.publishing import publisher
from backfill_assets.resources import SHADOW_IO_MANAGER
from backfill_assets.resources.warehouse import Warehouse

SINGLE_RUN = dg.BackfillPolicy.single_run()


def shadow_out(key: dg.AssetKey, *, group: str, code_version: str, description: str) -> dg.AssetOut:
    """An output written by the shadow IO manager into a run-scoped shadow table."""
    return dg.AssetOut(
        key=key,
        io_manager_key=SHADOW_IO_MANAGER,
        group_name=group,
        code_version=code_version,
        kinds={"spark", "parquet"},
        description=description,
    )


def with_lineage(df: DataFrame, context: dg.AssetExecutionContext, code_version: str) -> DataFrame:
    """Add the lineage columns every table carries: the run and the code that wrote the row."""
    return df.withColumn("run_id", F.lit(context.run_id)).withColumn(
        "code_version", F.lit(code_version)
    )


def run_lineage(context: dg.AssetExecutionContext, code_version: str) -> dict:
    """Lineage metadata common to every materialization of the project."""
    keys = context.partition_keys
    manifest = tags.run_manifest(context.run.tags)
    return {
        "run_id": context.run_id,
        "backfill_id": manifest["backfill_id"] or "",
        "code_version": code_version,
        "mode": manifest["mode"],
        "reason": manifest["reason"] or "",
        "requested_by": manifest["requested_by"] or "",
        "ticket": manifest["ticket"] or "",
        "partition_range": f"{keys[0]}..{keys[-1]}" if keys else "",
        "hours": len(keys),
    }


def digest_of(items: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(items)).encode()).hexdigest()


def publish_asset(
    layer: publisher.Layer,
    *,
    name: str,
    group: str,
    descriptions: dict[str, str],
    deps: list[dg.AssetKey],
) -> dg.AssetsDefinition:
    """The published asset(s) of a layer: swap the checked shadow partitions into place.

    Hours whose newest shadow version passed every check are published (materialized);
    the others are held back and the step fails naming them, so the catalog shows exactly
    which partitions are published.
    """
    specs = [
        dg.AssetSpec(
            dg.AssetKey(table.split(".")),
            description=descriptions[table],
            group_name=group,
            code_version=layer.code_version,
            partitions_def=hourly_partitions,
            deps=deps,
            kinds={"spark", "parquet"},
        )
        for _, table in layer.pairs
    ]

    @dg.multi_asset(
        name=name,
        specs=specs,
        partitions_def=hourly_partitions,
        backfill_policy=SINGLE_RUN,
        can_subset=False,
    )
    def _publish(
        context: dg.AssetExecutionContext,
        warehouse: Warehouse,
    ):
        started = time.monotonic()
        hours = list(context.partition_keys)
        outcomes = publisher.publish(
            warehouse.spark,
            warehouse.warehouse_dir,
            layer,
            hours,
            run_id=context.run_id,
            manifest=tags.run_manifest(context.run.tags),
        )
        lineage = run_lineage(context, layer.code_version)
        held = {o.hour: o.reasons for o in outcomes if o.status == "held_back"}
        done = [o for o in outcomes if o.status != "held_back"]
        context.log.info(
            f"{layer.name}: published {sum(o.status == 'published' for o in outcomes)} hour(s), "
            f"{sum(o.status == 'unchanged' for o in outcomes)} unchanged, {len(held)} held back "
            f"in {time.monotonic() - started:.1f}s"
        )
        for hour, reasons in held.items():
            context.log.warning(f"{layer.name} {hour} held back: {'; '.join(reasons)}")
        for _, table in layer.pairs:
            per_hour = {
                o.hour: {"status": o.status, "shadow_version": o.version, **o.tables.get(table, {})}
                for o in done
            }
            if held:
                # Only some hours pass: materialize exactly those partitions, then fail.
                for hour, info in per_hour.items():
                    context.log_event(
                        dg.AssetMaterialization(
                            asset_key=dg.AssetKey(table.split(".")),
                            partition=hour,
                            metadata={**lineage, **{k: str(v) for k, v in info.items()}},
                        )
                    )
            else:
                yield dg.MaterializeResult(
                    asset_key=dg.AssetKey(table.split(".")),
                    metadata={**lineage, "published": json_metadata(per_hour)},
                )
        if held:
            raise dg.Failure(
                description=(
                    f"{len(held)} hour(s) of {layer.name} held back, their published data "
                    f"unchanged: {', '.join(sorted(held))}"
                ),
                metadata={"held_back": json_metadata(held), "published": [o.hour for o in done]},
                allow_retries=False,
            )

    return _publish


def json_metadata(value: object) -> dg.MetadataValue:
    return dg.MetadataValue.json(json.loads(json.dumps(value, default=str)))
