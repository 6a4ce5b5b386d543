"""The ``erase_user`` job: record an erasure and request the release that removes the user.

``backfill-assets erase`` submits a run of it (``erasure`` explains the whole flow). The
run config carries the salted digest of (client_id, user_id), never the id: Dagster keeps
run configs, and they must not keep what was erased.
"""

from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from backfill_assets.core import tags
from backfill_assets.core.warehouse import audit, erasure
from backfill_assets.defs.layers.common import json_metadata
from backfill_assets.defs.resources.releases import ReleaseRequests
from backfill_assets.defs.resources.warehouse import Warehouse

ERASE_JOB = "erase_user"
ERASE_OP = "erase_op"


class EraseConfig(dg.Config):
    """An erasure request. ``backfill-assets erase --client C --user U`` fills it in."""

    client_id: int = Field(ge=0, description="the client the user belongs to")
    user_digest: str = Field(
        description="salted SHA-256 of (client_id, user_id), as backfill-assets erase "
        "computes it (BACKFILL_ERASURE_SALT); the user id itself is never stored"
    )
    reason: str = Field(description="why (the request's reference, recorded)")
    requested_at: str = Field(
        default="", description="when the user asked (ISO 8601, UTC; default: now)"
    )
    requested_by: str = Field(default="", description="who records the erasure")
    ticket: str = Field(default="", description="ticket reference")
    request_release: bool = Field(
        default=True,
        description="request the release of every published hour that holds the user",
    )


def _requested_at(text: str) -> datetime:
    if not text:
        return audit.now()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise dg.Failure(
            description=f"requested_at {text!r}: expected ISO 8601 such as 2026-11-20T10:00Z",
            allow_retries=False,
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _erasure_record(context: dg.OpExecutionContext, config: EraseConfig) -> dict:
    """The erasure's audit row, or a Failure naming what is wrong with the request."""
    try:
        digest = erasure.validate_digest(config.user_digest)
    except ValueError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    if not config.reason.strip():
        raise dg.Failure(description="an erasure needs a reason", allow_retries=False)
    return {
        "erasure_id": context.run_id,
        "client_id": config.client_id,
        "user_digest": digest,
        "requested_at": _requested_at(config.requested_at),
        "reason": config.reason.strip(),
        "requested_by": config.requested_by or tags.requested_by(context.run.tags) or "",
        "ticket": config.ticket or None,
        "run_id": context.run_id,
    }


@dg.op(
    description="Record an erasure (digest only) in audit.erasures, find the published "
    "hours that hold the user, and request one release of them (all layers).",
    out=dg.Out(dg.Nothing),
)
def erase_op(
    context: dg.OpExecutionContext,
    config: EraseConfig,
    warehouse: Warehouse,
    releases: ReleaseRequests,
):
    record = _erasure_record(context, config)
    spark = warehouse.spark
    requested_by = record["requested_by"]
    audit.append(
        warehouse.warehouse_dir,
        audit.ERASURES,
        [{**record, "event": erasure.RECORDED, "recorded_at": audit.now()}],
    )
    context.log.info(
        f"erasure {context.run_id} recorded for client {config.client_id}: every build from "
        f"now on leaves the user's lines out"
    )
    found = erasure.hours_holding(spark, config.client_id, record["user_digest"], erasure.salt())
    hours = sorted({h for listed in found.values() for h in listed})
    for table, listed in sorted(found.items()):
        context.log.info(f"{table}: {len(listed)} published hour(s) hold the user: {listed}")
    release_id = ""
    if not hours:
        context.log.info("no published hour holds the user: nothing to rebuild")
    elif not config.request_release:
        context.log.warning(f"request_release is off: {len(hours)} hour(s) still hold the user")
    else:
        release_id = releases.submit(
            hours,
            {
                tags.MODE: "backfill",
                tags.REASON: f"erasure {context.run_id}: {record['reason']}",
                tags.REQUESTED_BY: requested_by or "erasure",
                tags.ERASURE: context.run_id,
                **({tags.TICKET: config.ticket} if config.ticket else {}),
            },
            title=f"erasure {context.run_id} ({len(hours)} h)",
            description=record["reason"],
        )
        audit.append(
            warehouse.warehouse_dir,
            audit.ERASURES,
            [
                {
                    **record,
                    "event": erasure.RELEASE_REQUESTED,
                    "release_id": release_id,
                    "hours": ",".join(hours),
                    "recorded_at": audit.now(),
                }
            ],
        )
        context.log.info(
            f"requested release {release_id} of {len(hours)} hour(s); once it is published "
            f"every older version holding the user is purged"
        )
    yield dg.Output(
        None,
        metadata={
            "erasure_id": context.run_id,
            "client_id": config.client_id,
            "hours": json_metadata(found),
            "release_id": release_id,
        },
    )


@dg.job(
    name=ERASE_JOB,
    description="Erase a user: record the request (digest only), keep the user out of every "
    "later build, request the release of the published hours that hold them; publishing it "
    "purges every older version holding them.",
    tags={tags.MODE: "erasure"},
)
def erase_job():
    erase_op()
