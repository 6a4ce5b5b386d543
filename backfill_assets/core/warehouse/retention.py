"""Retention: which shadow versions ``vacuum`` deletes, and deleting them with a record.

Every run writes a new immutable shadow version per (table, hour); nothing else removes
them. A shadow version is **kept** when

- a published table points at it now (metastore) or the ledger says it is published, or
  it is one of the ``rollback_depth`` versions beneath the published one in the hour's
  history (what ``rollback`` walks back to);
- a publish or rollback transaction in flight names it;
- it is unpublished (never published, or rolled back) and younger than ``max_age``: a dry
  run stays publishable for that long.

Everything else is **deleted**: superseded versions deeper than the rollback depth, and
unpublished versions older than ``max_age``. A deletion drops the shadow partition from
the metastore and deletes its files (the version's own folder, nothing else), then is
appended to ``audit.deletions`` with its size, kind and reason; rerunning after a crash
finishes and records what was half done. A rollback or publish that would need a deleted
version is refused naming the deletion (``publisher``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from pyspark.sql import SparkSession

from backfill_assets.core.warehouse import audit, database, publisher
from backfill_assets.core.warehouse.tables import partition_locations, partition_spec

DEFAULT_MAX_AGE_DAYS = 7.0
DEFAULT_ROLLBACK_DEPTH = 3
SUPERSEDED, UNPUBLISHED = "superseded", "unpublished"
_DROP_BATCH = 500  # partitions per DROP statement


@dataclass(frozen=True)
class Deletion:
    """A shadow version ``vacuum`` deletes (or would, in a dry run), and why."""

    table_name: str  # the shadow table
    hour: str
    version: str
    location: str
    row_count: int
    release_id: str | None
    kind: str  # superseded | unpublished (vacuum) | erasure (``erasure.purge``)
    reason: str
    bytes: int = 0


def plan(
    spark: SparkSession,
    layers: Sequence[publisher.Layer],
    *,
    max_age: timedelta,
    rollback_depth: int,
    now: datetime,
) -> list[Deletion]:
    """What ``vacuum`` would delete now (read only): a few Spark actions and one partition
    listing per published table, whatever the number of versions."""
    if rollback_depth < 0 or max_age < timedelta(0):
        raise ValueError("rollback depth and maximum age must not be negative")
    shadows = [shadow for layer in layers for shadow, _ in layer.pairs]
    published = publisher.published_tables(layers)
    events = publisher.ledger(spark, published)
    keep: set[str] = set()
    beneath: dict[str, int] = {}  # superseded location -> versions published above it
    for stack in publisher.history(events).values():
        for depth, entry in enumerate(reversed(stack)):
            if entry.location is None:
                continue
            if depth <= rollback_depth:
                keep.add(entry.location)
            else:
                beneath.setdefault(entry.location, depth)
    keep |= {loc for t in published for loc in partition_locations(spark, t).values()}
    for prepared in publisher.pending_transactions(spark).values():
        keep |= {e[k] for e in prepared for k in ("previous_location", "new_location") if e[k]}
    ever_published = {e["new_location"] for e in events if e["new_location"]}
    gone = audit.deleted(spark)

    rows = _versions(spark, shadows, now - max_age)
    deletions = []
    for r in rows:
        location = r["location"]
        if location in keep or location in gone:
            continue
        if location in beneath:
            kind = SUPERSEDED
            reason = (
                f"superseded: {beneath[location]} newer version(s) published above it, "
                f"rollback depth {rollback_depth}"
            )
        elif r["old"]:
            kind = UNPUBLISHED
            state = "rolled back" if location in ever_published else "never published"
            reason = f"{state}, written {r['written']}, older than {_days(max_age)}"
        else:
            continue
        deletions.append(
            Deletion(
                r["table_name"],
                r["hour"],
                r["version"],
                location,
                int(r["row_count"] or 0),
                r["release_id"],
                kind,
                reason,
            )
        )
    return sized(spark, deletions)


def _versions(spark: SparkSession, shadows: Sequence[str], cutoff: datetime) -> list[dict]:
    """One row per shadow version (table, hour, version, location) written to ``shadows``,
    in that order, with ``old`` (written before ``cutoff``) and ``written`` (its time)."""
    where = {"table_name": list(shadows)}
    found: dict[tuple, dict] = {}
    for r in audit.rows(audit.warehouse_of(spark), audit.SHADOW_PARTITIONS, where):
        key = (r["table_name"], r["hour"], r["version"], r["location"])
        entry = found.setdefault(key, {**r, "row_count": None, "release_id": None})
        for name in ("row_count", "release_id", "written_at"):
            if r[name] is not None and (entry[name] is None or r[name] > entry[name]):
                entry[name] = r[name]
    for entry in found.values():
        entry["old"] = entry["written_at"] < cutoff
        entry["written"] = f"{entry['written_at']:%Y-%m-%d %H:%M} UTC"
    return [found[key] for key in sorted(found)]


def hadoop_path(spark: SparkSession, location: str):
    """(Hadoop FileSystem, Path) of ``location``: the file system Spark reads it with."""
    path = spark._jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def vacuum(
    spark: SparkSession,
    warehouse_dir: str,
    layers: Sequence[publisher.Layer],
    *,
    max_age: timedelta,
    rollback_depth: int,
    now: datetime,
    run_id: str,
    dry_run: bool = False,
) -> list[Deletion]:
    """Plan and (unless ``dry_run``) delete, holding every layer's publish fence so no
    publish or rollback moves a pointer meanwhile; returns what was (or would be) deleted."""
    with database.fence(warehouse_dir, [layer.name for layer in layers]):
        # settle a crashed transaction first
        publisher.recover(spark, warehouse_dir, publisher.published_tables(layers))
        deletions = plan(spark, layers, max_age=max_age, rollback_depth=rollback_depth, now=now)
        if not dry_run:
            delete(spark, warehouse_dir, deletions, run_id=run_id)
    return deletions


def delete(
    spark: SparkSession, warehouse_dir: str, deletions: Sequence[Deletion], *, run_id: str
) -> None:
    """Drop each version's shadow partition and delete its folder, then record them all.

    Idempotent: a version already dropped or deleted (a crash between the two steps) is
    dropped with ``IF EXISTS`` and recorded on the next run."""
    by_table: dict[str, list[Deletion]] = {}
    for d in deletions:
        by_table.setdefault(d.table_name, []).append(d)
    for table, items in by_table.items():
        for start in range(0, len(items), _DROP_BATCH):
            specs = ", ".join(
                f"PARTITION ({partition_spec(d.hour, d.version)})"
                for d in items[start : start + _DROP_BATCH]
            )
            spark.sql(f"ALTER TABLE {table} DROP IF EXISTS {specs}")
        spark.catalog.refreshTable(table)
    for d in deletions:
        filesystem, path = hadoop_path(spark, d.location)
        filesystem.delete(path, True)
    deleted_at = audit.now()
    audit.append(
        warehouse_dir,
        audit.DELETIONS,
        [{**asdict(d), "run_id": run_id, "deleted_at": deleted_at} for d in deletions],
    )


def sized(spark: SparkSession, deletions: list[Deletion]) -> list[Deletion]:
    """The bytes each version's folder holds (0 if already gone)."""
    result = []
    for d in deletions:
        filesystem, path = hadoop_path(spark, d.location)
        size = filesystem.getContentSummary(path).getLength() if filesystem.exists(path) else 0
        result.append(Deletion(**{**asdict(d), "bytes": int(size)}))
    return result


def _days(age: timedelta) -> str:
    days = age.total_seconds() / 86400
    return f"{days:g} day(s)"
