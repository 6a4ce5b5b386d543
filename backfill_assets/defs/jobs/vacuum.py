"""The ``vacuum`` job and its daily schedule: retention of shadow versions (``retention``).

``backfill-assets vacuum`` submits a run of this job; the schedule (stopped unless
``BACKFILL_VACUUM_SCHEDULE=on``, or started in the UI) runs it every day at 03:30 UTC with
the defaults. Runs in the publish pool, like publish and rollback.
"""

from collections.abc import Sequence
from datetime import timedelta

import dagster as dg
from pydantic import Field

from backfill_assets import settings
from backfill_assets.core import tags
from backfill_assets.core.names import LAYERS
from backfill_assets.core.reporting.render import format_bytes
from backfill_assets.core.tags import PUBLISH_POOL
from backfill_assets.core.text import markdown_text
from backfill_assets.core.warehouse import audit, retention
from backfill_assets.defs.resources.warehouse import Warehouse

VACUUM_JOB = "vacuum"
VACUUM_OP = "vacuum_op"
VACUUM_SCHEDULE = "vacuum_daily"
SCHEDULE_ENV = settings.VACUUM_SCHEDULE_ENV


class VacuumConfig(dg.Config):
    """What ``vacuum`` keeps; everything else of the shadow tables is deleted."""

    dry_run: bool = Field(
        default=False, description="list what would be deleted, with sizes; delete nothing"
    )
    max_age_days: float = Field(
        default=retention.DEFAULT_MAX_AGE_DAYS,
        ge=0,
        description="unpublished versions (dry runs, rolled back) older than this are deleted",
    )
    rollback_depth: int = Field(
        default=retention.DEFAULT_ROLLBACK_DEPTH,
        ge=0,
        description="superseded versions kept beneath each published hour (rollback targets)",
    )


def describe(deletions: Sequence[retention.Deletion]) -> list[str]:
    """One line per deletion and a total, for the run's log (which the CLI prints)."""
    lines = [
        f"{d.table_name} hour={d.hour} version={d.version} release={d.release_id or '-'}: "
        f"{d.row_count:,} rows, {format_bytes(d.bytes)} ({d.reason})"
        for d in deletions
    ]
    lines.append(
        f"{len(deletions)} shadow version(s), {sum(d.row_count for d in deletions):,} rows, "
        f"{format_bytes(sum(d.bytes for d in deletions))}"
    )
    return lines


@dg.op(
    description="Delete unpublished shadow versions older than max_age_days and superseded "
    "ones deeper than rollback_depth; every deletion recorded in audit.deletions.",
    pool=PUBLISH_POOL,
    out=dg.Out(dg.Nothing),
)
def vacuum_op(context: dg.OpExecutionContext, config: VacuumConfig, warehouse: Warehouse):
    deletions = retention.vacuum(
        warehouse.spark,
        warehouse.warehouse_dir,
        list(LAYERS.values()),
        max_age=timedelta(days=config.max_age_days),
        rollback_depth=config.rollback_depth,
        now=audit.now(),
        run_id=context.run_id,
        dry_run=config.dry_run,
    )
    verb = "would delete" if config.dry_run else "deleted"
    *lines, total = describe(deletions)
    for line in lines:
        context.log.info(f"{verb} {line}")
    context.log.info(f"vacuum {verb} {total}")
    table = "\n".join(
        f"| {d.table_name} | {d.hour} | {d.version} | {d.row_count:,} | {d.bytes:,} "
        f"| {markdown_text(d.reason)} |"
        for d in deletions[:500]
    )
    yield dg.Output(
        None,
        metadata={
            "dry_run": config.dry_run,
            "versions": len(deletions),
            "rows": sum(d.row_count for d in deletions),
            "bytes": sum(d.bytes for d in deletions),
            "deletions": dg.MetadataValue.md(
                "| table | hour | version | rows | bytes | reason |\n|---|---|---|---|---|---|\n"
                + table
            ),
        },
    )


@dg.job(
    name=VACUUM_JOB,
    description="Retention: delete old unpublished and deeply superseded shadow versions, "
    "never a published one or a rollback target (dry_run lists them with sizes).",
    tags={tags.MODE: "vacuum"},
)
def vacuum_job():
    vacuum_op()


def build_vacuum_schedule() -> dg.ScheduleDefinition:
    """Daily at 03:30 UTC; running by default only with ``BACKFILL_VACUUM_SCHEDULE=on``."""
    enabled = settings.vacuum_schedule_on()
    return dg.ScheduleDefinition(
        name=VACUUM_SCHEDULE,
        job=vacuum_job,
        cron_schedule="30 3 * * *",
        execution_timezone="UTC",
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if enabled else dg.DefaultScheduleStatus.STOPPED
        ),
        description="Retention with the defaults (unpublished older than "
        f"{retention.DEFAULT_MAX_AGE_DAYS:g} days, rollback depth "
        f"{retention.DEFAULT_ROLLBACK_DEPTH}).",
    )
