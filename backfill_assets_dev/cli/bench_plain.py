"""The plain PySpark job ``bench --compare`` measures the project against.

The same three layers as the product, written for speed and nothing else (no checks, no
lineage, no publish, no quarantine rows, no metastore): read and parse the part files,
typed raw rows, distinct normalized payloads per received hour, and sessions: each payload
sessionized once, per client and user, each session kept in the hour it starts. It lives in
the bench code on purpose: the product never imports it, so it stays an independent
yardstick.

``python -m backfill_assets_dev.cli.bench_plain BACKUPS OUT FIRST LAST`` runs it in a process of
its own (a new Python and Spark JVM, the code location's Spark configuration, ``DATA_ROOT``
under ``OUT``) over the received hours ``FIRST..LAST`` and the session hours of that range,
and prints its times as one JSON object: ``bench --compare`` times that process from its
start to its exit, as it times ``backfill-assets backfill``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets.core.backups.contract import DEVICES, EVENT_TYPES
from backfill_assets.core.hours import backup_hour_path

_SCHEMA = (
    "schema_version bigint, payload_id string, client_id bigint, user_id string, "
    "event_time string, event_time_ms bigint, received_at string, event_type string, "
    "page_url string, device string, referrer string"
)
_PATH = r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/client_id=(\d+)/"
_GAP_SECONDS = 1800


@dataclass
class PlainTimes:
    raw: float
    transformed: float
    aggregated: float
    raw_rows: int

    @property
    def total(self) -> float:
        return self.raw + self.transformed + self.aggregated


def _raw(spark: SparkSession, backup_root: str, hours: list[str] | None = None) -> DataFrame:
    # Spark's JSON source parses each line once, in the scan. (Parsing with ``from_json``
    # in a projection and then filtering on its fields parses every line once more per
    # field the filter reads: the optimizer pushes the filter below the projection and
    # gives each field its own pruned ``from_json``. This job did that until 2026-11-26
    # and parsed every line nine times.)
    # the whole tree, or the folders of ``hours`` (a round of ``bench --rounds``)
    folders = [backup_hour_path(h) for h in hours] if hours else ["date=*/hour=*"]
    lines = (
        spark.read.schema(_SCHEMA)
        .option("mode", "DROPMALFORMED")
        .json([f"{backup_root}/raw/{f}/client_id=*/part-*.jsonl.zst" for f in folders])
    )
    path = F.col("_metadata.file_path")
    event_time = F.coalesce(
        F.try_to_timestamp(F.col("event_time")), F.timestamp_millis(F.col("event_time_ms"))
    )
    return (
        lines.select(
            "payload_id",
            "client_id",
            "user_id",
            event_time.alias("event_time"),
            F.try_to_timestamp(F.col("received_at")).alias("received_at"),
            "event_type",
            "page_url",
            "device",
            "referrer",
            F.coalesce("schema_version", F.lit(1)).cast("int").alias("schema_version"),
            F.concat(
                F.regexp_extract(path, _PATH, 1), F.lit("T"), F.regexp_extract(path, _PATH, 2)
            ).alias("hour"),
            F.regexp_extract(path, _PATH, 3).cast("bigint").alias("folder_client"),
        )
        .where(
            F.col("payload_id").isNotNull()
            & F.col("user_id").isNotNull()
            & F.col("event_time").isNotNull()
            & F.col("received_at").isNotNull()
            & F.col("event_type").isin(*EVENT_TYPES)
            & F.col("device").isin(*DEVICES)
            & (F.col("client_id") == F.col("folder_client"))
        )
        .drop("folder_client")
    )


def _normalized_url(url: F.Column) -> F.Column:
    no_fragment = F.regexp_replace(url, "#.*$", "")
    no_utm = F.regexp_replace(no_fragment, r"(?i)([?&])utm_[^&]*(&|$)", "$1")
    return F.lower(F.regexp_replace(no_utm, r"[?&]+$", ""))


def plain_sessions(payloads: DataFrame, session_hours: list[str]) -> DataFrame:
    """The sessions of ``session_hours``: each payload sessionized once, per client and user
    over every hour read (what an expert writes; the product's received-hour windows cut a
    session only where a window edge falls inside it), each kept in the hour it starts."""
    by_user = Window.partitionBy("client_id", "user_id").orderBy("event_time", "payload_id")
    gap = F.unix_timestamp("event_time") - F.unix_timestamp(F.lag("event_time").over(by_user))
    return (
        payloads.select("client_id", "user_id", "payload_id", "event_time", "event_type")
        .withColumn("new", F.when(gap.isNull() | (gap > _GAP_SECONDS), 1).otherwise(0))
        .withColumn("session", F.sum("new").over(by_user))
        .groupBy("client_id", "user_id", "session")
        .agg(
            F.min("event_time").alias("session_start_at"),
            F.max("event_time").alias("session_end_at"),
            F.count(F.lit(1)).alias("payload_count"),
            F.sum(F.when(F.col("event_type") == "pageview", 1).otherwise(0)).alias("pageviews"),
        )
        .withColumn("session_hour", F.date_format("session_start_at", "yyyy-MM-dd'T'HH"))
        .where(F.col("session_hour").isin(*session_hours))
    )


def run_plain(
    spark: SparkSession,
    backup_root: str,
    out_dir: str,
    session_hours: list[str],
    hours: list[str] | None = None,
) -> PlainTimes:
    """Run the three layers over the whole tree (or the received ``hours``), each written
    as Parquet under ``out_dir``."""
    started = time.monotonic()
    _raw(spark, backup_root, hours).write.mode("overwrite").partitionBy("hour").parquet(
        f"{out_dir}/raw"
    )
    raw_seconds = time.monotonic() - started

    started = time.monotonic()
    raw = spark.read.parquet(f"{out_dir}/raw")
    first = Window.partitionBy("hour", "payload_id").orderBy("received_at")
    (
        raw.withColumn("n", F.row_number().over(first))
        .where(F.col("n") == 1)
        .drop("n")
        .withColumn("page_url", _normalized_url(F.col("page_url")))
        .write.mode("overwrite")
        .partitionBy("hour")
        .parquet(f"{out_dir}/transformed")
    )
    transformed_seconds = time.monotonic() - started

    started = time.monotonic()
    payloads = spark.read.parquet(f"{out_dir}/transformed")
    sessions = plain_sessions(payloads, session_hours)
    sessions.write.mode("overwrite").partitionBy("session_hour").parquet(f"{out_dir}/sessions")
    aggregated_seconds = time.monotonic() - started
    rows = spark.read.parquet(f"{out_dir}/raw").count()
    return PlainTimes(raw_seconds, transformed_seconds, aggregated_seconds, rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(
            "usage: python -m backfill_assets_dev.cli.bench_plain BACKUPS OUT FIRST LAST",
            file=sys.stderr,
        )
        return 2
    from backfill_assets.core.hours import hours_between
    from backfill_assets.core.spark.session import spark_session
    from backfill_assets.settings import Settings

    backups, out, first, last = Path(args[0]).resolve(), Path(args[1]).resolve(), *args[2:]
    hours = hours_between(first, last)
    if not hours:
        print(f"bench_plain: empty range {first}..{last}", file=sys.stderr)
        return 2
    settings = Settings.from_env(
        {"BACKUP_ROOT": str(backups), "DATA_ROOT": str(out / "data"), "DAGSTER_HOME": str(out)}
    )
    spark = spark_session(settings)
    times = run_plain(spark, str(backups), str(out / "tables"), hours, hours=hours)
    print(json.dumps({**asdict(times), "total": times.total}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
