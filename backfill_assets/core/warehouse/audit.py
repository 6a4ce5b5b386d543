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
| ``audit.rule_counts``      | rule counts a build kept for its check step      |

Rows are only ever appended, into the ledger database (``core.warehouse.database``: SQLite
under ``DATA_ROOT`` by default, PostgreSQL in production). ``rows`` reads them without Spark
(a few indexed rows for the ledger's readers: ``verify``, ``reconcile``, ``report``);
``read`` hands them to Spark as a DataFrame for the jobs that join them with table data.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from sqlalchemy.engine import Connection

from backfill_assets.core.warehouse import database
from backfill_assets.core.warehouse.tables import AUDIT_DB

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
RULE_COUNTS = f"{AUDIT_DB}.rule_counts"
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
    RULE_COUNTS: (
        "table_name string, version string, model string, by_columns string, groups string, "
        "run_id string, counted_at timestamp"
    ),
}

TABLES = tuple(_DDL)
METADATA = sa.MetaData()
SQL: dict[str, sa.Table] = {t: database.sql_table(METADATA, t, ddl) for t, ddl in _DDL.items()}
# One row per published table with a prepared ledger transaction and no outcome yet.
OPEN = sa.Table(
    database.OPEN_TRANSACTIONS,
    METADATA,
    sa.Column("table_name", sa.Text, primary_key=True),
    sa.Column("txn_id", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text),
    sa.Column("opened_at", database.UtcTime()),
)

_TYPES = {
    "string": T.StringType(),
    "bigint": T.LongType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
}


def schema(table: str) -> T.StructType:
    """The schema of an audit table as Spark reads it (built without a Spark session)."""
    return T.StructType([T.StructField(n, _TYPES[k]) for n, k in database.columns(_DDL[table])])


def now() -> datetime:
    return datetime.now(tz=UTC)


def warehouse_of(spark: SparkSession) -> str:
    """The warehouse directory of a Spark session (``spark.sql.warehouse.dir``)."""
    return spark.conf.get("spark.sql.warehouse.dir")


def _aware(value: object) -> object:
    """Timestamps as UTC-aware datetimes (SQLite hands them back naive)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def insert(connection: Connection, table: str, rows: Sequence[Mapping]) -> None:
    """Append ``rows`` inside the caller's ledger transaction."""
    if rows:
        names = [n for n, _ in database.columns(_DDL[table])]
        connection.execute(SQL[table].insert(), [{n: row.get(n) for n in names} for row in rows])


def append(warehouse_dir: str, table: str, rows: Sequence[dict]) -> None:
    """Append ``rows`` (dicts with the table's columns) to an audit table in one database
    transaction. No Spark: a job that only records (a cancellation) starts no JVM."""
    if rows:
        with database.transaction(warehouse_dir) as connection:
            insert(connection, table, rows)


def rows(
    warehouse_dir: str,
    table: str,
    where: Mapping[str, Collection | object] | None = None,
    order_by: str | None = None,
) -> list[dict]:
    """Rows of an audit table (no Spark): ``where`` column -> value, or a collection of
    values (``IN``); in ``order_by`` order, else as appended."""
    sql = SQL[table]
    query = sa.select(*[c for c in sql.columns if c.name != "_row"])
    for name, value in (where or {}).items():
        if isinstance(value, Collection) and not isinstance(value, str):
            query = query.where(sql.c[name].in_(sorted(value)))
        else:
            query = query.where(sql.c[name] == value)
    query = query.order_by(*([sql.c[order_by]] if order_by else []), sql.c._row)
    with database.transaction(warehouse_dir) as connection:
        found = connection.execute(query).mappings().all()
    return [{k: _aware(v) for k, v in r.items()} for r in found]


def read(spark: SparkSession, table: str) -> DataFrame:
    """The audit table as a DataFrame (for Spark jobs that join it with table data)."""
    found = rows(warehouse_of(spark), table)
    return spark.createDataFrame([tuple(r.values()) for r in found], schema(table))


def deleted(spark: SparkSession, locations: Collection[str] | None = None) -> dict[str, dict]:
    """Location -> its ``audit.deletions`` row, for ``locations`` (None: every one)."""
    if locations is not None and not locations:
        return {}
    where = None if locations is None else {"location": locations}
    return {r["location"]: r for r in rows(warehouse_of(spark), DELETIONS, where)}
