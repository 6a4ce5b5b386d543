"""Run tags an operator (UI launch dialog, CLI) or a sensor sets on a backfill run."""

from __future__ import annotations

import re
from collections.abc import Mapping

from backfill_assets.core.hours import InvalidHourError, hour_range
from backfill_assets.core.text import one_line

_RELEASE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

PREFIX = "backfill_assets"
REASON = f"{PREFIX}/reason"
REQUESTED_BY = f"{PREFIX}/requested_by"
TICKET = f"{PREFIX}/ticket"
MODE = f"{PREFIX}/mode"  # backfill | dry_run | publish | rollback | vacuum | erasure | live
ERASURE = f"{PREFIX}/erasure"  # the erasure (its erase_user run) a release was requested for
ALLOW_MISSING_HOURS = f"{PREFIX}/allow_missing_hours"  # "true" or comma-separated hours
# "true": the requester approves, at launch, the change gates' findings of the release
APPROVE_CHANGES = f"{PREFIX}/approve_changes"
APPROVE_COST = f"{PREFIX}/approve_cost"  # the estimated core-hours approved over the cap
ALLOW_SHRINK = f"{PREFIX}/allow_shrink"  # the former name of APPROVE_CHANGES, still honoured
USER = "dagster/user"  # the Dagster user who launched the run, where the deployment has users
RELEASE = f"{PREFIX}/release"  # the release a run builds into or publishes (default: backfill)
LAYER = f"{PREFIX}/layer"  # the layer a run rebuilds (production tag concurrency)
PAUSED = f"{PREFIX}/paused"  # "true" on a queued run of a paused release: the queue holds it
REQUEST_ID = f"{PREFIX}/request_id"  # every run of one launch or reconciliation request
# set by release/publish on a run that held hours back (their count): the run succeeded as a
# run, the release did not publish everything (an expected outcome, shown in the UI's runs)
HELD_BACK = f"{PREFIX}/held_back_hours"
# set by a step that must not build (upstream hours missing, a release publish refuses):
# "step: verdict" lines; the run succeeded as a run, it built nothing of that step
REFUSED = f"{PREFIX}/refused"
ESTIMATE_SECONDS = f"{PREFIX}/estimate_seconds"  # the CLI's estimate before launching
# the backup bytes the release reads (the CLI's estimate): the Spark resource starts the
# JVMs of a release that reads little for a short life (``core.spark.session``)
INPUT_BYTES = f"{PREFIX}/input_bytes"
DAGSTER_BACKFILL = "dagster/backfill"
# Set by Dagster on a backfill re-executed from failure (the UI's "re-execute", ``resume``)
# and its runs: the first backfill of the chain, which names the release they all belong to.
ROOT_BACKFILL = "dagster/root_backfill_id"
# The tags by which a run belongs to a release (its id as the value).
RELEASE_TAGS = (DAGSTER_BACKFILL, ROOT_BACKFILL)
# The Dagster concurrency pool of every publish, rollback and vacuum step (limit 1 in the
# instance configs): one at a time per deployment.
PUBLISH_POOL = "publish"
# the sensor that launched a run or backfill: the UI shows "launched by" it and lists the
# runs on the sensor's page
DAGSTER_SENSOR = "dagster/sensor_name"
MODES = ("backfill", "dry_run", "publish", "rollback", "vacuum", "erasure", "live")

# Operator text: the most characters each may have (CLI flags, launch form, tags, sensor).
# Past them it is refused at launch in one line; shown, it is always one line of text.
MAX_REASON_CHARS = 500
MAX_TICKET_CHARS = 100
MAX_REQUESTED_BY_CHARS = 100
TEXT_LIMITS = {
    REASON: MAX_REASON_CHARS,
    TICKET: MAX_TICKET_CHARS,
    REQUESTED_BY: MAX_REQUESTED_BY_CHARS,
}


class OperatorTextError(ValueError):
    """A reason, ticket or requester past its limit; the message is one line naming it."""


def check_text_limits(values: Mapping[str, str | None], names: Mapping[str, str] | None = None):
    """Refuse (``OperatorTextError``, one line) operator text past its limit. ``values``:
    tag -> text (other tags are ignored); ``names``: how to name a tag (e.g. a CLI flag)."""
    over = [
        f"{(names or {}).get(tag, tag)} is {len(value):,} characters, more than the limit "
        f"of {limit:,}"
        for tag, limit in TEXT_LIMITS.items()
        if len(value := values.get(tag) or "") > limit
    ]
    if over:
        raise OperatorTextError(
            "; ".join(over) + ": give a short reference (an incident or ticket id, a sentence)"
        )


def run_manifest(tags: Mapping[str, str]) -> dict[str, str | None]:
    """The run manifest carried into lineage and the ledger (operator text as one line,
    within its limit, whatever a run's tags hold)."""
    return {
        "reason": _bounded(tags.get(REASON), MAX_REASON_CHARS),
        "requested_by": _bounded(requested_by(tags), MAX_REQUESTED_BY_CHARS),
        "ticket": _bounded(tags.get(TICKET), MAX_TICKET_CHARS),
        "mode": tags.get(MODE) or ("backfill" if tags.get(DAGSTER_BACKFILL) else "live"),
        # the release the run builds into: its Dagster backfill (the first of a chain
        # re-executed from failure) unless tagged otherwise
        "backfill_id": tags.get(RELEASE) or tags.get(ROOT_BACKFILL) or tags.get(DAGSTER_BACKFILL),
    }


def _bounded(value: str | None, limit: int) -> str | None:
    return None if value is None else one_line(value, limit)


def refusals(tags: Mapping[str, str]) -> list[str]:
    """The "step: verdict" lines of the steps of a run that refused to build."""
    return [line for line in (tags.get(REFUSED) or "").splitlines() if line]


def requested_by(tags: Mapping[str, str]) -> str | None:
    """Who asked: the launcher's ``requested_by`` tag, else the Dagster user who launched
    the run from the UI (deployments with users set ``dagster/user``)."""
    return tags.get(REQUESTED_BY) or tags.get(USER) or None


def release_id(tags: Mapping[str, str], run_id: str) -> str:
    """The release a run belongs to: its explicit release tag, else its Dagster backfill (the
    first of a chain of backfills re-executed from failure: one release), else the run
    itself (a single run outside a backfill is a release of its own)."""
    return tags.get(RELEASE) or tags.get(ROOT_BACKFILL) or tags.get(DAGSTER_BACKFILL) or run_id


def validate_release_id(value: str) -> str:
    """A release id (a Dagster backfill or run id): letters, digits, ``-`` and ``_`` only."""
    if not _RELEASE_ID.match(value or ""):
        raise ValueError(f"invalid release id {value!r}: expected a Dagster backfill or run id")
    return value


def input_bytes(tags: Mapping[str, str]) -> int | None:
    """The backup bytes a release reads, as ``backfill`` estimated them (None: unknown)."""
    size = tags.get(INPUT_BYTES, "")
    return int(size) if size.isdigit() else None


def is_true(tags: Mapping[str, str], tag: str) -> bool:
    return (tags.get(tag) or "").strip().lower() in ("1", "true", "yes")


def approves_changes(tags: Mapping[str, str]) -> bool:
    return is_true(tags, APPROVE_CHANGES) or is_true(tags, ALLOW_SHRINK)


def allowed_missing_hours(tags: Mapping[str, str], hours: list[str]) -> set[str]:
    value = (tags.get(ALLOW_MISSING_HOURS) or "").strip()
    if value.lower() == "true":
        return set(hours)
    return {h.strip() for h in value.split(",") if h.strip()}


def partition_range(tags: Mapping[str, str]) -> list[str]:
    """The hours a run targets (its partition or partition range tags); [] if none or
    not hour keys."""

    first = tags.get("dagster/asset_partition_range_start") or tags.get("dagster/partition")
    last = tags.get("dagster/asset_partition_range_end") or first
    try:
        return hour_range(first, last) if first and last else []
    except InvalidHourError:
        return []
