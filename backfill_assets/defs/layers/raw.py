"""Raw layer: backup lines read into shadow tables (published by the release after checks)."""

import time

import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from backfill_assets.core import faults
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.reader import read_folders
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.layers import raw as core_raw
from backfill_assets.core.layers import rules
from backfill_assets.core.layers.shadow_stats import Measured, added_groups, stats_of
from backfill_assets.core.names import (
    BACKUP_PROBLEMS,
    ERASED_LINES,
    HOUR_BACKUP_PROBLEMS,
    HOUR_INPUT_FILES,
    INPUT_FILES_LIST,
    LINES_READ,
    MANIFEST_RECORDS,
    MAX_LISTED_FILES,
    MAX_LISTED_PROBLEMS,
    RAW,
    RECEIVED_OUTSIDE,
)
from backfill_assets.core.warehouse import audit, erasure
from backfill_assets.core.warehouse.tables import run_id
from backfill_assets.defs.layers.common import (
    digest_of,
    json_metadata,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.defs.partitions import RUN_POLICY, hourly_partitions
from backfill_assets.defs.resources.launch_form import LaunchForm
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.holds import refuse_if_held
from backfill_assets.release.keys import table_key

CODE_VERSION = RAW.code_version
GROUP = "raw"
SHADOW_PAYLOADS = table_key("shadow.raw_payloads")
SHADOW_QUARANTINE = table_key("shadow.raw_quarantine")
PAYLOADS = table_key("raw.payloads")
QUARANTINE = table_key("raw.quarantine")

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
ROW_RULES, MANIFEST_RECONCILIATION = RAW.checks
LAYER = RAW


def _inventory(
    context: dg.AssetExecutionContext, backups: BackupStore, hours: list[str]
) -> tuple[dict, dict[str, list]]:
    """The hours' inventory (logged, with its problems) and each hour's closed files."""
    inventory = take_inventory(backups, hours)
    folders = [f for h in inventory.values() for f in h.folders if f.closed]
    hour_files = {
        h: [f for d in inv.folders if d.closed for f in d.files] for h, inv in inventory.items()
    }
    files = [f for listed in hour_files.values() for f in listed]
    context.log.info(
        f"backups {hours[0]}..{hours[-1]}: {len(folders)} closed folder(s), {len(files)} file(s), "
        f"{sum(h.expected_records for h in inventory.values())} manifest records"
    )
    for problem in (p for h in inventory.values() for p in h.all_problems):
        context.log.warning(problem)
    return inventory, hour_files


def _record_erased(
    context: dg.AssetExecutionContext, warehouse: Warehouse, counted: list[dict]
) -> None:
    """The lines of erased users left out, per (hour, client), in the audit table."""
    audit.append(
        warehouse.warehouse_dir,
        audit.ERASED_LINES,
        [
            {
                "table_name": LAYER.checked_table,
                "hour": row["hour"],
                "version": run_id(context.run_id),
                "client_id": row["client_id"],
                "lines": int(row["erased"]),
                "run_id": context.run_id,
                "recorded_at": audit.now(),
            }
            for row in counted
            if row["erased"]
        ],
    )


def _hour_read(
    hour_inventory,
    files: list,
    read_of: dict[tuple[str, str], int],
    hour: str,
    *,
    outside: int,
    erased: int,
) -> dict:
    """What one hour read: its manifest records, its lines received outside the hour and
    erased, its files (the first few listed with the lines read of each) and its backup
    problems."""
    read = {
        MANIFEST_RECORDS: hour_inventory.expected_records,
        RECEIVED_OUTSIDE: outside,
        ERASED_LINES: erased,
        HOUR_INPUT_FILES: len(files),
        INPUT_FILES_LIST: json_metadata(
            [
                {
                    "file": f.rel_path,
                    "sha256": f.sha256,
                    "records": f.records,
                    LINES_READ: read_of.get((hour, f.rel_path), 0),
                }
                for f in files[:MAX_LISTED_FILES]
            ]
        ),
    }
    hour_problems = hour_inventory.all_problems
    if hour_problems:
        read[HOUR_BACKUP_PROBLEMS] = json_metadata(hour_problems[:MAX_LISTED_PROBLEMS])
    return read


def _lineage(
    context: dg.AssetExecutionContext,
    files: list,
    problems: int,
    outside: dict[str, int],
    erased_lines: dict[str, int],
) -> dict:
    """The run's lineage and what it read, on both shadow tables' materializations."""
    return {
        **run_lineage(context, CODE_VERSION),
        "input_files": len(files),
        "input_bytes": sum(max(f.size, 0) for f in files),
        "input_digest": digest_of([f"{f.rel_path}:{f.sha256}" for f in files]),
        "received_outside_hour": sum(outside.values()),
        "erased_lines_total": sum(erased_lines.values()),
        BACKUP_PROBLEMS: problems,
    }


@dg.multi_asset(
    name="raw_shadow",
    outs={
        "raw_payloads": shadow_out(
            SHADOW_PAYLOADS,
            group=GROUP,
            code_version=CODE_VERSION,
            description="Typed copy of every valid backup line of the hour (duplicates kept), "
            "one immutable shadow version per run.",
        ),
        "raw_quarantine": shadow_out(
            SHADOW_QUARANTINE,
            group=GROUP,
            code_version=CODE_VERSION,
            description="Backup lines and files that break the contract: file, line, reason, "
            "raw text; one shadow version per run.",
        ),
    },
    partitions_def=hourly_partitions,
    backfill_policy=RUN_POLICY,
    can_subset=False,
)
def raw_shadow(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    backups: dg.ResourceParam[BackupStore],
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
):
    """Read the closed backup folders of the hours into the raw shadow tables."""
    from backfill_assets.core.layers.models import RawPayloadSchema

    refuse_if_held(context)  # an earlier release in flight holds some of its hours
    started = time.monotonic()
    hours = list(context.partition_keys)
    faults.checkpoint(f"{faults.RAW_BUILD}.{hours[0]}")
    inventory, hour_files = _inventory(context, backups, hours)
    folders = [f for h in inventory.values() for f in h.folders if f.closed]
    files = [f for listed in hour_files.values() for f in listed]
    problems = [p for h in inventory.values() for p in h.all_problems]

    spark = warehouse.spark
    erasures = erasure.digests(spark)
    if erasures:
        context.log.info(f"honouring {len(erasures)} erasure(s): their users' lines are left out")
    with read_folders(spark, backups, folders) as lines:

        def marked(judged: DataFrame) -> DataFrame:  # lineage columns and the erasure mark
            parsed = with_lineage(judged, context, CODE_VERSION)
            return parsed.withColumn("_erased", erasure.line_erased(erasures, erasure.salt()))

        # The per-(hour, client, file) counts: over the valid lines first (the action that
        # reads, judges and caches the files), then over the few other rows; added up, and
        # per (hour, client) for the statistics and the rules.
        first = lines.first_pass(lambda bulk: core_raw.counts(marked(bulk)))
        per_file = added_groups(
            [*first, *core_raw.counts(marked(lines.rest))], ("hour", "client_id", "file")
        )
        read_of = {(g["hour"], g["file"]): int(g[LINES_READ] or 0) for g in per_file}
        counted = added_groups(
            [{k: v for k, v in g.items() if k != "file"} for g in per_file], ("hour", "client_id")
        )
        parsed = marked(lines.all)
        kept = parsed.where(~F.col("_erased"))
        payloads = parsed.where(core_raw.is_payload()).select(
            *core_raw.PAYLOAD_COLUMNS, "run_id", "code_version", "hour"
        )
        rules.precount(
            spark,
            LAYER.checked_table,
            run_id(context.run_id),
            RawPayloadSchema,
            core_raw.RULES_BY,
            counted,
        )
        outside, erased_lines = core_raw.by_hour(counted)
        _record_erased(context, warehouse, counted)
        lineage = _lineage(context, files, len(problems), outside, erased_lines)
        # What each hour read goes on that hour's events only (linear event-log growth).
        for hour in hours:
            read = _hour_read(
                inventory[hour],
                hour_files[hour],
                read_of,
                hour,
                outside=outside.get(hour, 0),
                erased=erased_lines.get(hour, 0),
            )
            for key in (SHADOW_PAYLOADS, SHADOW_QUARANTINE):
                context.add_asset_metadata(read, asset_key=key, partition_key=hour)
        yield dg.MaterializeResult(
            asset_key=SHADOW_PAYLOADS,
            value=Measured(payloads, stats_of(counted)),
            metadata=lineage,
        )
        yield dg.MaterializeResult(
            asset_key=SHADOW_QUARANTINE,
            value=core_raw.quarantine(kept),
            metadata={**lineage, "seconds": round(time.monotonic() - started, 2)},
        )
