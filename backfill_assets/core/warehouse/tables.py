"""Table names, validated SQL fragments and metastore helpers.

Every value that reaches SQL or a path goes through ``identifier``, ``literal`` (validated
hour keys, run ids, locations) so a partition key or a path cannot inject SQL.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from backfill_assets.core.hours import parse_hour

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SAFE_LOCATION = re.compile(r"^[A-Za-z0-9_\-./:=+@%~]+$")

AUDIT_DB = "audit"


class UnsafeValueError(ValueError):
    """A value that would reach SQL or a path and does not match its strict pattern."""


def identifier(name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise UnsafeValueError(f"invalid SQL identifier {name!r}")
    return name


def split_table(table: str) -> tuple[str, str]:
    database, _, name = table.partition(".")
    return identifier(database), identifier(name)


def run_id(value: str) -> str:
    if not _RUN_ID.match(value):
        raise UnsafeValueError(f"invalid run id {value!r}")
    return value


def location(value: str) -> str:
    if not _SAFE_LOCATION.match(value) or ".." in value.split("/"):
        raise UnsafeValueError(f"unsafe location {value!r}")
    return value


def hour_literal(hour: str) -> str:
    parse_hour(hour)
    return f"'{hour}'"


def partition_spec(hour: str, version: str | None = None) -> str:
    spec = f"hour={hour_literal(hour)}"
    if version is not None:
        spec += f", version='{run_id(version)}'"
    return spec


def ensure_table(
    spark: SparkSession, table: str, schema: StructType, partition_columns: list[str], root: str
) -> None:
    """Create an external Parquet table (no-op if it exists); partition columns last."""
    database, _ = split_table(table)
    if table_exists(spark, table):  # one metastore lookup instead of two DDL statements
        return
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    data = [f for f in schema.fields if f.name not in partition_columns]
    columns = ", ".join(f"`{identifier(f.name)}` {f.dataType.simpleString()}" for f in data)
    parts = ", ".join(f"`{identifier(c)}` string" for c in partition_columns)
    partitioned = f" PARTITIONED BY ({', '.join(partition_columns)})" if partition_columns else ""
    ddl_columns = f"{columns}, {parts}" if parts else columns
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} ({ddl_columns}) USING parquet{partitioned} "
        f"LOCATION '{location(root)}'"
    )


def table_exists(spark: SparkSession, table: str) -> bool:
    """Whether ``table`` exists: one metastore call (``spark.catalog.tableExists`` makes two,
    looking the database up first; a missing database is a missing table here too)."""
    return bool(_external_catalog(spark).tableExists(*split_table(table)))


def warm_metastore(spark: SparkSession) -> threading.Thread | None:
    """Connect the session to its metastore in a thread of its own, while the caller does
    other work: the first metastore call of a JVM starts the Hive client (and, locally,
    boots Derby), 1.5-3 s that the first ``ensure_table`` or table read would wait for. That
    call then finds the client ready (or waits for it); an error here is left for it to
    raise.

    Not while an embedded metastore is yet to be created (the first run on a new
    ``DATA_ROOT``): Hive and Derby create it wrongly from two threads at once, and the run
    failed ("The database directory '...metastore_db' exists. However, it does not contain
    the expected 'service.properties' file"). None then."""
    if embedded_metastore_missing(spark.conf.get(METASTORE_URL, "")):
        return None

    def connect() -> None:
        with contextlib.suppress(Exception):
            _external_catalog(spark).databaseExists("default")

    thread = threading.Thread(target=connect, name="warm-metastore", daemon=True)
    thread.start()
    return thread


METASTORE_URL = "spark.hadoop.javax.jdo.option.ConnectionURL"
_DERBY_DATABASE = re.compile(r"^jdbc:derby:(?:[^;]*);(?:.*;)?databaseName=([^;]+)")


def embedded_database(connection_url: str) -> str | None:
    """The folder of the embedded Derby metastore ``connection_url`` names; None for
    another metastore."""
    match = _DERBY_DATABASE.match(connection_url)
    return match.group(1) if match else None


def embedded_metastore_missing(connection_url: str) -> bool:
    """Whether ``connection_url`` is an embedded Derby metastore that does not exist yet
    (no ``service.properties`` in its folder; a remote metastore is never missing)."""
    database = embedded_database(connection_url)
    return bool(database) and not (Path(database) / "service.properties").is_file()


def _external_catalog(spark: SparkSession):
    """The session's metastore client (``ExternalCatalog``), for calls SQL does not batch."""
    return spark._jsparkSession.sessionState().catalog().externalCatalog()


def _partitions(spark: SparkSession, table: str) -> Iterator[tuple[str, Any]]:
    """(hour, ``CatalogTablePartition``) of every partition of ``table``, one metastore call."""
    database, name = split_table(table)
    listing = _external_catalog(spark).listPartitions(
        database, name, spark._jvm.scala.Option.empty()
    )
    iterator = listing.iterator()
    while iterator.hasNext():
        partition = iterator.next()
        yield partition.spec().get("hour").get(), partition


def table_location(spark: SparkSession, table: str) -> str:
    """The location of an existing table, as the metastore reports it."""
    return _external_catalog(spark).getTable(*split_table(table)).location().toString()


def partition_locations(spark: SparkSession, table: str) -> dict[str, str]:
    """Every partition of ``table`` (hour -> location as the metastore reports it), in one
    metastore call; {} if the table does not exist. Only for tables partitioned by hour."""
    if not table_exists(spark, table):
        return {}
    return {hour: p.location().toString() for hour, p in _partitions(spark, table)}


def published_hours(spark: SparkSession, table: str) -> list[str]:
    """The hours ``table`` has a partition for, sorted; [] if the table does not exist."""
    return sorted(partition_locations(spark, table))


_COPY_ARITY: dict[str, int] = {}


def _copy_arity(cls) -> int:
    """Fields of a Scala case class (its ``copy$default$N`` methods), once per class."""
    name = cls.getName()
    if name not in _COPY_ARITY:
        methods = [m.getName() for m in cls.getMethods()]
        _COPY_ARITY[name] = sum(1 for m in methods if m.startswith("copy$default$"))
    return _COPY_ARITY[name]


def _scala_copier(obj, leading: int):
    """A function of ``leading`` values making ``obj.copy(*values)`` of a Scala case class,
    the other fields unchanged (their ``copy$default$N``, read once), whatever number of
    fields this Spark version's class has."""
    count = _copy_arity(obj.getClass())
    rest = [getattr(obj, f"copy$default${i}")() for i in range(leading + 1, count + 1)]
    return lambda *values: obj.copy(*values, *rest)


def _scala_copy(obj, *leading):
    """``obj.copy(*leading)`` of a Scala case class, the other fields unchanged."""
    return _scala_copier(obj, len(leading))(*leading)


def register_partitions(
    spark: SparkSession, table: str, locations: dict[tuple[str, str], str]
) -> None:
    """Register shadow partitions (hour, version) -> location of ``table``, leaving any that
    exist as they are (``ADD IF NOT EXISTS``), in one metastore transaction."""
    partitions = [(h, v, where) for (h, v), where in sorted(locations.items())]
    _create_partitions(spark, table, partitions, keep_existing=True)


def _create_partitions(
    spark: SparkSession,
    table: str,
    partitions: list[tuple[str, str | None, str]],
    *,
    keep_existing: bool,
) -> None:
    """Create the partitions (hour, version or None, location) of ``table``, each validated,
    in one ``createPartitions`` (one metastore transaction), then refresh the session's view
    of the table. ``keep_existing``: a partition that exists is left as it is; else it
    fails the whole call.

    Through the metastore client rather than SQL: ``ALTER TABLE ... ADD`` made ten metastore
    calls whatever the number of partitions (and split more than 100 into several
    transactions), this makes five (each 2.5-7 ms on an idle embedded metastore, 20-25 ms
    under the suite's load; paid by every shadow output and every publish)."""
    for hour, version, where in partitions:
        partition_spec(hour, version)  # validated
        location(where)
    database, name = split_table(table)
    jvm = spark._jvm
    catalog = _external_catalog(spark)
    storage = catalog.getTable(database, name).storage()  # the table's format and serde
    to_uri = jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils.stringToURI
    # qualified as SQL's ADD qualifies it (file:/..., s3a://...): the ledger compares them
    qualified = spark._jsparkSession.sessionState().catalog().makeQualifiedPath
    to_map = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap
    # JVM classes looked up once, not per partition: py4j resolves each name of a
    # ``jvm.a.b.C`` chain in a round trip of its own (a miss scans every jar)
    hash_map, option = jvm.java.util.HashMap, jvm.scala.Option
    partition = jvm.org.apache.spark.sql.catalyst.catalog.CatalogTablePartition
    no_parameters, no_stats = to_map(hash_map()), option.empty()  # immutable, shared
    stored_at = _scala_copier(storage, 1)  # the table's storage at another location
    created = jvm.java.lang.System.currentTimeMillis()
    made = jvm.java.util.ArrayList()
    for hour, version, where in partitions:
        spec = hash_map()
        spec.put("hour", hour)
        if version is not None:
            spec.put("version", version)
        made.add(
            partition(
                to_map(spec),
                stored_at(option.apply(qualified(to_uri(where)))),
                no_parameters,
                created,
                -1,
                no_stats,
            )
        )
    sequence = jvm.scala.jdk.javaapi.CollectionConverters.asScala(made).toSeq()
    catalog.createPartitions(database, name, sequence, keep_existing)
    spark.catalog.refreshTable(f"{database}.{name}")


def swap_partitions(
    spark: SparkSession, table: str, moves: list[tuple[str, str | None, str | None]]
) -> None:
    """Move partitions of ``table``: (hour, previous location, new location) each, in at most
    three metastore operations whatever the number of hours.

    Relocations (``SET LOCATION``) are one ``alter_partitions`` call, one transaction in the
    metastore: every hour of the table moves together. New partitions are one
    ``createPartitions`` of all of them (one transaction; an hour that exists meanwhile
    fails it), removed ones one ``DROP`` of all of them. No data is copied or deleted.
    """
    table = ".".join(split_table(table))  # the ledger's name may reach SQL: validated
    drops = [hour for hour, previous, new in moves if new is None and previous is not None]
    adds = [(hour, new) for hour, previous, new in moves if new is not None and previous is None]
    relocations = {hour: new for hour, previous, new in moves if new and previous}
    if drops:
        specs = ", ".join(f"PARTITION ({partition_spec(h)})" for h in drops)
        spark.sql(f"ALTER TABLE {table} DROP IF EXISTS {specs}")
    if adds:
        _create_partitions(spark, table, [(h, None, n) for h, n in adds], keep_existing=False)
    if relocations:
        _relocate(spark, table, relocations)


def _relocate(spark: SparkSession, table: str, locations: dict[str, str]) -> None:
    for hour, new in locations.items():
        parse_hour(hour)
        location(new)
    jvm = spark._jvm
    to_uri = jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils.stringToURI
    option = jvm.scala.Option  # looked up once, not per partition
    changed = jvm.java.util.ArrayList()
    found = set()
    for hour, partition in _partitions(spark, table):
        if hour in locations:
            found.add(hour)
            storage = _scala_copy(partition.storage(), option.apply(to_uri(locations[hour])))
            changed.add(_scala_copy(partition, partition.spec(), storage))
    missing = sorted(set(locations) - found)
    if missing:
        raise ValueError(f"{table}: no partition {', '.join(missing)} to move (dropped meanwhile?)")
    partitions = jvm.scala.jdk.javaapi.CollectionConverters.asScala(changed).toSeq()
    _external_catalog(spark).alterPartitions(*split_table(table), partitions)
