"""Raw layer: backup lines read into shadow tables (published by the release after checks)."""

import time

import dagster as dg
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from backfill_assets.backups.inventory import take_inventory
from backfill_assets.backups.reader import KIND_PAYLOAD, KIND_QUARANTINE, read_folders
from backfill_assets.checks import rules
from backfill_assets.checks.schemas import RawPayloadSchema
from backfill_assets.holds import refuse_if_held
from backfill_assets.layers.common import (
    SINGLE_RUN,
    digest_of,
    json_metadata,
    run_lineage,
    shadow_out,
    with_lineage,
)
from backfill_assets.names import (
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
from backfill_assets.partitions import hourly_partitions
from backfill_assets.publishing import audit, erasure
from backfill_assets.publishing.tables import run_id, table_key
from backfill_assets.resources.backup_store import BackupStore
from backfill_assets.resources.launch_form import LaunchForm
from backfill_assets.resources.shadow_stats import (
    Measured,
    added_groups,
    stats_aggregates,
    stats_of,
)
from backfill_assets.resources.warehouse import Warehouse

CODE_VERSION = RAW.code_version
GROUP = "raw"
SHADOW_PAYLOADS = table_key("shadow.raw_payloads")
SHADOW_QUARANTINE = table_key("shadow.raw_quarantine")
PAYLOADS = table_key("raw.payloads")
QUARANTINE = table_key("raw.quarantine")

# Check names (constants: the publisher gates on them, tests and the UI refer to them).
ROW_RULES, MANIFEST_RECONCILIATION = RAW.checks
RULES_BY = ("client_id",)  # the row rules are counted per (hour, client): the lines read

PAYLOAD_COLUMNS = [
    "payload_id",
    "client_id",
    "user_id",
    "event_time",
    "received_at",
    "event_type",
    "page_url",
    "device",
    "referrer",
    "schema_version",
]
QUARANTINE_COLUMNS = ["client_id", "file", "line_number", "reason", "raw_text"]

LAYER = RAW


def _is_payload() -> Column:
    """A judged line (with the erasure mark) that becomes a payload row."""
    return (F.col("kind") == KIND_PAYLOAD) & ~F.col("_erased")


def _counts(parsed: DataFrame) -> list[dict]:
    """Per (hour, client, file) of judged rows (with lineage and the erasure mark), in one
    Spark action: the lines read, valid lines whose received_at is outside their folder's
    hour (contract: they belong to the folder's hour; a measure of clock skew and
    redelivery), lines left out as erased, the rows and checksum of the payloads to write
    (no read-back after the write), and the payloads breaking a pandera rule, for the check
    step (no second scan)."""
    is_payload = _is_payload()
    stats = stats_aggregates(PAYLOAD_COLUMNS, where=is_payload)  # the written data columns
    rows = (
        parsed.groupBy("hour", "client_id", "file")
        .agg(
            F.count(F.col("line_number")).alias(LINES_READ),  # file-level rows have none
            F.sum((is_payload & F.col("received_outside_hour")).cast("int")).alias("outside"),
            F.sum(F.col("_erased").cast("int")).alias("erased"),
            rules.broken_count(RawPayloadSchema, where=is_payload).alias("broken"),
            *[column.alias(name) for name, column in stats.items()],
        )
        .collect()
    )
    return [row.asDict() for row in rows]


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


def _by_hour(counted: list[dict]) -> tuple[dict[str, int], dict[str, int]]:
    """Lines received outside their hour and lines of erased users, per hour."""
    outside: dict[str, int] = {}
    erased_lines: dict[str, int] = {}
    for row in counted:
        outside[row["hour"]] = outside.get(row["hour"], 0) + int(row["outside"] or 0)
        erased_lines[row["hour"]] = erased_lines.get(row["hour"], 0) + int(row["erased"] or 0)
    return outside, erased_lines


def _record_erased(
    context: dg.AssetExecutionContext, warehouse: Warehouse, counted: list[dict]
) -> None:
    """The lines of erased users left out, per (hour, client), in the audit table."""
    audit.append(
        warehouse.spark,
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


def _quarantine(kept: DataFrame) -> DataFrame:
    """The quarantine rows to write. Usually few rows, spread over every partition of the
    lines: gathered by hour first, so that each hour is one file (a file per task and hour
    was a hundred tiny files). A rebalance, not a repartition: adaptive execution splits an
    hour of many rows (a disaster hour, every line malformed) over several tasks and files
    instead of writing it in one task."""
    return (
        kept.where(F.col("kind") == KIND_QUARANTINE)
        .select(*QUARANTINE_COLUMNS, "run_id", "code_version", "hour")
        .hint("rebalance", "hour")
    )


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
    backfill_policy=SINGLE_RUN,
    can_subset=False,
)
def raw_shadow(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    backups: BackupStore,
    launch_form: LaunchForm,  # the launch dialog's form: its answers become the run's tags
):
    """Read the closed backup folders of the hours into the raw shadow tables."""
    refuse_if_held(context)  # an earlier release in flight holds some of its hours
    started = time.monotonic()
    hours = list(context.partition_keys)
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
        first = lines.first_pass(lambda bulk: _counts(marked(bulk)))
        per_file = added_groups(
            [*first, *_counts(marked(lines.rest))], ("hour", "client_id", "file")
        )
        read_of = {(g["hour"], g["file"]): int(g[LINES_READ] or 0) for g in per_file}
        counted = added_groups(
            [{k: v for k, v in g.items() if k != "file"} for g in per_file], ("hour", "client_id")
        )
        parsed = marked(lines.all)
        kept = parsed.where(~F.col("_erased"))
        payloads = parsed.where(_is_payload()).select(
            *PAYLOAD_COLUMNS, "run_id", "code_version", "hour"
        )
        rules.precount(
            LAYER.checked_table,
            run_id(context.run_id),
            RawPayloadSchema,
            RULES_BY,
            counted,
        )
        outside, erased_lines = _by_hour(counted)
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
            value=_quarantine(kept),
            metadata={**lineage, "seconds": round(time.monotonic() - started, 2)},
        )
