"""Publish a release: every checked candidate of one backfill, in one ledger transaction.

A **release** is everything one Dagster backfill (or one run outside a backfill) wrote: a
shadow version per (table, hour) of each layer it rebuilt, tagged with the release id in
``audit.shadow_partitions``. Downstream layers of a release read their upstream's
candidates of the same release (and the published version for the other hours of their
window; ``audit.release_reads`` records which). Publishing a release:

1. **plan**: per layer and hour, the newest candidate of the release; it is held back if a
   check of its layer did not pass for that exact version, if it changes the published
   hour beyond the change gates' limits and nobody approved it (``gates``), if it read an
   upstream candidate of the release that is held back (so a session hour never goes live
   on top of a raw hour that did not) or another version of the release than the one going
   live there (the upstream hour was rebuilt after it), or if the published version is
   newer than it (an old build published again: going back is a rollback). The whole
   release is refused if an hour it read as *published* has changed since it was built
   (rebuild instead), whether or not this publish includes the layer it read; the upstream
   layers' fences are held with the published ones so that cannot change under it.
   ``planning`` (its rules: ``planning.HOLD_BACK_RULES``; what it reads: ``release_reads``).
2. **one transaction** (``ledger``): ``prepare`` rows for every (table, hour) to swap, all
   with one ``txn_id``, committed to the ledger database with the transaction open on each
   table; then one swap per table (its hours relocated in one metastore transaction, added
   or dropped in one statement: ``tables.swap_partitions``; no data is copied or deleted);
   then the ``commit`` rows, closing it.
3. **recovery**: a transaction with ``prepare`` rows and no outcome (a crash) is settled as
   a whole by ``recover`` (run before every publish and rollback, and by ``verify``): if
   every swap happened it is committed, otherwise the swaps that happened are undone and
   it is aborted. Only by a caller holding the publish fence of every layer the
   transaction touches: otherwise it may be another run's, in flight between two swaps.
   Tables of a layer, and a layer and its downstream, are therefore never left on
   different releases once recovery has run.

Rollback is a transaction of the same kind: per (table, hour) the ledger is a stack
(a publish pushes a location, a rollback pops the release's entries), so repeated rollbacks
walk back through history, a release published twice in an hour goes back to what was
there before it, and rolling back a first publish drops the partition. A rollback is
refused while a later release that read what it published is still published (roll that
one back first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from backfill_assets.core.names import Layer
from backfill_assets.core.warehouse import audit, database, gates
from backfill_assets.core.warehouse.ledger import (  # noqa: F401  (the publisher's vocabulary)
    ABORT,
    COMMIT,
    PREPARE,
    PUBLISH,
    ROLLBACK,
    Entry,
    PublishError,
    apply_transaction,
    event,
    history,
    ledger,
    orphan_versions,
    pending_transactions,
    recover,
    stamp,
    verify,
)
from backfill_assets.core.warehouse.planning import (  # noqa: F401  (the publisher's vocabulary)
    HELD_BACK,
    HELD_UPSTREAM,
    PROVISIONAL,
    PUBLISHED,
    READ_AS_EMPTY,
    SOURCE_EMPTY,
    SOURCE_OUTSIDE,
    SOURCE_PUBLISHED,
    SOURCE_RELEASE,
    SOURCE_UNAVAILABLE,
    UNCHANGED,
    Approval,
    HourOutcome,
    ReleasePlan,
    _rows,
    approvals_of,
    deleted_by,
    lock_names,
    plan_release,
    provisional_note,
    published_tables,
    published_versions_checked,
    release_candidates,
    releases_of,
)
from backfill_assets.core.warehouse.tables import ensure_table, split_table, table_exists

# --------------------------------------------------------------------------- transactions


def _ensure_published_table(spark: SparkSession, warehouse_dir: str, shadow: str, published: str):
    if table_exists(spark, published):
        return
    schema = spark.table(shadow).drop("version").schema
    database, name = split_table(published)
    ensure_table(spark, published, schema, ["hour"], f"{warehouse_dir}/published/{database}/{name}")


def publish_release(
    spark: SparkSession,
    warehouse_dir: str,
    release_id: str,
    layers: Sequence[Layer],
    *,
    run_id: str,
    manifest: Mapping[str, str | None],
    limits: gates.Limits | None = None,
    approve: Approval | None = None,
) -> ReleasePlan:
    """Publish every passing (layer, hour) of the release in one transaction, recording
    the approvals ``approve`` gives to hours the change gates hold.

    Raises ``PublishError`` (nothing published) when the release read published hours that
    changed since it was built, or when it wrote nothing for ``layers``.
    """
    # The upstream layers' locks too: what the release read as published must not move
    # between the stale-read check and the swaps.
    with database.fence(warehouse_dir, lock_names(layers)):
        return _publish_release(
            spark, warehouse_dir, release_id, layers, run_id, manifest, limits, approve
        )


def _publish_release(
    spark: SparkSession,
    warehouse_dir: str,
    release_id: str,
    layers: Sequence[Layer],
    run_id: str,
    manifest: Mapping[str, str | None],
    limits: gates.Limits | None,
    approve: Approval | None,
) -> ReleasePlan:
    recover(spark, warehouse_dir, published_tables(layers))
    for layer in layers:
        for shadow, published in layer.pairs:
            if table_exists(spark, shadow):
                _ensure_published_table(spark, warehouse_dir, shadow, published)
    plan = plan_release(spark, release_id, layers, limits=limits, approve=approve)
    if not plan.outcomes:
        raise PublishError(
            f"release {release_id} wrote no shadow partition of "
            f"{', '.join(layer.name for layer in layers)}: nothing to publish"
        )
    if plan.stale:
        raise PublishError(
            f"release {release_id} read published data that has changed since it was built: "
            f"{'; '.join(plan.stale[:10])}{' ...' if len(plan.stale) > 10 else ''}. "
            f"Nothing was published; rebuild the release (run the backfill again)"
        )
    manifest = {**manifest, "backfill_id": release_id}
    events = [
        event(
            table,
            o.hour,
            PUBLISH,
            manifest,
            run_id,
            version=o.version,
            previous_location=info["previous_location"],
            new_location=info["new_location"],
            row_count=info["row_count"],
            checksum=info["checksum"],
            code_version=info["code_version"],
        )
        for o in plan.outcomes
        if o.status == PUBLISHED
        for table, info in o.tables.items()
    ]
    if plan.approvals:  # the approval is on record before anything it allows goes live
        approved_at = audit.now()
        audit.append(
            warehouse_dir,
            audit.APPROVALS,
            [{**a, "run_id": run_id, "approved_at": approved_at} for a in plan.approvals],
        )
    txn = apply_transaction(spark, warehouse_dir, events)
    for o in plan.outcomes:
        for info in o.tables.values():
            info["txn_id"] = txn if o.status == PUBLISHED else None
    return plan


# ------------------------------------------------------------------------------ rollback


def _below(stack: Sequence[Entry], release_id: str) -> str | None:
    """The location under ``release_id``'s entries at the top of ``stack`` (None: none)."""
    index = len(stack) - 1
    while index >= 0 and stack[index].release_id == release_id:
        index -= 1
    return stack[index].location if index >= 0 else None


def _built_on(
    spark: SparkSession,
    release_id: str,
    locations: set[str],
    stacks: Mapping[tuple[str, str], Sequence[Entry]],
) -> list[str]:
    """Other releases still published somewhere that read any of ``locations`` as
    published data (``audit.release_reads``): rolling back under them would leave them
    built on data no longer published."""
    if not locations:
        return []
    where = {"source": SOURCE_PUBLISHED, "location": locations}
    readers = {r["release_id"] for r in _rows(spark, audit.RELEASE_READS, where)} - {release_id}
    live = {stack[-1].release_id for stack in stacks.values() if stack}
    return sorted(readers & live)


def _release_at(
    layers: Sequence[Layer],
    stacks: Mapping[tuple[str, str], Sequence[Entry]],
    hour: str | None,
    layer: str | None,
) -> str:
    """The release published at ``hour`` in ``layer``'s main table (default: the first)."""
    if hour is None:
        raise PublishError("name a release (--backfill ID) or an hour (--hour H)")
    table = next(lay for lay in layers if layer in (None, lay.name)).tables[0]
    stack = stacks.get((table, hour), [])
    if not stack:
        raise PublishError(f"{table} hour={hour}: nothing published, nothing to roll back")
    if stack[-1].release_id is None:
        raise PublishError(f"{table} hour={hour}: the published version has no release id")
    return stack[-1].release_id


def rollback_release(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[Layer],
    *,
    release_id: str | None = None,
    hour: str | None = None,
    layer: str | None = None,
    run_id: str,
    manifest: Mapping[str, str | None],
) -> tuple[str, list[dict]]:
    """Roll back one release in every table and hour it published, in one transaction.

    With ``release_id``: that release (it must still be on top everywhere it published).
    With ``hour`` (and ``layer``, default the first): the release currently published there,
    so repeated rollbacks walk back through the ledger's history. Returns (release, events).
    """
    with database.fence(warehouse_dir, [lay.name for lay in layers]):
        return _rollback_release(
            spark, warehouse_dir, layers, release_id, hour, layer, run_id, manifest
        )


def _rollback_release(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[Layer],
    release_id: str | None,
    hour: str | None,
    layer: str | None,
    run_id: str,
    manifest: Mapping[str, str | None],
) -> tuple[str, list[dict]]:
    tables = published_tables(layers)
    recover(spark, warehouse_dir, tables)
    recorded = ledger(spark, tables)
    stacks = history(recorded)
    if release_id is None:
        release_id = _release_at(layers, stacks, hour, layer)
    touched = [
        (key, stack)
        for key, stack in sorted(stacks.items())
        if any(entry.release_id == release_id for entry in stack)
    ]
    if not touched:
        if any(
            e["backfill_id"] == release_id and e["mode"] == PUBLISH and e["phase"] == COMMIT
            for e in recorded
        ):
            raise PublishError(
                f"release {release_id} is no longer published anywhere (rolled back)"
            )
        raise PublishError(f"release {release_id} published nothing; nothing to roll back")
    on_top = [(key, stack) for key, stack in touched if stack[-1].release_id == release_id]
    later = sorted(
        {stack[-1].release_id or "?" for _, stack in touched if stack[-1].release_id != release_id}
    )
    if not on_top:
        raise PublishError(f"release {release_id} is no longer published anywhere (rolled back)")
    if later:
        raise PublishError(
            f"release {release_id} has been superseded in some partitions by "
            f"{', '.join(later)}; roll those back first"
        )
    # What each hour goes back to: the newest entry below the release's own (a release
    # published twice in an hour is rolled back as a whole, not to its first version).
    restore = {key: _below(stack, release_id) for key, stack in on_top}
    built_on = _built_on(spark, release_id, {stack[-1].location for _, stack in on_top}, stacks)
    if built_on:
        raise PublishError(
            f"cannot roll back release {release_id}: release(s) {', '.join(built_on)} read "
            f"what it published and are still published; roll those back first"
        )
    purged = audit.deleted(spark, {loc for loc in restore.values() if loc})
    if purged:
        (table, hour_), lost = next(
            (key, loc) for key, loc in sorted(restore.items()) if loc in purged
        )
        gone = purged[lost]
        raise PublishError(
            f"cannot roll back release {release_id}: the version it would restore in {table} "
            f"hour={hour_} (release {gone['release_id'] or '?'}, {lost}) was "
            f"{deleted_by(gone)}; publish a new release of those hours instead"
        )
    manifest = {**manifest, "reason": manifest.get("reason") or f"rollback of {release_id}"}
    events = [
        event(
            table,
            hour_,
            ROLLBACK,
            {**manifest, "backfill_id": release_id},
            run_id,
            version=None,
            previous_location=stack[-1].location,
            new_location=restore[(table, hour_)],
            row_count=None,
            checksum=None,
            code_version=None,
        )
        for (table, hour_), stack in on_top
    ]
    apply_transaction(spark, warehouse_dir, events)
    return release_id, events
