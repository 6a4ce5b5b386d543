"""The publisher's transaction rules on releases written directly (no Dagster run): real
shadow partitions in the embedded metastore and real audit rows, as the IO manager and the
checks write them, so each rule is driven to its edge in a few Spark jobs.

Each scenario came from a review: a recovery that settled another run's transaction in
flight, a downstream hour built on a superseded upstream version, a stale published read
missed when only the downstream layer is published (or republished and rolled back since it
was read), an older build published over a newer one, and rollbacks that stepped back one
version only or left a later release built on what they removed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backfill_assets import settings
from backfill_assets.core import faults
from backfill_assets.core.layers.shadow_io import qualify
from backfill_assets.core.names import LAYERS
from backfill_assets.core.warehouse import audit, publisher
from backfill_assets.core.warehouse.tables import (
    ensure_table,
    partition_locations,
    partition_spec,
    table_exists,
)
from backfill_assets.defs.checks import common

RAW, TRANSFORMED, AGGREGATED = LAYERS["raw"], LAYERS["transformed"], LAYERS["aggregated"]
ALL = [RAW, TRANSFORMED, AGGREGATED]
TABLES = publisher.published_tables(ALL)
HOUR = "2026-11-20T03"
MANIFEST = {"reason": "test", "requested_by": "test", "mode": "backfill"}
# the columns the change gates measure, whatever the table
SCHEMA = (
    "payload_id string, client_id bigint, user_id string, payload_count bigint, hour string, "
    "version string"
)


@pytest.fixture
def wh(warehouse, base_settings) -> str:
    return base_settings.warehouse_dir


def write(spark, wh: str, table: str, version: str, release: str, checksum: str = "") -> str:
    """One shadow partition of ``table`` at HOUR, registered and recorded like the IO
    manager's; returns its location. The three rows' file is written with pyarrow (no Spark
    job: these tests are about the ledger, not the write)."""
    root = f"{wh}/shadow/{table.split('.')[1]}"
    if not table_exists(spark, table):
        ensure_table(
            spark, table, spark.createDataFrame([], SCHEMA).schema, ["hour", "version"], root
        )
    path = f"{root}/version={version}/hour={HOUR}"
    Path(path).mkdir(parents=True)
    rows = {"payload_id": ["p0", "p1", "p2"], "client_id": [1, 1, 1], "user_id": ["u0", "u1", "u2"]}
    pq.write_table(pa.table({**rows, "payload_count": [1, 1, 1]}), f"{path}/part-0.parquet")
    spark.sql(
        f"ALTER TABLE {table} ADD PARTITION ({partition_spec(HOUR, version)}) LOCATION '{path}'"
    )
    record = {
        "table_name": table,
        "hour": HOUR,
        "version": version,
        "location": qualify(path),
        "row_count": 3,
        "checksum": checksum or f"3:{version}",  # other rows per version by default
        "code_version": "test",
        "run_id": version,
        "written_at": audit.now(),
        "release_id": release,
    }
    audit.append(wh, audit.SHADOW_PARTITIONS, [record])
    return qualify(path)


def build(
    spark, wh: str, layer, version: str, release: str, *, passed: bool = True, checksum: str = ""
) -> str:
    """A layer's shadow partitions at HOUR and its checks' outcomes; returns the location
    of its main table."""
    locations = [write(spark, wh, shadow, version, release, checksum) for shadow, _ in layer.pairs]
    failing = {} if passed else {HOUR: "failed on purpose"}
    common.record_all(
        spark, wh, layer.checked_table, version, [HOUR], {n: failing for n in layer.checks}
    )
    return locations[0]


def read(spark, wh: str, release: str, reader, upstream, source: str, version, location):
    """What a downstream build records in ``audit.release_reads``."""
    audit.append(
        wh,
        audit.RELEASE_READS,
        [
            {
                "release_id": release,
                "run_id": version or "run",
                "reader_table": reader.checked_table,
                "upstream_table": upstream.tables[0],
                "hour": HOUR,
                "source": source,
                "version": version,
                "location": location,
                "read_at": audit.now(),
            }
        ],
    )


def full_release(spark, wh: str, release: str, version: str, checksum: str = "") -> None:
    raw = build(spark, wh, RAW, version, release, checksum=checksum)
    transformed = build(spark, wh, TRANSFORMED, version, release, checksum=checksum)
    build(spark, wh, AGGREGATED, version, release, checksum=checksum)
    of_release = publisher.SOURCE_RELEASE
    read(spark, wh, release, TRANSFORMED, RAW, of_release, version, raw)
    read(spark, wh, release, AGGREGATED, TRANSFORMED, of_release, version, transformed)


def publish(spark, wh: str, release: str, layers=ALL) -> publisher.ReleasePlan:
    return publisher.publish_release(
        spark, wh, release, layers, run_id=f"publish-{release}", manifest=MANIFEST
    )


def rollback(spark, wh: str, release: str):
    return publisher.rollback_release(
        spark, wh, ALL, release_id=release, run_id=f"rollback-{release}", manifest=MANIFEST
    )


def live(spark) -> dict[str, str]:
    """Published table -> the version live at HOUR ('' for none)."""
    return {
        table: partition_locations(spark, table).get(HOUR, "").split("/version=")[-1].split("/")[0]
        for table in TABLES
    }


def test_recovery_leaves_alone_a_transaction_of_layers_it_does_not_hold(spark, wh, monkeypatch):
    """A publish between two swaps is not a crash: a recovery holding only other layers'
    locks (or none of its tables) must not undo it; the publish commits whole."""
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    full_release(spark, wh, "r1", "v1")
    settled_meanwhile = []
    checkpoint = faults.checkpoint

    def recovery_in_between(name: str) -> None:
        if name == f"{faults.PUBLISH_SWAP}.0":  # the first table swapped, the rest not yet
            settled_meanwhile.extend(
                publisher.recover(spark, wh, publisher.published_tables([AGGREGATED]))
            )
        checkpoint(name)

    monkeypatch.setattr(faults, "checkpoint", recovery_in_between)
    publish(spark, wh, "r1")

    assert settled_meanwhile == []
    assert set(live(spark).values()) == {"v1"}
    assert publisher.pending_transactions(spark) == {}
    assert publisher.verify(spark, TABLES) == []


def test_a_downstream_hour_built_on_a_superseded_upstream_version_is_held_back(spark, wh):
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    first_raw = build(spark, wh, RAW, "v1a", "r1", passed=False)
    transformed = build(spark, wh, TRANSFORMED, "v1a", "r1")
    read(spark, wh, "r1", TRANSFORMED, RAW, publisher.SOURCE_RELEASE, "v1a", first_raw)
    build(spark, wh, RAW, "v1b", "r1")  # raw rebuilt in the same release, and passing
    build(spark, wh, AGGREGATED, "v1a", "r1")
    read(spark, wh, "r1", AGGREGATED, TRANSFORMED, publisher.SOURCE_RELEASE, "v1a", transformed)

    plan = publish(spark, wh, "r1")

    status = {o.layer: (o.status, o.reasons) for o in plan.outcomes}
    assert status["raw"] == (publisher.PUBLISHED, [])
    assert status["transformed"][0] == publisher.HELD_BACK
    assert (
        "reads raw 2026-11-20T03 version v1a, but the release publishes version v1b"
        in (status["transformed"][1][0])
    )
    assert status["aggregated"][0] == publisher.HELD_BACK  # read the held-back hour
    assert live(spark) == {
        "raw.payloads": "v1b",
        "raw.quarantine": "v1b",
        "transformed.payloads": "v0",
        "aggregated.sessions": "v0",
        "aggregated.client_hourly": "v0",
    }


def test_a_stale_published_read_refuses_a_downstream_only_publish(spark, wh):
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    # r2 rebuilds aggregated only, on the published transformed hour (r0's)
    build(spark, wh, AGGREGATED, "v2", "r2")
    read_at = partition_locations(spark, "transformed.payloads")[HOUR]
    read(spark, wh, "r2", AGGREGATED, TRANSFORMED, publisher.SOURCE_PUBLISHED, None, read_at)
    # r3 then republishes raw and transformed there
    raw = build(spark, wh, RAW, "v3", "r3")
    build(spark, wh, TRANSFORMED, "v3", "r3")
    read(spark, wh, "r3", TRANSFORMED, RAW, publisher.SOURCE_RELEASE, "v3", raw)
    publish(spark, wh, "r3", [RAW, TRANSFORMED])

    for layers in (ALL, [AGGREGATED]):
        with pytest.raises(publisher.PublishError, match="read published data that has changed"):
            publish(spark, wh, "r2", layers)
    assert live(spark)["aggregated.sessions"] == "v0"


def test_a_published_read_republished_and_rolled_back_since_is_stale(spark, wh):
    """The build reads its published upstream lazily, after it recorded the location: a
    publish there in between may have been read even if a rollback put it back since."""
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    build(spark, wh, AGGREGATED, "v2", "r2")
    read_at = partition_locations(spark, "transformed.payloads")[HOUR]
    read(spark, wh, "r2", AGGREGATED, TRANSFORMED, publisher.SOURCE_PUBLISHED, None, read_at)
    full_release(spark, wh, "r3", "v3")
    publish(spark, wh, "r3", [RAW, TRANSFORMED])
    rollback(spark, wh, "r3")
    assert partition_locations(spark, "transformed.payloads")[HOUR] == read_at  # back

    with pytest.raises(publisher.PublishError, match="republished or rolled back at"):
        publish(spark, wh, "r2", [AGGREGATED])
    assert live(spark)["aggregated.sessions"] == "v0"


def test_an_older_build_is_not_published_over_a_newer_one(spark, wh):
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    full_release(spark, wh, "old", "vold")  # built first (a dry run, say)
    full_release(spark, wh, "new", "vnew")  # built later
    publish(spark, wh, "new")

    plan = publish(spark, wh, "old")  # an old command run again

    assert {o.status for o in plan.outcomes} == {publisher.HELD_BACK}
    assert all(any("is newer than version vold" in r for r in o.reasons) for o in plan.outcomes)
    assert set(live(spark).values()) == {"vnew"}


def test_an_older_build_of_the_same_rows_leaves_the_newer_one_published(spark, wh):
    """Two backfills of the same input (deterministic: the same rows) publish in either
    order: the older one finds its rows published already, not a newer version to undo."""
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    full_release(spark, wh, "old", "vold", checksum="3:same")
    full_release(spark, wh, "new", "vnew", checksum="3:same")
    publish(spark, wh, "new")

    plan = publish(spark, wh, "old")

    assert {o.status for o in plan.outcomes} == {publisher.UNCHANGED}
    assert set(live(spark).values()) == {"vnew"}
    assert publisher.verify(spark, TABLES) == []


def test_rollback_of_a_release_published_twice_restores_what_was_before_it(spark, wh):
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    full_release(spark, wh, "r1", "v1a")
    publish(spark, wh, "r1")
    full_release(spark, wh, "r1", "v1b")
    publish(spark, wh, "r1")

    rollback(spark, wh, "r1")

    assert set(live(spark).values()) == {"v0"}
    assert publisher.verify(spark, TABLES) == []
    with pytest.raises(publisher.PublishError, match="no longer published anywhere"):
        rollback(spark, wh, "r1")


def test_rollback_refuses_while_a_later_release_built_on_it_is_published(spark, wh):
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    build(spark, wh, RAW, "v1", "r1")
    publish(spark, wh, "r1", [RAW])
    # r2 rebuilds the downstream layers on r1's published raw
    transformed = build(spark, wh, TRANSFORMED, "v2", "r2")
    raw_live = partition_locations(spark, "raw.payloads")[HOUR]
    read(spark, wh, "r2", TRANSFORMED, RAW, publisher.SOURCE_PUBLISHED, None, raw_live)
    build(spark, wh, AGGREGATED, "v2", "r2")
    read(spark, wh, "r2", AGGREGATED, TRANSFORMED, publisher.SOURCE_RELEASE, "v2", transformed)
    publish(spark, wh, "r2")

    with pytest.raises(
        publisher.PublishError, match=re.escape("release(s) r2 read what it published")
    ):
        rollback(spark, wh, "r1")
    assert live(spark)["raw.payloads"] == "v1"

    rollback(spark, wh, "r2")
    rollback(spark, wh, "r1")
    assert set(live(spark).values()) == {"v0"}
    assert publisher.verify(spark, TABLES) == []


def test_an_hour_read_as_empty_and_published_since_refuses_the_release(spark, wh):
    """A build that read an upstream hour as empty (declared missing, or outside the
    backups) is stale once that hour is published: it was built without its rows."""
    build(spark, wh, TRANSFORMED, "v1", "r1")
    read(spark, wh, "r1", TRANSFORMED, RAW, publisher.SOURCE_EMPTY, None, None)
    build(spark, wh, RAW, "v2", "r2")  # the hour's backups land and are published
    publish(spark, wh, "r2", [RAW])

    with pytest.raises(
        publisher.PublishError, match=re.escape("raw.payloads 2026-11-20T03 (read as empty")
    ):
        publish(spark, wh, "r1", [TRANSFORMED])
    assert live(spark)["transformed.payloads"] == ""


def test_the_ledger_database_unreachable_mid_publish_leaves_nothing_split(
    spark, wh, base_settings, monkeypatch
):
    """The database goes away after the swaps, before the commit: the swaps are undone and
    the publish fails in one line naming the database and the cause; once it is back the
    next recovery aborts the prepared transaction and the release publishes."""
    full_release(spark, wh, "r0", "v0")
    publish(spark, wh, "r0")
    full_release(spark, wh, "r1", "v1")
    db = Path(base_settings.data_root) / settings.LEDGER_FILE
    moved = db.with_name("moved-away.sqlite")
    checkpoint = faults.checkpoint

    def unreachable(name: str) -> None:
        if name == f"{faults.PUBLISH_SWAP}.{len(TABLES) - 1}":  # every table swapped
            db.rename(moved)
            db.mkdir()  # the path opens no database
        checkpoint(name)

    monkeypatch.setattr(faults, "checkpoint", unreachable)
    with pytest.raises(publisher.PublishError) as error:
        publish(spark, wh, "r1")
    message = str(error.value)
    assert "\n" not in message
    assert re.fullmatch(
        r"transaction \w+ not committed, its swaps undone \(nothing published\): ledger "
        rf"database {db} unavailable: unable to open database file",
        message,
    ), message
    assert set(live(spark).values()) == {"v0"}

    db.rmdir()
    moved.rename(db)
    monkeypatch.setattr(faults, "checkpoint", checkpoint)
    assert publisher.verify(spark, TABLES) == []  # pending, nothing swapped: not split
    settled = publisher.recover(spark, wh, TABLES)
    assert {e["phase"] for e in settled} == {publisher.ABORT}
    assert publisher.pending_transactions(spark) == {}
    publish(spark, wh, "r1")
    assert set(live(spark).values()) == {"v1"}
    assert publisher.verify(spark, TABLES) == []
