"""Publish checked shadow partitions by an atomic metastore pointer swap, with a ledger.

For each hour of a layer, the candidate is the newest shadow version of the layer's
checked table. It is published only if every check of the layer recorded for that exact
version passed; otherwise the hour is held back and the reasons are returned.

Publishing a batch of hours is two-phase in the append-only ledger (``audit.publications``):
1. one ``prepare`` row per (table, hour) with previous and new location;
2. per partition, ``ALTER TABLE ... PARTITION ... SET LOCATION`` (or ``ADD PARTITION``),
   one atomic metastore operation; no data is copied, renamed or deleted;
3. one ``commit`` row per (table, hour).
A crash between 1 and 3 leaves each partition at its previous or its new location (both
complete, immutable shadow versions); ``recover`` settles the pending rows against the
metastore (commit if the swap happened, abort if not) before any new publish.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets import faults
from backfill_assets.publishing import audit
from backfill_assets.publishing.lock import holding_publish_lock
from backfill_assets.publishing.tables import (
    ensure_table,
    location,
    partition_location,
    partition_spec,
    split_table,
    table_exists,
)

PREPARE, COMMIT, ABORT = "prepare", "commit", "abort"
PUBLISH, ROLLBACK = "publish", "rollback"


@dataclass(frozen=True)
class Layer:
    """The tables a layer publishes together, and the checks that gate them."""

    name: str
    checked_table: str  # the shadow table whose checks gate the layer
    pairs: tuple[tuple[str, str], ...]  # (shadow table, published table)
    checks: tuple[str, ...]
    code_version: str


@dataclass
class HourOutcome:
    hour: str
    status: str  # published | unchanged | held_back
    version: str | None = None
    reasons: list[str] = field(default_factory=list)
    tables: dict[str, dict] = field(default_factory=dict)


class PublishError(RuntimeError):
    pass


def _latest_versions(spark: SparkSession, table: str, hours: Sequence[str]) -> dict[str, dict]:
    written = audit.read(spark, audit.SHADOW_PARTITIONS).where(
        (F.col("table_name") == table) & F.col("hour").isin(list(hours))
    )
    ranked = written.withColumn(
        "rank", F.row_number().over(Window.partitionBy("hour").orderBy(F.col("written_at").desc()))
    ).where(F.col("rank") == 1)
    return {r["hour"]: r.asDict() for r in ranked.collect()}


def _shadow_rows(spark: SparkSession, tables: Sequence[str], versions: set[str]) -> dict:
    rows = audit.read(spark, audit.SHADOW_PARTITIONS).where(
        F.col("table_name").isin(list(tables)) & F.col("version").isin(list(versions))
    )
    return {(r["table_name"], r["hour"], r["version"]): r.asDict() for r in rows.collect()}


def _check_outcomes(spark: SparkSession, table: str, versions: set[str]) -> dict:
    rows = audit.read(spark, audit.CHECK_RESULTS).where(
        (F.col("table_name") == table) & F.col("version").isin(list(versions))
    )
    outcomes: dict[tuple[str, str], dict[str, tuple[bool, str]]] = {}
    for r in rows.orderBy("checked_at").collect():
        outcomes.setdefault((r["hour"], r["version"]), {})[r["check_name"]] = (
            r["passed"],
            r["detail"],
        )
    return outcomes


def plan(spark: SparkSession, layer: Layer, hours: Sequence[str]) -> list[HourOutcome]:
    """Decide, per hour, what publishing would do (no side effects)."""
    latest = _latest_versions(spark, layer.checked_table, hours)
    versions = {row["version"] for row in latest.values()}
    outcomes = _check_outcomes(spark, layer.checked_table, versions)
    shadows = _shadow_rows(spark, [s for s, _ in layer.pairs], versions)
    result = []
    for hour in hours:
        candidate = latest.get(hour)
        if candidate is None:
            result.append(HourOutcome(hour, "held_back", reasons=["no shadow version written"]))
            continue
        version = candidate["version"]
        checks = outcomes.get((hour, version), {})
        reasons = [f"{name}: not checked" for name in layer.checks if name not in checks]
        reasons += [f"{name}: {detail}" for name, (ok, detail) in sorted(checks.items()) if not ok]
        outcome = HourOutcome(hour, "held_back" if reasons else "published", version, reasons)
        for shadow, published in layer.pairs:
            row = shadow and shadows.get((shadow, hour, version))
            if row is None:
                outcome.reasons.append(f"{shadow}: no partition for version {version}")
                outcome.status = "held_back"
                continue
            current = partition_location(spark, published, hour)
            outcome.tables[published] = {
                "previous_location": current,
                "new_location": row["location"],
                "row_count": row["row_count"],
                "checksum": row["checksum"],
                "code_version": row["code_version"],
            }
        if outcome.status == "published" and all(
            t["previous_location"] == t["new_location"] for t in outcome.tables.values()
        ):
            outcome.status = "unchanged"
        result.append(outcome)
    return result


def _ensure_published_table(spark: SparkSession, warehouse_dir: str, shadow: str, published: str):
    if table_exists(spark, published):
        return
    schema = spark.table(shadow).drop("version").schema
    database, name = split_table(published)
    ensure_table(spark, published, schema, ["hour"], f"{warehouse_dir}/published/{database}/{name}")


def _swap(
    spark: SparkSession, table: str, hour: str, previous: str | None, new_location: str | None
) -> None:
    """One atomic metastore operation moving partition ``hour`` from ``previous`` to new."""
    spec = partition_spec(hour)
    exists = previous is not None
    if new_location is None:
        if exists:
            spark.sql(f"ALTER TABLE {table} DROP IF EXISTS PARTITION ({spec})")
    elif exists:
        spark.sql(f"ALTER TABLE {table} PARTITION ({spec}) SET LOCATION '{location(new_location)}'")
    else:
        spark.sql(f"ALTER TABLE {table} ADD PARTITION ({spec}) LOCATION '{location(new_location)}'")


def _ledger_rows(events: list[dict], phase: str) -> list[dict]:
    stamp = audit.now()
    return [{**e, "phase": phase, "recorded_at": stamp} for e in events]


def apply_swaps(spark: SparkSession, warehouse_dir: str, events: list[dict]) -> None:
    """Two-phase publish of prepared ledger events (each: table_name, hour, new_location...)."""
    if not events:
        return
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, _ledger_rows(events, PREPARE))
    for index, event in enumerate(events):
        _swap(
            spark,
            event["table_name"],
            event["hour"],
            event["previous_location"],
            event["new_location"],
        )
        if index == 0:
            faults.checkpoint(faults.PUBLISH_SWAP)
    for table in sorted({e["table_name"] for e in events}):
        spark.catalog.refreshTable(table)
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, _ledger_rows(events, COMMIT))


@holding_publish_lock
def publish(
    spark: SparkSession,
    warehouse_dir: str,
    layer: Layer,
    hours: Sequence[str],
    *,
    run_id: str,
    manifest: dict,
) -> list[HourOutcome]:
    """Publish every hour of ``hours`` whose newest shadow version passed all checks."""
    recover(spark, warehouse_dir)
    for shadow, published in layer.pairs:
        if table_exists(spark, shadow):
            _ensure_published_table(spark, warehouse_dir, shadow, published)
    outcomes = plan(spark, layer, hours)
    events = []
    for outcome in outcomes:
        if outcome.status != "published":
            continue
        for table, info in outcome.tables.items():
            events.append(
                {
                    "event_id": uuid.uuid4().hex,
                    "table_name": table,
                    "hour": outcome.hour,
                    "mode": PUBLISH,
                    "run_id": run_id,
                    "version": outcome.version,
                    "previous_location": info["previous_location"],
                    "new_location": info["new_location"],
                    "row_count": info["row_count"],
                    "checksum": info["checksum"],
                    "code_version": info["code_version"],
                    "backfill_id": manifest.get("backfill_id"),
                    "reason": manifest.get("reason"),
                    "requested_by": manifest.get("requested_by"),
                    "ticket": manifest.get("ticket"),
                    "run_mode": manifest.get("mode"),
                }
            )
    apply_swaps(spark, warehouse_dir, events)
    return outcomes


def ledger_state(spark: SparkSession) -> dict[tuple[str, str], list[dict]]:
    """Ledger events grouped by (table, hour), oldest first."""
    events: dict[tuple[str, str], list[dict]] = {}
    for row in audit.read(spark, audit.PUBLICATIONS).orderBy("recorded_at").collect():
        events.setdefault((row["table_name"], row["hour"]), []).append(row.asDict())
    return events


def recover(spark: SparkSession, warehouse_dir: str) -> list[dict]:
    """Settle ``prepare`` events without an outcome (a crashed publish) against the metastore."""
    settled: set[str] = set()
    pending: dict[str, dict] = {}
    for events in ledger_state(spark).values():
        for e in events:
            if e["phase"] == PREPARE:
                pending[e["event_id"]] = e
            else:
                settled.add(e["event_id"])
    resolutions = []
    for event_id, e in pending.items():
        if event_id in settled:
            continue
        current = partition_location(spark, e["table_name"], e["hour"])
        phase = COMMIT if current == e["new_location"] else ABORT
        resolutions.append(
            {
                **e,
                "phase": phase,
                "recorded_at": audit.now(),
                "reason": f"recovered after crash: {phase}",
            }
        )
    audit.append(spark, warehouse_dir, audit.PUBLICATIONS, resolutions)
    return resolutions


def verify(spark: SparkSession, tables: Sequence[str]) -> list[str]:
    """Disagreements between the ledger and the metastore ([] when they agree).

    A partition agrees when its location is the ``new_location`` of its last committed
    event, or, while a prepare is pending, either side of that pending swap.
    """
    problems = []
    state = ledger_state(spark)
    for table in tables:
        hours = {h for (t, h) in state if t == table}
        if table_exists(spark, table):
            hours |= {
                r[0].split("=", 1)[1] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()
            }
        for hour in sorted(hours):
            current = partition_location(spark, table, hour)
            events = state.get((table, hour), [])
            outcome_ids = {e["event_id"] for e in events if e["phase"] != PREPARE}
            committed = [e for e in events if e["phase"] == COMMIT]
            expected = committed[-1]["new_location"] if committed else None
            allowed = {expected}
            for e in events:
                if e["phase"] == PREPARE and e["event_id"] not in outcome_ids:
                    allowed |= {e["previous_location"], e["new_location"]}
            if current not in allowed:
                problems.append(
                    f"{table} hour={hour}: metastore {current} "
                    f"not in ledger {sorted(map(str, allowed))}"
                )
    return problems


@holding_publish_lock
def rollback(
    spark: SparkSession, warehouse_dir: str, layer: Layer, hour: str, *, run_id: str, manifest: dict
) -> list[dict]:
    """Swap every table of ``layer`` at ``hour`` back to the location before its last change."""
    recover(spark, warehouse_dir)
    state = ledger_state(spark)
    events = []
    for _, table in layer.pairs:
        committed = [e for e in state.get((table, hour), []) if e["phase"] == COMMIT]
        if not committed:
            raise PublishError(f"{table} hour={hour}: nothing published, nothing to roll back")
        last = committed[-1]
        events.append(
            {
                "event_id": uuid.uuid4().hex,
                "table_name": table,
                "hour": hour,
                "mode": ROLLBACK,
                "run_id": run_id,
                "version": None,
                "previous_location": last["new_location"],
                "new_location": last["previous_location"],
                "row_count": None,
                "checksum": None,
                "code_version": None,
                "backfill_id": None,
                "reason": manifest.get("reason") or f"rollback of event {last['event_id']}",
                "requested_by": manifest.get("requested_by"),
                "ticket": manifest.get("ticket"),
                "run_mode": manifest.get("mode"),
            }
        )
    apply_swaps(spark, warehouse_dir, events)
    return events
