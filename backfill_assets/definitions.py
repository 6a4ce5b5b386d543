"""The code location's single entry point (``workspace.yaml``, ``[tool.dagster]``)."""

from __future__ import annotations

import dagster as dg

from backfill_assets.defs.checks.aggregated import aggregated_checks
from backfill_assets.defs.checks.published import published_checks
from backfill_assets.defs.checks.raw import raw_checks
from backfill_assets.defs.checks.transformed import transformed_checks
from backfill_assets.defs.jobs.cancel import record_cancellation_job
from backfill_assets.defs.jobs.erase import erase_job
from backfill_assets.defs.jobs.rollback import rollback_release_job
from backfill_assets.defs.jobs.vacuum import build_vacuum_schedule, vacuum_job
from backfill_assets.defs.layers.aggregated import aggregated_shadow
from backfill_assets.defs.layers.raw import raw_shadow
from backfill_assets.defs.layers.transformed import transformed_shadow
from backfill_assets.defs.publish import publish_release, published_tables
from backfill_assets.defs.resources import build_resources
from backfill_assets.defs.sensors.reconciliation import build_reconciliation_sensor
from backfill_assets.settings import Settings


def build_definitions(settings: Settings) -> dg.Definitions:
    """Everything of the code location for ``settings`` (tests pass their own)."""
    return dg.Definitions(
        assets=[
            raw_shadow,
            transformed_shadow,
            aggregated_shadow,
            publish_release,
            *published_tables,
        ],
        jobs=[rollback_release_job, vacuum_job, erase_job, record_cancellation_job],
        schedules=[build_vacuum_schedule()],
        asset_checks=[raw_checks, transformed_checks, aggregated_checks, published_checks],
        resources=build_resources(settings),
        sensors=[build_reconciliation_sensor()],
        # One Spark session per run: every step of a run executes in the run's process.
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(Settings.from_env())
