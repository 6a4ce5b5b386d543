"""Stop a release: what ``backfill-assets cancel --backfill ID`` records once it is stopped.

The command cancels the release's Dagster backfill as the UI's cancel button does
(``launch.cancel_backfill``: Dagster submits no more of its runs and terminates those
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

CANCEL_JOB = "record_cancellation"
CANCELLED_RELEASE = "cancelled_release"  # metadata key of the observation: the release id
PUBLISH_KEY = dg.AssetKey(["release", "publish"])
OBSERVATION_PAGE = 100


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
    audit.append(warehouse.spark, warehouse.warehouse_dir, audit.CANCELLATIONS, [row])
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


def _recorded(instance: dg.DagsterInstance, release_id: str) -> dict[str, str] | None:
    """The metadata of the newest cancellation observation of ``release_id`` (None)."""
    page = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=PUBLISH_KEY), limit=OBSERVATION_PAGE
    )
    for record in page.records:
        event = record.event_log_entry.asset_observation
        metadata = event.metadata if event is not None else {}
        value = metadata.get(CANCELLED_RELEASE)
        if value is not None and value.value == release_id:
            return {k: str(getattr(v, "value", v)) for k, v in metadata.items()}
    return None


def cancellation_line(instance: dg.DagsterInstance, release_id: str) -> str:
    """``cancelled by X at T (reason): nothing of it published`` for a cancelled release
    ("" if it was not cancelled); a cancel from the UI has no recorded name."""
    backfill = instance.get_backfill(release_id)
    status = backfill.status.value if backfill is not None else ""
    recorded = _recorded(instance, release_id)
    if recorded is None and status not in ("CANCELED", "CANCELING"):
        return ""
    if recorded is not None:
        who, when = recorded.get("cancelled_by") or "-", recorded.get("cancelled_at") or "-"
        why = f" ({recorded['reason']})" if recorded.get("reason") else ""
    else:
        end = getattr(backfill, "backfill_end_timestamp", None)
        who, why = "an operator in the UI (not recorded by name)", ""
        when = datetime.fromtimestamp(end, tz=UTC).isoformat(timespec="seconds") if end else "-"
    return f"cancelled by {who} at {when}{why}: nothing of this release was published"
