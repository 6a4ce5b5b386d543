"""What every layer shares: backfill policy, shadow outputs and inputs, lineage."""

import hashlib
import json

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets import tags
from backfill_assets.resources import SHADOW_IO_MANAGER
from backfill_assets.resources.io_managers import PUBLISHED_TABLE, READER_TABLE

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


def release_input(
    upstream: dg.AssetKey,
    *,
    published: str,
    reader: str,
    partition_mapping: dg.PartitionMapping | None = None,
) -> dg.AssetIn:
    """An input read by the shadow IO manager: the upstream shadow's candidates of the same
    release for the hours the release rebuilt, the ``published`` table for the others."""
    return dg.AssetIn(
        key=upstream,
        partition_mapping=partition_mapping,
        input_manager_key=SHADOW_IO_MANAGER,
        metadata={PUBLISHED_TABLE: published, READER_TABLE: reader},
    )


def with_lineage(df: DataFrame, context: dg.AssetExecutionContext, code_version: str) -> DataFrame:
    """Add the lineage columns every table carries: the run and the code that wrote the row."""
    return df.withColumn("run_id", F.lit(context.run_id)).withColumn(
        "code_version", F.lit(code_version)
    )


def run_lineage(context: dg.AssetExecutionContext, code_version: str) -> dict:
    """Lineage metadata common to every materialization of the project."""
    keys = list(context.partition_keys) if context.assets_def.partitions_def else []
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


def json_metadata(value: object) -> dg.MetadataValue:
    return dg.MetadataValue.json(json.loads(json.dumps(value, default=str)))
