"""Blocking checks of the raw shadow tables: pandera row rules and manifest reconciliation."""

import dagster as dg
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from backfill_assets.core import tags
from backfill_assets.core.backups.inventory import take_inventory
from backfill_assets.core.backups.store import BackupStore
from backfill_assets.core.layers.raw import RULES_BY
from backfill_assets.core.names import INPUT_FILES_LIST, LINES_READ
from backfill_assets.core.warehouse import erasure
from backfill_assets.defs.checks import common
from backfill_assets.defs.layers.raw import (
    LAYER,
    MANIFEST_RECONCILIATION,
    ROW_RULES,
    SHADOW_PAYLOADS,
)
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.instance import run_tags

MAX_NAMED_FILES = 3  # unreadable, corrupt or refused files named per folder


def reconcile(
    inventory,
    counts: dict,
    allowed_missing: set[str],
    file_lines: dict[tuple[str, str], int] | None = None,
    bad_files: dict[tuple[str, int], list[str]] | None = None,
) -> dict[str, str]:
    """Failing hours -> reason: every closed folder's manifest records must equal the
    lines read (valid + quarantined), no file may be unreadable or the folder open, and
    no stray folder (``hour=24``...) may sit beside the hour's. ``file_lines``: lines read
    per (hour, file), as the build counted them: a folder that differs names its files
    that do. ``bad_files``: per (hour, client), the whole-file quarantine rows' ``name:
    reason`` (a file unreadable, corrupt or refused past a limit), named in the reason."""
    failing: dict[str, str] = {}
    for hour, inv in inventory.items():
        reasons = []
        if not inv.exists:
            if hour not in allowed_missing:
                reasons.append("no backup folder for any client (missing backups)")
            reasons.extend(inv.stray)  # its lines may sit in a misnamed folder
        else:
            reasons.extend(inv.all_problems)
        for folder in inv.folders:
            if not folder.closed or folder.records is None:
                continue
            lines, file_errors = counts.get((hour, folder.client_id), (0, 0))
            if file_errors:
                named = (bad_files or {}).get((hour, folder.client_id), [])[:MAX_NAMED_FILES]
                reasons.append(
                    f"{folder.rel_path}: {file_errors} unreadable/corrupt file(s)"
                    + (f": {'; '.join(named)}" if named else "")
                )
            if lines != folder.records and not file_errors:
                files = [
                    f"{f.rel_path.rsplit('/', 1)[-1]} read {file_lines[hour, f.rel_path]}, "
                    f"manifest {f.records}"
                    for f in folder.files
                    if (hour, f.rel_path) in (file_lines or {})
                    and file_lines[hour, f.rel_path] != f.records
                ]
                reasons.append(
                    f"{folder.rel_path}: read {lines} line(s), manifest says {folder.records}"
                    + (f" (files: {'; '.join(files)})" if files else "")
                )
        if reasons:
            failing[hour] = "; ".join(reasons)
    return failing


def lines_read(
    context: dg.AssetCheckExecutionContext, version: str, hours: list[str]
) -> dict[tuple[str, str], int]:
    """(hour, file) -> lines read, from the raw build's per-hour materializations of
    ``version`` (``INPUT_FILES_LIST``); {} for hours another version materialized last."""
    found = {}
    targets = common.latest_materializations(context.instance, SHADOW_PAYLOADS, hours)
    for hour, record in targets.items():
        if record.run_id != version or record.asset_materialization is None:
            continue
        metadata = record.asset_materialization.metadata
        listed = getattr(metadata.get(INPUT_FILES_LIST), "value", None) or []
        for entry in listed:
            if isinstance(entry, dict) and LINES_READ in entry:
                found[hour, entry["file"]] = int(entry[LINES_READ])
    return found


def _rejected(quarantine: DataFrame) -> list[Row]:
    """Per (hour, client): the quarantined lines, the whole-file rows and the first few of
    those files named (in the reconciliation's reason)."""
    whole_file = F.col("line_number").isNull()
    return (
        quarantine.groupBy("hour", "client_id")
        .agg(
            F.sum(F.when(~whole_file, 1).otherwise(0)).alias("quarantined"),
            F.sum(F.when(whole_file, 1).otherwise(0)).alias("bad"),
            F.slice(  # the first few whole-file rows, named in the reconciliation's reason
                F.sort_array(
                    F.collect_list(
                        F.when(
                            whole_file,
                            F.concat_ws(  # its name in its folder, and why
                                ": ", F.substring_index(F.col("file"), "/", -1), F.col("reason")
                            ),
                        )
                    )
                ),
                1,
                MAX_NAMED_FILES,
            ).alias("bad_files"),
        )
        .collect()
    )


_ZERO = (0, 0, 0)


def _totals(
    group_rows: dict[tuple[str, int], int], rejected: list[Row]
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(valid, quarantined lines, unreadable files) per (hour, client)."""
    totals = {key: (rows, 0, 0) for key, rows in group_rows.items()}
    for r in rejected:
        key = (r["hour"], r["client_id"])
        totals[key] = (totals.get(key, _ZERO)[0], int(r["quarantined"]), int(r["bad"]))
    return totals


def _counts(
    totals: dict[tuple[str, int], tuple[int, int, int]], erased: dict[tuple[str, int], int]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(lines accounted for, unreadable files) per (hour, client), as ``reconcile`` takes
    them: the lines of erased users, left out by the build, are accounted for (not lost)."""
    return {
        k: (sum(totals.get(k, _ZERO)[:2]) + erased.get(k, 0), totals.get(k, _ZERO)[2])
        for k in totals.keys() | erased.keys()
    }


def _per_hour(
    totals: dict[tuple[str, int], tuple[int, int, int]], erased: dict[tuple[str, int], int]
) -> tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, int]]:
    """The (valid, quarantined, unreadable files) totals per (hour, client) and the erased
    lines per (hour, client), summed per hour."""
    valid_of: dict[str, int] = {}
    quarantined_of: dict[str, int] = {}
    bad_of: dict[str, int] = {}
    erased_of: dict[str, int] = {}
    for (hour, _), (valid_lines, quarantined_lines, bad) in totals.items():
        valid_of[hour] = valid_of.get(hour, 0) + valid_lines
        quarantined_of[hour] = quarantined_of.get(hour, 0) + quarantined_lines
        bad_of[hour] = bad_of.get(hour, 0) + bad
    for (hour, _), lines in erased.items():
        erased_of[hour] = erased_of.get(hour, 0) + lines
    return valid_of, quarantined_of, bad_of, erased_of


@dg.multi_asset_check(
    specs=[
        common.check_spec(
            ROW_RULES,
            SHADOW_PAYLOADS,
            "pandera: types, nullability and values of raw payloads",
        ),
        common.check_spec(
            MANIFEST_RECONCILIATION,
            SHADOW_PAYLOADS,
            "valid + quarantined lines = manifest records; no corrupt "
            "file, open folder or missing hour",
        ),
    ],
    can_subset=False,
)
def raw_checks(
    context: dg.AssetCheckExecutionContext,
    warehouse: Warehouse,
    backups: dg.ResourceParam[BackupStore],
):
    """Check the shadow version this run wrote (alone: the newest of its hours), hour by
    hour, and record the outcomes."""
    from backfill_assets.core.layers.models import RawPayloadSchema

    spark = warehouse.spark
    version, hours, why = common.version_to_check(context, spark, LAYER.checked_table)
    if not hours:
        yield from common.not_evaluated(context, why)
        return
    payloads = common.shadow_version(spark, "shadow.raw_payloads", version)
    quarantine = common.shadow_version(spark, "shadow.raw_quarantine", version)
    # the rules and the valid lines per (hour, client): counted by the build that wrote this
    # version in its statistics pass over the same rows, else in one scan of the payloads
    report = common.evaluate_rules(
        context,
        ROW_RULES,
        LAYER.checked_table,
        version,
        payloads,
        RawPayloadSchema,
        ["hour", "payload_id", "client_id", "event_type", "device"],
        by=RULES_BY,
    )
    rule_failing = report.reasons
    rejected = _rejected(quarantine)
    bad_files = {(r["hour"], r["client_id"]): list(r["bad_files"]) for r in rejected}
    totals = _totals(report.group_rows, rejected)
    # lines of erased users, left out by the build, are accounted for (not lost)
    erased = erasure.erased_counts(spark, version)
    inventory = take_inventory(backups, hours)
    allowed = tags.allowed_missing_hours(run_tags(context.instance, context.run.run_id), hours)
    recon_failing = reconcile(
        inventory, _counts(totals, erased), allowed, lines_read(context, version, hours), bad_files
    )
    common.record_and_log(
        context,
        spark,
        warehouse.warehouse_dir,
        LAYER.name,
        LAYER.checked_table,
        version,
        hours,
        {ROW_RULES: rule_failing, MANIFEST_RECONCILIATION: recon_failing},
    )
    valid_of, quarantined_of, bad_of, erased_of = _per_hour(totals, erased)
    yield from common.results(
        context,
        ROW_RULES,
        hours,
        rule_failing,
        version=version,
        per_hour={h: {"rows_checked": valid_of.get(h, 0)} for h in hours},
        on_failure={
            "pandera_errors": report.pandera_errors,
            "failing_examples": report.examples,
        },
    )
    yield from common.results(
        context,
        MANIFEST_RECONCILIATION,
        hours,
        recon_failing,
        version=version,
        per_hour={
            h: {
                "manifest_records": inventory[h].expected_records if h in inventory else 0,
                "lines_valid": valid_of.get(h, 0),
                "lines_quarantined": quarantined_of.get(h, 0),
                "lines_erased": erased_of.get(h, 0),
                "unreadable_files": bad_of.get(h, 0),
                "allowed_missing": h in allowed,
            }
            for h in hours
        },
    )
