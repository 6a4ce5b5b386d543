"""The audit database: append-only tables of what was written, checked and published.

| table                      | one row per                                    |
|----------------------------|------------------------------------------------|
| ``audit.shadow_partitions``| shadow partition written (table, hour, version) |
| ``audit.check_results``    | check outcome of a shadow partition             |
| ``audit.release_reads``    | upstream partition a release's shadow read      |
| ``audit.publications``     | ledger event: prepare / commit / abort of a swap|
| ``audit.deletions``        | shadow version deleted (vacuum, erasure purge)  |
| ``audit.approvals``        | change-gate finding approved by a person        |
| ``audit.erasures``         | erasure request (salted digest, never the id)   |
| ``audit.erased_lines``     | (hour, client) lines a raw build left out       |
| ``audit.cancellations``    | release cancelled by a person (nothing published)|

Rows are only ever appended. An append is one small Parquet file written straight into the
table's location through Hadoop's FileSystem (the one Spark uses, so ``file:`` locally and
``s3a:`` in production): no Spark job and no metastore call per batch, and drivers of
concurrent runs never share a staging directory. The file is written under a hidden name
(``_`` prefix, which Spark's readers skip) and renamed into place, so a reader sees a batch
whole or not at all, also when the writer is killed. ``read`` refreshes the table's file
listing first, so it sees every batch appended until then, from any driver.

``publishing.compaction`` rewrites a table's files as one in a new location and swaps the
table there, sealing the old location first: an append that finds its location sealed
carries its file into the new one before it returns (``_follow``), so a batch whose append
has returned is in the table's location from then on, compacted or not.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from backfill_assets import frames
from backfill_assets.publishing.tables import (
    AUDIT_DB,
    ensure_table,
    split_table,
    table_exists,
    table_location,
)

SHADOW_PARTITIONS = f"{AUDIT_DB}.shadow_partitions"
CHECK_RESULTS = f"{AUDIT_DB}.check_results"
RELEASE_READS = f"{AUDIT_DB}.release_reads"
PUBLICATIONS = f"{AUDIT_DB}.publications"
DELETIONS = f"{AUDIT_DB}.deletions"
APPROVALS = f"{AUDIT_DB}.approvals"
ERASURE_KIND = "erasure"  # the kind of a deletion by an erasure purge (else: vacuum's)
ERASURES = f"{AUDIT_DB}.erasures"
ERASED_LINES = f"{AUDIT_DB}.erased_lines"
CANCELLATIONS = f"{AUDIT_DB}.cancellations"
# A superseded location's seal (see ``publishing.compaction``): where its table went, when.
SEAL = "_compacted"
# How long past a seal's deadline an append waits for its table to move (host clocks).
SEAL_MARGIN = timedelta(seconds=30)
_POLL_SECONDS = 0.2

_DDL: dict[str, str] = {
    SHADOW_PARTITIONS: (
        "table_name string, hour string, version string, location string, row_count bigint, "
        "checksum string, code_version string, run_id string, written_at timestamp, "
        "release_id string"
    ),
    RELEASE_READS: (
        "release_id string, run_id string, reader_table string, upstream_table string, "
        "hour string, source string, version string, location string, read_at timestamp"
    ),
    CHECK_RESULTS: (
        "table_name string, hour string, version string, check_name string, passed boolean, "
        "detail string, run_id string, checked_at timestamp"
    ),
    PUBLICATIONS: (
        "event_id string, table_name string, hour string, phase string, mode string, "
        "run_id string, version string, previous_location string, new_location string, "
        "row_count bigint, checksum string, code_version string, backfill_id string, "
        "reason string, requested_by string, ticket string, run_mode string, "
        "recorded_at timestamp, txn_id string"
    ),
    DELETIONS: (
        "table_name string, hour string, version string, location string, row_count bigint, "
        "bytes bigint, release_id string, kind string, reason string, run_id string, "
        "deleted_at timestamp"
    ),
    APPROVALS: (
        "release_id string, layer string, hour string, version string, gate string, "
        "approved_by string, reason string, ticket string, run_id string, approved_at timestamp"
    ),
    ERASURES: (
        "erasure_id string, event string, client_id bigint, user_digest string, "
        "requested_at timestamp, reason string, requested_by string, ticket string, "
        "release_id string, hours string, run_id string, recorded_at timestamp"
    ),
    ERASED_LINES: (
        "table_name string, hour string, version string, client_id bigint, lines bigint, "
        "run_id string, recorded_at timestamp"
    ),
    CANCELLATIONS: (
        "release_id string, status string, hours string, runs string, cancelled_by string, "
        "reason string, ticket string, run_id string, cancelled_at timestamp"
    ),
}

TABLES = tuple(_DDL)

_TYPES = {
    "string": (T.StringType(), pa.string()),
    "bigint": (T.LongType(), pa.int64()),
    "boolean": (T.BooleanType(), pa.bool_()),
    "timestamp": (T.TimestampType(), pa.timestamp("us", tz="UTC")),
}


def _columns(table: str) -> list[tuple[str, str]]:
    return [tuple(column.split()) for column in _DDL[table].split(",")]  # type: ignore[misc]


def schema(table: str) -> T.StructType:
    """The schema of an audit table (built without a Spark session)."""
    return T.StructType([T.StructField(n, _TYPES[kind][0]) for n, kind in _columns(table)])


def arrow_schema(table: str) -> pa.Schema:
    """The same schema as Parquet files of the table are written with."""
    return pa.schema([pa.field(n, _TYPES[kind][1]) for n, kind in _columns(table)])


def now() -> datetime:
    return datetime.now(tz=UTC)


def audit_table(spark: SparkSession, warehouse_dir: str, table: str) -> None:
    """Create ``table`` of the audit database if it does not exist yet."""
    _, name = split_table(table)
    ensure_table(spark, table, schema(table), [], f"{warehouse_dir}/audit/{name}")


def _location(spark: SparkSession, warehouse_dir: str, table: str) -> str:
    """Where ``table`` keeps its files, the table created first if it does not exist: one
    metastore call once it exists."""
    try:
        return table_location(spark, table)
    except Exception:
        if table_exists(spark, table):  # it exists: the lookup failed for another reason
            raise
    audit_table(spark, warehouse_dir, table)
    return table_location(spark, table)


def append(spark: SparkSession, warehouse_dir: str, table: str, rows: Sequence[dict]) -> None:
    """Append ``rows`` (dicts with the table's columns) to an audit table as one file."""
    if rows:
        append_to(spark, table, _location(spark, warehouse_dir, table), rows)


def append_to(spark: SparkSession, table: str, location: str, rows: Sequence[dict]) -> None:
    """``append`` into ``location``, where the caller found the table: should a compaction
    have moved the table since, the file follows it before this returns."""
    columns = arrow_schema(table)
    batch = pa.Table.from_pylist([{n: row.get(n) for n in columns.names} for row in rows], columns)
    buffer = pa.BufferOutputStream()
    pq.write_table(batch, buffer, compression="snappy")
    file_name = f"part-{now():%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex}.parquet"
    write_file(spark, location, file_name, buffer.getvalue().to_pybytes())
    _follow(spark, table, location, file_name)


def hadoop_path(spark: SparkSession, location: str):
    """(Hadoop FileSystem, Path) of ``location``: the file system Spark reads it with."""
    path = spark._jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def write_file(
    spark: SparkSession, location: str, name: str, data: bytes, *, replace: bool = False
) -> None:
    """``data`` as ``location``/``name``: written under a hidden name (``_`` prefix, which
    Spark's readers skip) and renamed into place, so no reader ever sees part of it, also
    when the writer is killed. ``replace``: a file of that name is deleted first."""
    jvm = spark._jvm
    filesystem, directory = hadoop_path(spark, location)
    hidden = jvm.org.apache.hadoop.fs.Path(directory, f"_{uuid.uuid4().hex}-{name}")
    stream = filesystem.create(hidden, False)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    placed = jvm.org.apache.hadoop.fs.Path(directory, name)
    if replace:
        filesystem.delete(placed, False)
    if not filesystem.rename(hidden, placed):
        raise OSError(f"could not move {hidden} into place as {name}")


def read_seal(spark: SparkSession, location: str) -> dict | None:
    """The seal of a superseded location (``into``, ``sealed_at``, ``deadline``), else None."""
    filesystem, directory = hadoop_path(spark, location)
    seal = spark._jvm.org.apache.hadoop.fs.Path(directory, SEAL)
    if not filesystem.exists(seal):
        return None
    stream = filesystem.open(seal)
    try:
        value = json.loads(bytes(stream.readAllBytes()).decode())
    finally:
        stream.close()
    for key in ("sealed_at", "deadline"):
        value[key] = datetime.fromisoformat(value[key])
    return value


def carry(spark: SparkSession, source: str, file_name: str, target: str) -> bool:
    """Copy ``source``/``file_name`` into ``target`` under the same name, unless it is there:
    written hidden and renamed into place (a reader never sees part of it). A copy that
    another process made at the same time is the same bytes under the same name. Returns
    whether this call copied it."""
    jvm = spark._jvm
    source_fs, source_dir = hadoop_path(spark, source)
    target_fs, target_dir = hadoop_path(spark, target)
    placed = jvm.org.apache.hadoop.fs.Path(target_dir, file_name)
    if target_fs.exists(placed):
        return False
    hidden = jvm.org.apache.hadoop.fs.Path(target_dir, f"_{uuid.uuid4().hex}-{file_name}")
    conf = spark._jsc.hadoopConfiguration()
    jvm.org.apache.hadoop.fs.FileUtil.copy(
        source_fs,
        jvm.org.apache.hadoop.fs.Path(source_dir, file_name),
        target_fs,
        hidden,
        False,
        conf,
    )
    if not target_fs.rename(hidden, placed):
        target_fs.delete(hidden, False)
        if not target_fs.exists(placed):
            raise OSError(f"could not move {file_name} into {target}")
        return False
    return True


def _follow(spark: SparkSession, table: str, location: str, file_name: str) -> None:
    """After an append into ``location``: if a compaction sealed it, wait until the table
    moves (at most until the seal's deadline and ``SEAL_MARGIN``), then carry the file
    into the table's new location (and on, should that be sealed too). Without a seal the
    file was in place before any seal: the compaction carries it before it swaps."""
    while (seal := read_seal(spark, location)) is not None:
        give_up = seal["deadline"] + SEAL_MARGIN
        current = table_location(spark, table)
        while current == location and now() < give_up:
            time.sleep(_POLL_SECONDS)
            current = table_location(spark, table)
            if current == location and read_seal(spark, location) is None:
                return  # the compaction gave up: the table stays here
        if current == location:  # the compaction died: its seal lapsed, the table stays
            return
        carry(spark, location, file_name, current)
        location = current


def read(spark: SparkSession, table: str) -> DataFrame:
    """The audit table as a DataFrame (empty with the right schema if never written)."""
    if not table_exists(spark, table):
        return frames.empty(spark, schema(table))
    spark.catalog.refreshTable(table)
    return spark.table(table)


def deleted(spark: SparkSession, locations: Collection[str] | None = None) -> dict[str, dict]:
    """Location -> its ``audit.deletions`` row, for ``locations`` (None: every one); no
    Spark job when nothing was ever deleted."""
    if not table_exists(spark, DELETIONS) or (locations is not None and not locations):
        return {}
    df = read(spark, DELETIONS)
    if locations is not None:
        df = df.where(F.col("location").isin(sorted(locations)))
    return {r["location"]: r.asDict() for r in df.collect()}
