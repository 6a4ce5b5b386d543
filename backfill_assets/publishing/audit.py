"""The audit database: append-only tables of what was written, checked and published.

| table                      | one row per                                    |
|----------------------------|------------------------------------------------|
| ``audit.shadow_partitions``| shadow partition written (table, hour, version) |
| ``audit.check_results``    | check outcome of a shadow partition             |
| ``audit.release_reads``    | upstream partition a release's shadow read      |
| ``audit.publications``     | ledger event: prepare / commit / abort of a swap|

Rows are only ever appended, one Spark job per batch of rows (never one per hour).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from backfill_assets.publishing.lock import append_lock
from backfill_assets.publishing.tables import AUDIT_DB, ensure_table, split_table, table_exists

SHADOW_PARTITIONS = f"{AUDIT_DB}.shadow_partitions"
CHECK_RESULTS = f"{AUDIT_DB}.check_results"
RELEASE_READS = f"{AUDIT_DB}.release_reads"
PUBLICATIONS = f"{AUDIT_DB}.publications"

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
}


_TYPES = {
    "string": T.StringType(),
    "bigint": T.LongType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
}


def schema(table: str) -> T.StructType:
    """The schema of an audit table (built without a Spark session)."""
    fields = (column.split() for column in _DDL[table].split(","))
    return T.StructType([T.StructField(name, _TYPES[kind]) for name, kind in fields])


def now() -> datetime:
    return datetime.now(tz=UTC)


def audit_table(spark: SparkSession, warehouse_dir: str, table: str) -> None:
    """Create ``table`` of the audit database if it does not exist yet."""
    _, name = split_table(table)
    ensure_table(spark, table, schema(table), [], f"{warehouse_dir}/audit/{name}")


def append(spark: SparkSession, warehouse_dir: str, table: str, rows: Sequence[dict]) -> None:
    """Append ``rows`` (dicts with the table's columns) to an audit table in one job."""
    if not rows:
        return
    audit_table(spark, warehouse_dir, table)
    struct = schema(table)
    tuples = [tuple(row.get(f.name) for f in struct.fields) for row in rows]
    frame = spark.createDataFrame(tuples, struct).coalesce(1)
    with append_lock(warehouse_dir, table):  # drivers of concurrent runs share the table
        frame.write.insertInto(table)


def read(spark: SparkSession, table: str) -> DataFrame:
    """The audit table as a DataFrame (empty with the right schema if never written)."""
    if not table_exists(spark, table):
        return spark.createDataFrame([], schema(table))
    spark.catalog.refreshTable(table)
    return spark.table(table)
