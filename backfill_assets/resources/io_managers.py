"""The PySpark IO manager that writes asset outputs into run-scoped shadow tables.

An output of asset ``shadow/<name>`` for run R and hours H1..Hn becomes Parquet files under
``<warehouse_dir>/shadow/<name>/version=R/hour=H`` (one Spark job for the whole range),
registered as partitions (hour, version) of the Spark table ``shadow.<name>``. A shadow
partition is immutable: a later run writes a new version beside it, never over it, so a
published pointer to it can never change under a reader. Each partition's row count and
checksum are recorded in ``audit.shadow_partitions`` and in the output's metadata.
"""

import time

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from backfill_assets.partitions import parse_hour
from backfill_assets.publishing import audit
from backfill_assets.publishing.tables import (
    ensure_table,
    location,
    partition_spec,
    run_id,
    split_table,
    table_name,
)

LINEAGE_COLUMNS = ("run_id", "code_version")
SHADOW_PARTITION_COLUMNS = ["hour", "version"]


def qualify(path: str) -> str:
    """A location as the metastore reports it (``file:/abs/path`` for local paths)."""
    return f"file:{path}" if path.startswith("/") else path


def partition_stats(df: DataFrame) -> dict[str, tuple[int, str, str | None]]:
    """Rows, an order-independent checksum and the code version per hour, in one Spark action.

    The checksum hashes every data column except the lineage columns, so the same input
    and code give the same checksum in every run; the code version is the rows' own
    ``code_version`` lineage column (None for an hour without rows).
    """
    columns = [c for c in df.columns if c not in (*LINEAGE_COLUMNS, "hour", "version")]
    code = F.max("code_version") if "code_version" in df.columns else F.lit(None)
    rows = (
        df.groupBy("hour")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.xxhash64(*columns).cast("decimal(38,0)")).alias("hash_sum"),
            code.cast("string").alias("code_version"),
        )
        .collect()
    )
    return {
        r["hour"]: (r["rows"], f"{r['rows']}:{r['hash_sum'] or 0}", r["code_version"]) for r in rows
    }


class ShadowTableIOManager(dg.ConfigurableIOManager):
    """Writes Spark DataFrames to run-scoped shadow partitions; reads the latest version."""

    pyspark: dg.ResourceDependency[LazyPySparkResource]
    warehouse_dir: str

    @property
    def spark(self) -> SparkSession:
        return self.pyspark.spark_session

    def _root(self, table: str) -> str:
        _, name = split_table(table)
        return location(f"{self.warehouse_dir}/shadow/{name}")

    def handle_output(self, context: dg.OutputContext, obj: DataFrame) -> None:
        table = table_name(context.asset_key)
        version = run_id(context.run_id)
        hours = sorted(context.asset_partition_keys)
        for hour in hours:
            parse_hour(hour)
        root = self._root(table)
        version_root = f"{root}/version={version}"
        code_version = context.asset_spec.code_version
        started = time.monotonic()
        ensure_table(
            self.spark, table, obj.schema.add("version", "string"), SHADOW_PARTITION_COLUMNS, root
        )
        context.log.info(f"writing {table} version {version} for {len(hours)} hour(s)")
        obj.write.mode("overwrite").partitionBy("hour").parquet(version_root)
        clauses = " ".join(
            f"PARTITION ({partition_spec(h, version)}) LOCATION '{version_root}/hour={h}'"
            for h in hours
        )
        self.spark.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS {clauses}")
        self.spark.catalog.refreshTable(table)
        written = self.spark.table(table).where(F.col("version") == version)
        stats = partition_stats(written.where(F.col("hour").isin(hours)))
        now = audit.now()
        audit.append(
            self.spark,
            self.warehouse_dir,
            audit.SHADOW_PARTITIONS,
            [
                {
                    "table_name": table,
                    "hour": h,
                    "version": version,
                    "location": qualify(f"{version_root}/hour={h}"),
                    "row_count": stats.get(h, (0, ""))[0],
                    "checksum": stats.get(h, (0, "0:0"))[1],
                    "code_version": stats.get(h, (0, "", None))[2] or code_version,
                    "run_id": context.run_id,
                    "written_at": now,
                }
                for h in hours
            ],
        )
        seconds = time.monotonic() - started
        rows_written = sum(s[0] for s in stats.values())
        context.add_output_metadata(
            {
                "table": table,
                "write_seconds": round(seconds, 2),
                "rows_per_second": round(rows_written / seconds) if seconds else 0,
                "version": version,
                "location": dg.MetadataValue.path(version_root),
                "rows_written": rows_written,
                "rows_per_hour": dg.MetadataValue.json(
                    {h: stats.get(h, (0, ""))[0] for h in hours}
                ),
                "checksum_per_hour": dg.MetadataValue.json(
                    {h: stats.get(h, (0, "0:0"))[1] for h in hours}
                ),
            }
        )

    def load_input(self, context: dg.InputContext) -> DataFrame:
        """The newest shadow version of each requested hour."""
        table = table_name(context.asset_key)
        hours = sorted(context.asset_partition_keys)
        latest = (
            audit.read(self.spark, audit.SHADOW_PARTITIONS)
            .where((F.col("table_name") == table) & F.col("hour").isin(hours))
            .withColumn(
                "rank",
                F.row_number().over(Window.partitionBy("hour").orderBy(F.col("written_at").desc())),
            )
            .where(F.col("rank") == 1)
            .select("hour", "version")
        )
        return self.spark.table(table).join(latest, ["hour", "version"], "inner")
