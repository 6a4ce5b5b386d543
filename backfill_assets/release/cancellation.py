"""A cancelled release as the instance records it: the observation of ``release/publish``
that ``defs.jobs.cancel`` logs, and the line the report and the CLI print."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from backfill_assets.release.keys import PUBLISH_KEY

CANCELLED_RELEASE = "cancelled_release"  # metadata key of the observation: the release id
OBSERVATION_PAGE = 100


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
