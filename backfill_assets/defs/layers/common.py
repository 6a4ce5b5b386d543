"""What every layer shares: backfill policy, shadow outputs and inputs, lineage."""

import hashlib
import json
from collections.abc import Iterator, Mapping

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.names import SHADOW_IO_MANAGER
from backfill_assets.defs.resources.io_managers import (
    PUBLISHED_TABLE,
    READER_TABLE,
    WINDOW_MAY_LACK_DATA,
)
from backfill_assets.release.instance import run_tags


def shadow_out(key: dg.AssetKey, *, group: str, code_version: str, description: str) -> dg.AssetOut:
    """An output written by the shadow IO manager into a run-scoped shadow table."""
    return dg.AssetOut(
        key=key,
        io_manager_key=SHADOW_IO_MANAGER,
        is_required=False,  # a build refused for missing upstream hours writes nothing
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
    windowed: bool = False,
) -> dg.AssetIn:
    """An input read by the shadow IO manager: the upstream shadow's candidates of the same
    release for the hours the release rebuilt, the ``published`` table for the others.
    ``windowed``: each hour is built from a window of upstream hours, and upstream hours
    without data are read as empty (a ``PartialWindow``; those hours are provisional)."""
    return dg.AssetIn(
        key=upstream,
        partition_mapping=partition_mapping,
        input_manager_key=SHADOW_IO_MANAGER,
        metadata={PUBLISHED_TABLE: published, READER_TABLE: reader, WINDOW_MAY_LACK_DATA: windowed},
        dagster_type=dg.Any,  # a DataFrame, a PartialWindow, or an UpstreamGap it refuses on
    )


def with_lineage(df: DataFrame, context: dg.AssetExecutionContext, code_version: str) -> DataFrame:
    """Add the lineage columns every table carries: the run and the code that wrote the row."""
    return df.withColumn("run_id", F.lit(context.run_id)).withColumn(
        "code_version", F.lit(code_version)
    )


def run_lineage(context: dg.AssetExecutionContext, code_version: str) -> dict:
    """Lineage metadata common to every materialization of the project (the run manifest:
    the run's stored tags, the launch form's answers included)."""
    keys = list(context.partition_keys) if context.assets_def.partitions_def else []
    manifest = tags.run_manifest(run_tags(context.instance, context.run_id))
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


def refuse(
    context: dg.AssetExecutionContext, verdict: str, metadata: Mapping[str, object]
) -> Iterator[dg.AssetObservation]:
    """End a step that must not build as an expected outcome, without a stack trace: the
    verdict as an error in the run's log, as a line of run tag ``backfill_assets/refused``
    (run summaries and the CLI count the run as failed) and as an observation, with
    ``metadata``, of each asset the step would have written. Its outputs stay unwritten:
    Dagster skips what depends on them and a backfill marks their partitions failed."""
    context.log.error(verdict)
    lines = tags.refusals(run_tags(context.instance, context.run_id))
    lines.append(f"{context.op_def.name}: {verdict}")
    context.instance.add_run_tags(context.run_id, {tags.REFUSED: "\n".join(lines)})
    for key in sorted(context.selected_asset_keys):
        yield dg.AssetObservation(
            asset_key=key,
            metadata={"verdict": verdict, **{k: json_metadata(v) for k, v in metadata.items()}},
        )


def digest_of(items: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(items)).encode()).hexdigest()


def json_metadata(value: object) -> dg.MetadataValue:
    return dg.MetadataValue.json(json.loads(json.dumps(value, default=str)))
