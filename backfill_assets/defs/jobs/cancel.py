"""Stop a release: what ``backfill-assets cancel --backfill ID`` records once it is stopped.

The command cancels the release's Dagster backfill as the UI's cancel button does
(``release.launch.cancel_backfill``: Dagster submits no more of its runs and terminates those
queued or running, its publish among them), waits until none of its runs is left, then
runs ``record_cancellation``: one row in the ledger (``audit.cancellations``) and one
observation of ``release/publish`` (``cancelled_release``: the id) that the report and the
UI show. Nothing of a cancelled release is published: its publish step never completes.
"""

from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from backfill_assets.core import tags
from backfill_assets.core.warehouse import audit
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.cancellation import CANCELLED_RELEASE
from backfill_assets.release.keys import PUBLISH_KEY

CANCEL_JOB = "record_cancellation"


class CancellationConfig(dg.Config):
    release_id: str = Field(description="the release (backfill id) that was cancelled")
    status: str = Field(default="", description="the backfill's status once stopped")
    hours: str = Field(default="", description="the hours it held, FIRST..LAST")
    runs: str = Field(default="", description="its runs, comma-separated")
    cancelled_by: str = Field(default="", description="who cancelled it")
    reason: str = Field(default="", description="why")
    ticket: str = Field(default="", description="ticket reference")


@dg.op(description="Record a cancelled release in the ledger and as an observation.")
def record_cancellation_op(
    context: dg.OpExecutionContext, config: CancellationConfig, warehouse: Warehouse
) -> None:
    tags.validate_release_id(config.release_id)
    when = datetime.now(tz=UTC)
    row = {**config.model_dump(), "run_id": context.run_id, "cancelled_at": when}
    audit.append(warehouse.warehouse_dir, audit.CANCELLATIONS, [row])
    context.log_event(
        dg.AssetObservation(
            asset_key=PUBLISH_KEY,
            description=f"release {config.release_id} cancelled by {config.cancelled_by}",
            metadata={
                CANCELLED_RELEASE: config.release_id,
                "cancelled_by": config.cancelled_by,
                "cancelled_at": when.isoformat(timespec="seconds"),
                "reason": config.reason,
                "ticket": config.ticket,
                "hours": config.hours,
                "status": config.status,
            },
        )
    )
    context.log.info(f"release {config.release_id} cancelled by {config.cancelled_by}: recorded")


@dg.job(
    name=CANCEL_JOB,
    description="Record a cancelled release (ledger row, observation); nothing is published.",
    tags={tags.MODE: "cancel"},
)
def record_cancellation_job():
    record_cancellation_op()
