"""A paused release: no new run of it starts, its running runs finish, its hours stay held.

Dagster 1.13 has no pause for backfills; a pause is made of what it has:

- the backfill's status is set to ``FAILED`` (``instance.update_backfill``, as Dagster's
  GraphQL sets statuses). The backfill daemon iterates only ``REQUESTED``, ``CANCELING`` and
  ``FAILING`` backfills, so it submits no new run, and only the last two terminate runs:
  the running ones finish. ``FAILED`` is the status Dagster's ``resumePartitionBackfill``
  is made for: it sets the backfill back to ``REQUESTED`` and the daemon goes on from the
  backfill's data (a partition materialized or requested is not requested again).
- its runs already queued are tagged ``backfill_assets/paused=true``: the run queue holds
  such runs (``tag_concurrency_limits`` in ``dagster.yaml``: that tag and value, limit 0),
  so none starts; resume sets the tag to ``false`` and they start in their turn.
- the pause is recorded (who, when, why) as an observation of ``release/publish`` that
  holds, the CLI and the report read; resume and cancel record its end the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from backfill_assets.core import tags
from backfill_assets.release.keys import PUBLISH_KEY

PAUSED_STATUS = "FAILED"  # the backfill status a pause sets (the daemon leaves it alone)
PAUSED, RESUMED, CANCELLED = "paused", "resumed", "cancelled"  # the states a record gives
PAUSED_BACKFILL = "paused_backfill"  # metadata keys of the observation
PAUSE_STATE = "pause_state"
HOLD = "true"  # the PAUSED tag's value the run queue holds
HOLD_LIMIT = {"key": tags.PAUSED, "value": HOLD, "limit": 0}  # dagster.yaml's run queue
OBSERVATION_PAGE = 200


@dataclass(frozen=True)
class Pause:
    """The newest pause record of a backfill: paused, resumed or cancelled, by whom, when."""

    backfill_id: str
    release_id: str
    state: str
    by: str
    at: str
    reason: str

    def describe(self) -> str:
        """``paused by X at T (why)``."""
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.state} by {self.by or '-'} at {self.at}{why}"


def records(instance: dg.DagsterInstance) -> dict[str, Pause]:
    """backfill id -> its newest pause record, from the newest observations of the publish
    asset."""
    page = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=PUBLISH_KEY), limit=OBSERVATION_PAGE
    )
    found: dict[str, Pause] = {}
    for record in page.records:  # newest first
        event = record.event_log_entry.asset_observation
        metadata = {k: str(getattr(v, "value", v)) for k, v in (event.metadata or {}).items()}
        backfill_id = metadata.get(PAUSED_BACKFILL) if event is not None else None
        if backfill_id and backfill_id not in found:
            found[backfill_id] = Pause(
                backfill_id,
                metadata.get("release", backfill_id),
                metadata.get(PAUSE_STATE, ""),
                metadata.get("by", ""),
                metadata.get("at", ""),
                metadata.get("reason", ""),
            )
    return found


def paused(instance: dg.DagsterInstance, backfills) -> dict[str, Pause]:
    """The backfills of ``backfills`` that are paused now, with their pause."""
    candidates = [b for b in backfills if b.status.value == PAUSED_STATUS]
    if not candidates:
        return {}
    known = records(instance)
    return {
        b.backfill_id: known[b.backfill_id]
        for b in candidates
        if b.backfill_id in known and known[b.backfill_id].state == PAUSED
    }


def is_paused(instance: dg.DagsterInstance, backfill_id: str) -> Pause | None:
    """The pause of a backfill paused now, else None."""
    backfill = instance.get_backfill(backfill_id)
    return paused(instance, [backfill]).get(backfill_id) if backfill is not None else None


def paused_line(instance: dg.DagsterInstance, release_id: str) -> str:
    """``paused by X at T (why): …`` for a release one of whose backfills is paused now
    ("" otherwise): the report's first line."""
    backfills = [b for b in instance.get_backfills(limit=OBSERVATION_PAGE)]
    mine = [b for b in backfills if release_id in (b.backfill_id, b.tags.get(tags.ROOT_BACKFILL))]
    found = paused(instance, mine)
    if not found:
        return ""
    pause = next(iter(found.values()))
    return (
        f"{pause.describe()}: nothing of this release is published until it is resumed "
        f"(`backfill-assets resume --backfill {release_id}`) and ends"
    )


def hold_configured(instance: dg.DagsterInstance) -> bool:
    """Whether the instance's run queue holds runs tagged paused (``HOLD_LIMIT``)."""
    queue = instance.get_concurrency_config().run_queue_config  # what the queue daemon reads
    limits = queue.tag_concurrency_limits if queue is not None else []
    return any(
        limit.get("key") == tags.PAUSED
        and limit.get("value") == HOLD
        and int(limit.get("limit", 1)) == 0
        for limit in limits
    )


def record(
    instance: dg.DagsterInstance,
    backfill_id: str,
    release_id: str,
    state: str,
    by: str,
    reason: str = "",
) -> Pause:
    """Record that a backfill was paused, resumed or its pause cancelled."""
    at = datetime.now(UTC).isoformat(timespec="seconds")
    metadata = {
        PAUSED_BACKFILL: backfill_id,
        "release": release_id,
        PAUSE_STATE: state,
        "by": by,
        "at": at,
        "reason": reason,
    }
    instance.report_runless_asset_event(
        dg.AssetObservation(asset_key=PUBLISH_KEY, metadata=metadata)
    )
    return Pause(backfill_id, release_id, state, by, at, reason)


def _queued(instance: dg.DagsterInstance, backfill_id: str) -> list[dg.DagsterRun]:
    return list(
        instance.get_runs(
            filters=dg.RunsFilter(
                tags={tags.DAGSTER_BACKFILL: backfill_id},
                statuses=[dg.DagsterRunStatus.QUEUED],
            )
        )
    )


def hold_queued(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    """Tag the backfill's queued runs so that the run queue holds them; returns their ids."""
    held = []
    for run in _queued(instance, backfill_id):
        if run.tags.get(tags.PAUSED) != HOLD:
            instance.add_run_tags(run.run_id, {tags.PAUSED: HOLD})
        held.append(run.run_id)
    return sorted(held)


def release_queued(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    """Let the run queue start the backfill's held runs again; returns their ids."""
    released = []
    for run in _queued(instance, backfill_id):
        if run.tags.get(tags.PAUSED) == HOLD:
            instance.add_run_tags(run.run_id, {tags.PAUSED: "false"})
            released.append(run.run_id)
    return sorted(released)


def running(instance: dg.DagsterInstance, backfill_id: str) -> list[str]:
    """The backfill's runs starting or started (they finish while it is paused)."""
    statuses = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    filters = dg.RunsFilter(tags={tags.DAGSTER_BACKFILL: backfill_id}, statuses=statuses)
    return sorted(r.run_id for r in instance.get_runs(filters=filters))


def pause(
    instance: dg.DagsterInstance, backfill, release_id: str, by: str, reason: str = ""
) -> tuple[Pause, list[str]]:
    """Pause a requested backfill: the daemon submits no new run of it, its queued runs are
    held; returns the pause and the runs held."""
    status = type(backfill.status)(PAUSED_STATUS)  # Dagster's BulkActionStatus, not public
    instance.update_backfill(backfill.with_status(status))
    done = record(instance, backfill.backfill_id, release_id, PAUSED, by, reason)
    return done, hold_queued(instance, backfill.backfill_id)


def watcher(instance: dg.DagsterInstance, backfill_id: str, say=print):
    """A ``paused()`` for ``launch.follow``: whether the backfill is paused now. Each time it
    is found paused it holds queued runs the daemon submitted as the pause came (none
    starts), and it says once per pause what the operator does next."""
    told: set[str] = set()

    def check() -> bool:
        found = is_paused(instance, backfill_id)
        if found is None:
            return False
        hold_queued(instance, backfill_id)
        if found.at not in told:
            told.add(found.at)
            say(
                f"release {found.release_id} {found.describe()}: its running runs finish, "
                f"no new run starts; go on with `backfill-assets resume --backfill "
                f"{found.release_id}` (or cancel it)"
            )
        return True

    return check
