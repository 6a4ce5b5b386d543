"""The rollback job: one release rolled back in every layer it published, in one
transaction, each (table, hour) recorded as a materialization in the publish format."""

from collections.abc import Mapping, Sequence

import dagster as dg
from pydantic import Field

from backfill_assets.core import tags
from backfill_assets.core.names import LAYERS
from backfill_assets.core.tags import PUBLISH_POOL
from backfill_assets.core.warehouse import audit, database, publisher
from backfill_assets.defs.resources.warehouse import Warehouse
from backfill_assets.release.keys import table_key

ROLLBACK_JOB = "rollback_release"


class RollbackConfig(dg.Config):
    """Which release to roll back: by id, or the one currently published at an hour."""

    release_id: str = Field(default="", description="the release (backfill id) to roll back")
    hour: str = Field(default="", description="or: roll back the release published at this hour")
    layer: str = Field(default="raw", description="the layer whose hour names the release")
    reason: str = Field(default="", description="why (recorded in the ledger)")
    ticket: str = Field(default="", description="ticket reference")
    requested_by: str = Field(default="", description="who asked")


def rollback_events(
    spark, release: str, events: Sequence[dict], lineage: Mapping[str, object]
) -> list[dg.AssetMaterialization]:
    """A materialization per (table, hour) in the publish format, saying what is live now."""
    locations = {e["new_location"] for e in events if e["new_location"]}
    by_location = {}
    if locations:  # the ledger database's rows (SQL, no Spark job)
        where = {"location": locations}
        rows = audit.rows(audit.warehouse_of(spark), audit.SHADOW_PARTITIONS, where)
        by_location = {r["location"]: r for r in rows}
    result = []
    for e in events:
        restored = by_location.get(e["new_location"] or "", {})
        result.append(
            dg.AssetMaterialization(
                asset_key=table_key(e["table_name"]),
                partition=e["hour"],
                metadata={
                    **lineage,
                    "status": "rolled_back" if e["new_location"] else "unpublished",
                    "rolled_back_release": release,
                    "release_id": restored.get("release_id") or "",
                    "shadow_version": restored.get("version") or "",
                    "row_count": str(restored.get("row_count") or 0),
                    "checksum": restored.get("checksum") or "",
                    "code_version": restored.get("code_version") or "",
                    "previous_location": e["previous_location"] or "",
                    "new_location": e["new_location"] or "",
                },
            )
        )
    return result


@dg.op(
    description="Roll back one release in every layer it published, in one transaction.",
    pool=PUBLISH_POOL,
)
def rollback_op(context: dg.OpExecutionContext, config: RollbackConfig, warehouse: Warehouse):
    spark = warehouse.spark
    if config.release_id:
        tags.validate_release_id(config.release_id)
    try:
        database.check(warehouse.warehouse_dir)  # now, not once per process
    except database.LedgerUnavailable as exc:
        raise dg.Failure(description=f"nothing rolled back: {exc}", allow_retries=False) from None
    manifest = {
        "reason": config.reason or None,
        "ticket": config.ticket or None,
        "requested_by": config.requested_by or tags.requested_by(context.run.tags),
        "mode": "rollback",
    }
    try:
        release, events = publisher.rollback_release(
            spark,
            warehouse.warehouse_dir,
            list(LAYERS.values()),
            release_id=config.release_id or None,
            hour=config.hour or None,
            layer=config.layer or None,
            run_id=context.run_id,
            manifest=manifest,
        )
    except (publisher.PublishError, database.LedgerUnavailable) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    lineage = {
        "run_id": context.run_id,
        "mode": "rollback",
        "reason": manifest["reason"] or f"rollback of {release}",
        "requested_by": manifest["requested_by"] or "",
        "ticket": manifest["ticket"] or "",
        "backfill_id": release,
    }
    for event in rollback_events(spark, release, events, lineage):
        context.log_event(event)
    context.log.info(
        f"rolled back release {release}: {len(events)} partition(s) in "
        f"{len({e['table_name'] for e in events})} table(s)"
    )


@dg.job(
    name=ROLLBACK_JOB,
    description="Roll back a release (every table and hour it published) in one transaction; "
    "repeated rollbacks of an hour walk back through the ledger's history.",
    tags={tags.MODE: "rollback"},
)
def rollback_release_job():
    rollback_op()
